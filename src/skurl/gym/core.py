"""What both Gymnasium envs share: a config and catalog resolved, one skurl simulator with its
bound action grid, and the seed/episode bookkeeping of Gymnasium's reset.

Seeding: `reset(seed=s)` starts episode 0 of run seed `s`; a reset without a seed (or an
autoreset) starts the next episode of the same run seed, so a seeded reset replays the
same sequence of episodes. A SKU's draws are keyed by its SKU id (sim/rng.py), so the
sub-envs of one vector env differ without seeds of their own.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from skurl.catalog import Catalog, load_catalog
from skurl.config import Config, config_to_dict, load_config, refuse_moved
from skurl.config.loader import apply_overrides, build
from skurl.errors import ConfigError
from skurl.policy.actions import ActionGrid, report_clipped
from skurl.policy.grid_center import GridCenter, tune_center
from skurl.sim.api import ActionError, EnvStateError, Obs, StepResult
from skurl.sim.env import VectorEnv
from skurl.sim.state import METRIC_FIELDS

log = logging.getLogger("skurl.gym")
ConfigSource = str | Path | Config | None


def resolve_config(config: ConfigSource = None, overrides: Sequence[str] = ()) -> Config:
    """A Config from a YAML path (or a Config, or the defaults) plus `a.b=value` overrides."""
    if isinstance(config, Config):
        refuse_moved({}, list(overrides))
        return build(Config, apply_overrides(config_to_dict(config), list(overrides), Config))
    return load_config(config, list(overrides))


def resolve_catalog(cfg: Config, catalog: Catalog | None, skus: int | None) -> Catalog:
    """`catalog` (validated) or the one cfg.catalog describes; its first `skus` rows if given."""
    if skus is not None and (isinstance(skus, bool) or not isinstance(skus, (int, np.integer)) or skus < 1):
        raise ConfigError(f"num_envs = {skus!r}: expected an integer >= 1 (SKUs simulated)")
    cat = load_catalog(cfg.catalog, skus) if catalog is None else catalog.validate()
    if skus is not None and skus > len(cat):
        raise ConfigError(f"num_envs = {skus}: the catalog has only {len(cat)} SKU(s)")
    return cat if skus is None or skus == len(cat) else cat.subset(np.arange(skus))


def bound_grid(cfg: Config, catalog: Catalog, center: GridCenter | None) -> ActionGrid:
    """The config's action grid bound to `catalog`; a tuned cover grid uses `center` or,
    without one, tunes it here (the baseline tuner: slow on big catalogs)."""
    grid = ActionGrid.from_config(cfg.policy.actions, cfg.sim.review_days, reward=cfg.sim.reward)
    if grid.needs_center:
        grid = grid.with_center(center if center is not None else tune_center(cfg, catalog))
    return grid.bind(catalog)


class SimDriver:
    """One skurl VectorEnv over `catalog`, driven by action indices of its grid."""

    def __init__(self, cfg: Config, catalog: Catalog, seed: int | None = None,
                 min_widths: tuple[int, int] = (0, 0), center: GridCenter | None = None) -> None:
        self.cfg = cfg
        self.env = VectorEnv(catalog, cfg.sim, min_widths)
        self.grid = bound_grid(cfg, catalog, center)
        self.seed = cfg.train.seed if seed is None else seed
        self.episode = -1
        self._obs: Obs | None = None

    @property
    def num_skus(self) -> int:
        return self.env.num_skus

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Features (a copy) of day 0: episode 0 of `seed`, else the next episode."""
        run, episode = (seed, 0) if seed is not None else (self.seed, self.episode + 1)
        self._obs = self.env.reset(run, episode)  # checks the seed before it is kept
        self.seed, self.episode = run, episode
        return self._obs.features.copy()

    def step(self, actions: object) -> StepResult:
        """Simulate today with grid action indices [N]; the StepResult views the env's buffers."""
        if self._obs is None:
            raise EnvStateError("step: call reset() first")
        index = self._check_actions(actions)
        orders, clipped = self.grid.orders_for(index, self._obs.raw)
        if clipped.any():
            report_clipped(log, clipped, self.env.catalog.sku_id, self._obs.raw.day)
        result = self.env.step(orders)
        self._obs = result.obs
        return result

    def _check_actions(self, actions: object) -> np.ndarray:
        arr = np.asarray(actions)
        n, k = self.num_skus, self.grid.n
        if arr.shape != (n,) and not (n == 1 and arr.size == 1):
            raise ActionError(f"actions: shape {arr.shape}, expected ({n},) (one action index per SKU)")
        arr = arr.reshape(n)
        if arr.dtype.kind not in "iu":
            raise ActionError(f"actions: dtype {arr.dtype}, expected integer action indices")
        if arr.min() < 0 or arr.max() >= k:
            raise ActionError(f"actions: indices must lie in [0, {k - 1}] (policy.actions.n = {k}), "
                              f"got {int(arr.min())}..{int(arr.max())}")
        return arr.astype(np.int64, copy=False)

    @staticmethod
    def metrics(result: StepResult) -> dict[str, np.ndarray]:
        """The day's cost breakdown and flows per SKU (float64 [N] each, one fresh copy) and
        the mask of SKUs isolated at run time."""
        block = np.array(result.metrics.block, dtype=np.float64)  # its later fields may be left out: zeros
        out = {name: block[:, k] if k < block.shape[1] else np.zeros(block.shape[0])
               for k, name in enumerate(METRIC_FIELDS)}
        out["failed"] = result.failed.copy()
        return out

    @staticmethod
    def metrics_of(result: StepResult, row: int) -> dict[str, float | bool]:
        """`metrics` of one SKU row, as Python scalars."""
        values = np.asarray(result.metrics.block)[row].tolist()
        values += [0.0] * (len(METRIC_FIELDS) - len(values))  # fields the block leaves out are zeros
        out: dict[str, float | bool] = dict(zip(METRIC_FIELDS, values, strict=True))
        out["failed"] = bool(result.failed[row])
        return out
