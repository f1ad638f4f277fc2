"""SkuEnv: one SKU of a skurl catalog as a `gymnasium.Env`.

The SKU is simulated on its own (a one-row simulator), with the observation width of the
whole catalog, so a policy trained here reads the features SkuVectorEnv gives every SKU.
A SKU in a substitution group has no substitutes here (they are not simulated). Episodes
truncate on day sim.days (`truncated=True`; there is no terminal state); `info` holds the
day's cost breakdown and flows (DayMetrics fields) as floats.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium
import numpy as np

from skurl.catalog import Catalog
from skurl.errors import ConfigError
from skurl.gym.core import ConfigSource, SimDriver, resolve_catalog, resolve_config
from skurl.gym.spaces import action_space, observation_space
from skurl.policy.grid_center import GridCenter
from skurl.sim.layout import catalog_widths


class SkuEnv(gymnasium.Env):
    """Row `sku` of the catalog (cfg.catalog, or `catalog`) as a single-agent env."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012

    def __init__(self, config: ConfigSource = None, overrides: Sequence[str] = (), *,
                 catalog: Catalog | None = None, sku: int = 0, seed: int | None = None,
                 grid_center: GridCenter | None = None, render_mode: str | None = None) -> None:
        if render_mode is not None:
            raise ValueError(f"render_mode = {render_mode!r}: skurl envs do not render (expected None)")
        cfg = resolve_config(config, overrides)
        cat = resolve_catalog(cfg, catalog, None)
        if isinstance(sku, bool) or not isinstance(sku, (int, np.integer)) or not 0 <= sku < len(cat):
            raise ConfigError(f"sku = {sku!r}: expected a row index in [0, {len(cat) - 1}] of the catalog")
        self._sim = SimDriver(cfg, cat.subset(np.array([int(sku)])), seed, min_widths=catalog_widths(cat),
                              center=grid_center)
        self.observation_space = observation_space(self._sim.env.schema)
        self.action_space = action_space(self._sim.grid)

    @property
    def sim(self) -> SimDriver:
        return self._sim

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        return self._sim.reset(seed)[0], {}

    def step(self, action: object) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        result = self._sim.step(action)
        info = SimDriver.metrics_of(result, 0)
        return result.obs.features[0].copy(), float(result.reward[0]), False, bool(result.done), info

    def close(self) -> None:
        self._sim.env.close()
