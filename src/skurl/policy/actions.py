"""Discrete action grids: action index -> order quantity in units (DESIGN section 3)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from skurl.config import ActionsConfig
from skurl.sim.env import MAX_ORDER


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
        return self.to_orders_checked(idx, forecast_today)[0]

    def to_orders_checked(self, index: np.ndarray, forecast_today: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Units (float64 [N]) and the mask of SKUs whose order was clipped into [0, MAX_ORDER]:
        a forecast that exploded (or is NaN) must not make the env reject the whole batch
        (DESIGN 3: a failing SKU is isolated and reported). NaN orders become 0."""
        v = self.values[np.asarray(index)]
        if self.kind == "units":
            return v, np.zeros(v.shape[0], bool)
        base = np.maximum(forecast_today.astype(np.float64) * self.review_days, 1.0)
        with np.errstate(invalid="ignore", over="ignore"):
            units = np.floor(v * base + 0.5)
        bad = ~((units >= 0.0) & (units <= MAX_ORDER))  # NaN fails both
        if bad.any():
            units[bad] = np.where(units[bad] > MAX_ORDER, MAX_ORDER, 0.0)
        return units, bad


def report_clipped(log: logging.Logger, bad: np.ndarray, sku_ids: np.ndarray | None, day: int) -> int:
    """Log the SKUs whose orders were clipped (first few ids); returns how many."""
    count = int(bad.sum())
    if count:
        rows = np.flatnonzero(bad)[:5]
        ids = rows if sku_ids is None else np.asarray(sku_ids)[rows]
        log.warning("day %d: %d SKU order(s) clipped into [0, %g] (forecast not finite or too "
                    "large), SKU ids %s%s", day, count, MAX_ORDER, ids.tolist(), " ..." if count > 5 else "")
    return count
