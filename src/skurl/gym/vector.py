"""SkuVectorEnv: a `gymnasium.vector.VectorEnv` whose sub-envs are the SKUs of one simulator.

One skurl VectorEnv steps every SKU in one numba call, so N sub-envs cost one simulator,
not N. All SKUs live in lock step: every episode truncates on day sim.days for all of
them at once (there is no terminal state), and an autoreset restarts them all.

More: docs/internals.md (gym/vector.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector import VectorEnv as GymVectorEnv
from gymnasium.vector.utils import batch_space

from skurl.catalog import Catalog
from skurl.gym.core import ConfigSource, SimDriver, resolve_catalog, resolve_config
from skurl.gym.spaces import action_space, observation_space
from skurl.policy.grid_center import GridCenter


def _masked(info: dict[str, Any], n: int) -> dict[str, Any]:
    """Gymnasium's vector info layout: every key paired with a `_key` mask (all SKUs here)."""
    out = dict(info)
    for key in info:
        out[f"_{key}"] = np.ones(n, bool)
    return out


class SkuVectorEnv(GymVectorEnv):
    """One sub-env per SKU of the catalog (its first `num_envs` SKUs when given)."""

    metadata: dict[str, Any] = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}  # noqa: RUF012

    def __init__(self, config: ConfigSource = None, overrides: Sequence[str] = (), *,
                 catalog: Catalog | None = None, num_envs: int | None = None, seed: int | None = None,
                 autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
                 grid_center: GridCenter | None = None, info_metrics: bool = True,
                 render_mode: str | None = None) -> None:
        if render_mode is not None:
            raise ValueError(f"render_mode = {render_mode!r}: skurl envs do not render (expected None)")
        cfg = resolve_config(config, overrides)
        cat = resolve_catalog(cfg, catalog, num_envs)
        self._sim = SimDriver(cfg, cat, seed, center=grid_center)
        self.num_envs = self._sim.num_skus
        self.single_observation_space = observation_space(self._sim.env.schema)
        self.single_action_space = action_space(self._sim.grid)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata = {**self.metadata, "autoreset_mode": AutoresetMode(autoreset_mode)}
        self.info_metrics = bool(info_metrics)
        self._autoreset = False  # NEXT_STEP: the last step truncated

    @property
    def sim(self) -> SimDriver:
        """The simulator, grid and catalog behind the sub-envs (sim.env.catalog: SKU rows)."""
        return self._sim

    @property
    def autoreset_mode(self) -> AutoresetMode:
        return self.metadata["autoreset_mode"]

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        if seed is not None and not isinstance(seed, (int, np.integer)):
            raise ValueError(f"reset: seed = {seed!r}, expected one integer (the run seed of all SKUs)")
        mask = (options or {}).get("reset_mask")
        if mask is not None and not np.all(mask):
            raise ValueError("reset: options['reset_mask'] must be all True (the SKUs share one day "
                             "counter; they end and restart together)")
        super().reset(seed=seed)
        self._autoreset = False
        return self._sim.reset(None if seed is None else int(seed)), {}

    def step(self, actions: object) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        n = self.num_envs
        if self._autoreset:
            self._autoreset = False
            obs = self._sim.reset()
            return obs, np.zeros(n), np.zeros(n, bool), np.zeros(n, bool), {}
        result = self._sim.step(actions)
        obs = result.obs.features.copy()
        reward = result.reward.astype(np.float64)
        truncated = np.full(n, result.done)
        info = _masked(SimDriver.metrics(result), n) if self.info_metrics else {}
        if result.done and self.autoreset_mode == AutoresetMode.NEXT_STEP:
            self._autoreset = True
        elif result.done and self.autoreset_mode == AutoresetMode.SAME_STEP:
            info = _masked({"final_obs": obs, "final_info": info}, n)
            obs = self._sim.reset()
        return obs, reward, np.zeros(n, bool), truncated, info

    def close_extras(self, **kwargs: Any) -> None:
        self._sim.env.close()
