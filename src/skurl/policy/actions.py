"""Discrete action grids: action index -> order quantity in units (DESIGN section 3)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from skurl.config import ActionsConfig


@dataclass(frozen=True)
class ActionGrid:
    """`multiplier`: order = round(m_k x max(forecast x review_days, 1)); the floor of one
    unit lets slow movers (forecast << 1/day) order at all. `units`: order = k x step."""

    kind: str
    values: np.ndarray  # float64 [n]: multipliers or units per index
    review_days: int = 1

    @classmethod
    def from_config(cls, cfg: ActionsConfig, review_days: int = 1) -> ActionGrid:
        if cfg.kind == "multiplier":
            values = np.linspace(0.0, cfg.max, cfg.n)
        else:
            values = np.arange(cfg.n, dtype=np.float64) * cfg.step
        return cls(kind=cfg.kind, values=values, review_days=review_days)

    @property
    def n(self) -> int:
        return int(self.values.shape[0])

    def to_orders(self, index: np.ndarray, forecast_today: np.ndarray) -> np.ndarray:
        """Units (float64 [N]) for action indices [N] given today's forecast [N]."""
        idx = np.asarray(index)
        if idx.ndim != 1 or idx.shape != forecast_today.shape:
            raise ValueError(f"actions: shape {idx.shape}, expected ({forecast_today.shape[0]},)")
        if idx.size and (idx.min() < 0 or idx.max() >= self.n):
            raise ValueError(f"actions: indices must lie in [0, {self.n - 1}]")
        v = self.values[idx]
        if self.kind == "units":
            return v
        base = np.maximum(forecast_today.astype(np.float64) * self.review_days, 1.0)
        return np.floor(v * base + 0.5)
