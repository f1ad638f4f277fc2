"""Gymnasium spaces of one SKU, read from the observation schema and the action grid.

Bounds are what the simulator and a validated catalog guarantee: quantities in days of
demand are >= 0 and finite float32 (unit counts are int64), flags and the day-of-week one-hot
lie in [0, 1], lead time and shelf life in their catalog column bounds (catalog/schema.py), and
log demand, log(demand_mean + 1e-3), is the one signed feature. A SKU isolated at run time
(non-finite parameters) may show NaN features, which no Box contains.
"""

from __future__ import annotations

import math

import numpy as np
from gymnasium import spaces

from skurl.catalog.schema import COLUMNS
from skurl.policy.actions import ActionGrid
from skurl.sim.api import ObsSchema

FLOAT32_MAX = float(np.finfo(np.float32).max)
_COLUMN = {c.name: c for c in COLUMNS}
_MEAN = _COLUMN["demand_mean"]
# (low, high) per schema field; fields not listed are quantities in [0, FLOAT32_MAX].
FIELD_BOUNDS: dict[str, tuple[float, float]] = {
    "promo_today": (0.0, 1.0),
    "promo_ahead": (0.0, 1.0),
    "day_of_week": (0.0, 1.0),
    "lead_time": (_COLUMN["lead_time"].lo, _COLUMN["lead_time"].hi),
    "shelf_life": (_COLUMN["shelf_life"].lo, _COLUMN["shelf_life"].hi),
    # layout._log_demand, rounded outwards (float32 rounding of the feature)
    "log_demand": (math.floor(math.log(_MEAN.lo + 1e-3)), math.ceil(math.log(_MEAN.hi + 1e-3))),
}


def observation_space(schema: ObsSchema) -> spaces.Box:
    """Box [schema.dim] float32, bounded per field (FIELD_BOUNDS)."""
    low = np.zeros(schema.dim, np.float32)
    high = np.full(schema.dim, FLOAT32_MAX, np.float32)
    for name, cols in schema.slices().items():
        low[cols], high[cols] = FIELD_BOUNDS.get(name, (0.0, FLOAT32_MAX))
    return spaces.Box(low=low, high=high, dtype=np.float32)


def action_space(grid: ActionGrid) -> spaces.Discrete:
    """Discrete(grid.n): an index into the action grid (policy.actions)."""
    return spaces.Discrete(grid.n)
