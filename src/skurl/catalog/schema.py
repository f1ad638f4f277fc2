"""The catalog: one struct of arrays, one row per SKU-location.

Every simulator, baseline and learner reads SKU parameters from here. Columns are
named once (`COLUMNS`) with dtype, bounds and meaning; loaders and generators build a
`Catalog`, and `Catalog.validate()` rejects bad rows with the SKU id and field.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from skurl.errors import CatalogError

DIST_CODES = {"poisson": 0, "geometric": 1, "negbin": 2}
DIST_NAMES = {v: k for k, v in DIST_CODES.items()}
WEEK = 7


@dataclass(frozen=True)
class Column:
    name: str
    dtype: Any
    lo: float
    hi: float
    help: str


# Bounds are inclusive. `season_0..season_6` are stored as one [N, 7] array `season`.
COLUMNS: tuple[Column, ...] = (
    Column("sku_id", np.int64, 0, 2**62, "stable SKU-location id; seeds its random numbers"),
    Column("category", np.int32, 0, 2**31 - 1, "product category (segments, normalization)"),
    Column("group", np.int32, -1, 2**31 - 1, "substitution group; -1 = none"),
    Column("sub_frac", np.float32, 0.0, 1.0, "share of unmet demand that moves to substitutes"),
    Column("demand_mean", np.float32, 0.0, 1e7, "base demand per day"),
    Column("demand_dist", np.int8, 0, 2, "0 poisson, 1 geometric, 2 negbin"),
    Column("dispersion", np.float32, 1e-6, 1e9, "negbin size r: var = mean + mean^2/r"),
    Column("trend", np.float32, -0.05, 0.05, "daily log-growth of demand"),
    Column("promo_uplift", np.float32, 0.0, 50.0, "demand multiplier on promotion days minus 1"),
    Column("promo_period", np.int32, 0, 10_000, "days between promotion starts; 0 = no promotions"),
    Column("promo_length", np.int32, 0, 10_000, "promotion length in days"),
    Column("promo_offset", np.int32, 0, 10_000, "day of the first promotion start"),
    Column("lead_time", np.int32, 1, 60, "days from order to availability"),
    Column("delay_prob", np.float32, 0.0, 1.0, "probability an order arrives late"),
    Column("delay_max", np.int32, 0, 30, "longest extra delay in days"),
    Column("shelf_life", np.int32, 0, 365, "days a unit can be sold; 0 = never expires"),
    Column("holding_cost", np.float32, 0.0, 1e9, "per unit on hand at end of day"),
    Column("lost_sale_cost", np.float32, 0.0, 1e9, "per unit unmet (lost, or backordered per day)"),
    Column("order_cost", np.float32, 0.0, 1e9, "fixed per order placed"),
    Column("unit_cost", np.float32, 0.0, 1e9, "per unit ordered"),
    Column("waste_cost", np.float32, 0.0, 1e9, "per expired unit"),
    Column("price", np.float32, 0.0, 1e9, "revenue per unit sold"),
    Column("forecast_noise", np.float32, 0.0, 5.0, "lognormal sigma of the forecast error"),
)
SEASON_COLUMNS = tuple(f"season_{d}" for d in range(WEEK))


@dataclass
class Catalog:
    """SKU parameters as arrays of length N (season: [N, 7], mean 1 per row)."""

    sku_id: np.ndarray
    category: np.ndarray
    group: np.ndarray
    sub_frac: np.ndarray
    demand_mean: np.ndarray
    demand_dist: np.ndarray
    dispersion: np.ndarray
    trend: np.ndarray
    promo_uplift: np.ndarray
    promo_period: np.ndarray
    promo_length: np.ndarray
    promo_offset: np.ndarray
    lead_time: np.ndarray
    delay_prob: np.ndarray
    delay_max: np.ndarray
    shelf_life: np.ndarray
    holding_cost: np.ndarray
    lost_sale_cost: np.ndarray
    order_cost: np.ndarray
    unit_cost: np.ndarray
    waste_cost: np.ndarray
    price: np.ndarray
    forecast_noise: np.ndarray
    season: np.ndarray

    def __post_init__(self) -> None:
        for col in COLUMNS:
            arr = np.ascontiguousarray(getattr(self, col.name), dtype=col.dtype)
            object.__setattr__(self, col.name, arr)
        self.season = np.ascontiguousarray(self.season, dtype=np.float32).reshape(-1, WEEK)

    def __len__(self) -> int:
        return int(self.sku_id.shape[0])

    @property
    def max_lead_time(self) -> int:
        return int(self.lead_time.max(initial=1))

    @property
    def max_delay(self) -> int:
        return int(self.delay_max.max(initial=0))

    @property
    def max_shelf_life(self) -> int:
        return int(self.shelf_life.max(initial=0))

    def subset(self, index: np.ndarray) -> Catalog:
        """Rows `index` (any order); a shard of the catalog."""
        return Catalog(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    @staticmethod
    def concat(parts: list[Catalog]) -> Catalog:
        return Catalog(**{f.name: np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(Catalog)})

    def columns(self) -> dict[str, np.ndarray]:
        """Flat columns (season split into season_0..season_6) for files and tables."""
        out = {c.name: getattr(self, c.name) for c in COLUMNS}
        for d in range(WEEK):
            out[SEASON_COLUMNS[d]] = self.season[:, d]
        return out

    def validate(self) -> Catalog:
        """Raise CatalogError naming the first bad SKU id and field; return self if fine."""
        n = len(self)
        if n == 0:
            raise CatalogError("catalog: no SKUs (expected at least one row)")
        for f in fields(self):
            arr = getattr(self, f.name)
            if arr.shape[0] != n:
                raise CatalogError(f"catalog field '{f.name}': {arr.shape[0]} rows, expected {n}")
        for col in COLUMNS:
            arr = getattr(self, col.name)
            bad = ~np.isfinite(arr) if arr.dtype.kind == "f" else np.zeros(n, bool)
            bad |= (arr < col.lo) | (arr > col.hi)
            if bad.any():
                i = int(np.argmax(bad))
                raise CatalogError(
                    f"catalog SKU {int(self.sku_id[i])}: field '{col.name}' = {arr[i].item()!r}, "
                    f"expected a finite value in [{col.lo:g}, {col.hi:g}] ({col.help})"
                )
        season_bad = ~np.isfinite(self.season) | (self.season < 0) | (self.season > 100)
        if season_bad.any():
            i, d = np.argwhere(season_bad)[0]
            raise CatalogError(
                f"catalog SKU {int(self.sku_id[i])}: field 'season_{d}' = {self.season[i, d].item()!r}, "
                "expected a finite weekly factor in [0, 100]"
            )
        _, first = np.unique(self.sku_id, return_index=True)
        if first.shape[0] != n:
            dup = np.setdiff1d(np.arange(n), first)[0]
            raise CatalogError(f"catalog SKU {int(self.sku_id[dup])}: field 'sku_id' is duplicated, expected unique ids")
        return self
