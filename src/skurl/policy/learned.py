"""A trained policy behind the Policy protocol, so `evaluate()` scores it exactly like
the baselines (same seeds, same env, common random numbers).

Greedy by default (the most probable order quantity of each SKU); `sample=True` draws by
inverse CDF with the same counter-based noise as the collectors.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch

from skurl.catalog.schema import Catalog
from skurl.config import Config
from skurl.errors import UserError
from skurl.policy.action_noise import ActionUniforms
from skurl.policy.actions import ActionGrid, clip_orders, report_clipped
from skurl.policy.cover_decode import cover_greedy
from skurl.policy.nets import (
    ActorCritic,
    InferenceNets,
    greedy,
    input_tensor,
    sample_inverse_cdf,
)
from skurl.policy.quantity_decode import greedy_quantity
from skurl.sim.api import Obs

CONFIG_FILE = "config.yaml"
log = logging.getLogger("skurl.policy")


def run_config_file(run_dir: str | Path, flag: str) -> Path:
    """RUN_DIR/config.yaml, or a one-line UserError (`flag` names the option that gave it)."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise UserError(f"{flag} {run_dir}: not a run directory (no {CONFIG_FILE}); "
                        "expected a directory made by `skurl train`")
    return path


INFER_CHUNK = 16_384  # rows per forward pass (bounds the hidden buffers' memory)


class LearnedPolicy:
    """Orders (units) from an ActorCritic and an ActionGrid."""

    def __init__(
        self,
        model: ActorCritic,
        grid: ActionGrid,
        *,
        name: str = "ppo",
        dtype: torch.dtype = torch.float32,
        chunk: int = INFER_CHUNK,
        sample: bool = False,
        sku_ids: np.ndarray | None = None,
        seed: int = 0,
        info: dict[str, Any] | None = None,
    ) -> None:
        if model.n_actions != grid.n:
            raise ValueError(f"model has {model.n_actions} actions, grid {grid.n}")
        if sample and sku_ids is None:
            raise ValueError("LearnedPolicy(sample=True) needs the sku_ids of the rows it will see")
        self.name = name
        self.grid = grid
        self.model = model  # the ActorCritic itself (serve/export.py exports it)
        self.nets = InferenceNets(model, dtype)
        self.chunk = int(chunk)
        self.sample = sample
        self.sku_ids = sku_ids
        self.seed = int(seed)
        self.info = dict(info or {})
        self._episode = -1
        self._noise: ActionUniforms | None = None  # when sampling
        self.nets_dim = model.obs_dim
        self.clipped_orders = 0  # SKU-days whose order was clipped into the env's range

    def reset(self) -> None:
        """A new episode starts (evaluate() calls this): new sampling noise."""
        self._episode += 1
        if self.sample and self.sku_ids is not None:
            self._noise = ActionUniforms(self.seed, self._episode, self.sku_ids)

    def action_indices(self, obs: Obs) -> np.ndarray:
        return self._decide(obs)[0]

    @torch.inference_mode()
    def _decide(self, obs: Obs) -> tuple[np.ndarray, np.ndarray | None]:
        """Action indices [N], and their orders (unclipped) where the greedy cover decode
        (policy/cover_decode.py) gave them on the way, else None."""
        feats = input_tensor(np.ascontiguousarray(obs.features, np.float32))
        out = np.empty(feats.shape[0], np.int64)
        units = np.empty(feats.shape[0]) if self.grid.kind == "cover" and not self.sample else None
        u = None
        if self.sample:
            if self._noise is None:
                self.reset()
            assert self._noise is not None
            u = torch.from_numpy(self._noise.day(obs.raw.day))
        for s in range(0, feats.shape[0], self.chunk):
            e = s + self.chunk
            logits = self.nets.logits(feats[s:e])
            if u is not None:
                out[s:e] = sample_inverse_cdf(logits, u[s:e])[0].numpy()
            elif self.grid.kind == "units":
                out[s:e] = greedy(logits).numpy()
            elif units is not None:
                out[s:e], units[s:e] = cover_greedy(self.grid, obs.raw, slice(s, e), logits.numpy())
            else:  # policy/quantity_decode.py: most_likely_quantity in one numba pass
                out[s:e] = greedy_quantity(logits.numpy(), self._unit_table(obs, slice(s, e)))
        return out, units

    def _unit_table(self, obs: Obs, rows: slice) -> np.ndarray:
        """Units (float64 [B, A]) each multiplier action would order for SKU rows `rows`."""
        forecast = obs.raw.forecast[rows, 0]
        base = np.maximum(forecast.astype(np.float64) * self.grid.review_days, 1.0)
        return np.floor(self.grid.values[None, :] * base[:, None] + 0.5)

    def orders(self, obs: Obs) -> np.ndarray:
        """Units per SKU; orders of SKUs whose forecast exploded are clipped and reported."""
        if obs.features.shape[1] != self.nets_dim:
            raise UserError(f"policy '{self.name}': observations have {obs.features.shape[1]} features, "
                            f"the network expects {self.nets_dim} (evaluate on the catalog it was "
                            "trained on, or a subset shown with its feature widths)")
        index, decoded = self._decide(obs)
        units, clipped = self.grid.orders_for(index, obs.raw) if decoded is None else clip_orders(decoded)
        if clipped.any():
            self.clipped_orders += report_clipped(log, clipped, self.sku_ids, obs.raw.day)
        return units

    def params(self) -> dict[str, Any]:
        return {"greedy": not self.sample, "actions": self.grid.kind, "n_actions": self.grid.n, **self.info}


def grid_for(cfg: Config, catalog: Catalog | None = None) -> ActionGrid:
    """The run's action grid; bound to `catalog`'s SKUs (row order) when given (the cover
    grid needs them; collectors bind it to their env's catalog themselves)."""
    return ActionGrid.from_config(cfg.policy.actions, cfg.sim.review_days, catalog, cfg.sim.reward)
