"""The catalog: one struct of arrays, one row per SKU-location.

Every simulator, baseline and learner reads SKU parameters from here. Columns are
named once (`COLUMNS`) with dtype, bounds and meaning; loaders and generators build a
`Catalog`, and `Catalog.validate()` rejects bad rows with the SKU id and field.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields

import numpy as np

from skurl.columns import COLUMNS, LINK_COLUMNS, NETWORK_COLUMNS
from skurl.errors import CatalogError

DIST_CODES = {"poisson": 0, "geometric": 1, "negbin": 2}
DIST_NAMES = {v: k for k, v in DIST_CODES.items()}
WEEK = 7
SEASON_COLUMNS = tuple(f"season_{d}" for d in range(WEEK))
NETWORK_NAMES = tuple(c.name for c in NETWORK_COLUMNS)
LINK_NAMES = tuple(c.name for c in LINK_COLUMNS)


@dataclass
class Catalog:
    """SKU parameters as arrays of length N (season: [N, 7], mean 1 per row); `upstream` and
    `item` (NETWORK_COLUMNS) default to -1: no supply network; `ship_cost` (LINK_COLUMNS) to 0
    (docs/networks.md)."""

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
    upstream: np.ndarray = None  # type: ignore[assignment]  # None at init only: __post_init__ sets -1s
    item: np.ndarray = None  # type: ignore[assignment]  # None at init only: __post_init__ sets -1s
    ship_cost: np.ndarray = None  # type: ignore[assignment]  # None at init only: __post_init__ sets 0s

    def __post_init__(self) -> None:
        for col in COLUMNS:
            arr = np.ascontiguousarray(getattr(self, col.name), dtype=col.dtype)
            object.__setattr__(self, col.name, arr)
        for col in NETWORK_COLUMNS:
            value = getattr(self, col.name)
            arr = np.full(self.sku_id.shape[0], -1) if value is None else value
            object.__setattr__(self, col.name, np.ascontiguousarray(arr, dtype=col.dtype))
        for col in LINK_COLUMNS:
            value = getattr(self, col.name)
            arr = np.zeros(self.sku_id.shape[0]) if value is None else value
            object.__setattr__(self, col.name, np.ascontiguousarray(arr, dtype=col.dtype))
        self.season = np.ascontiguousarray(self.season, dtype=np.float32).reshape(-1, WEEK)

    def __len__(self) -> int:
        return int(self.sku_id.shape[0])

    @property
    def has_network(self) -> bool:
        """True when some row is supplied by another (docs/networks.md)."""
        return bool((self.upstream >= 0).any())

    @property
    def max_lead_time(self) -> int:
        return int(self.lead_time.max(initial=1))

    @property
    def max_delay(self) -> int:
        return int(self.delay_max.max(initial=0))

    @property
    def max_shelf_life(self) -> int:
        return int(self.shelf_life.max(initial=0))

    def subset(self, index: np.ndarray | slice) -> Catalog:
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
        if self.has_network or (self.item >= 0).any():
            out.update({c.name: getattr(self, c.name) for c in NETWORK_COLUMNS})
        out.update({c.name: getattr(self, c.name) for c in LINK_COLUMNS if (getattr(self, c.name) != 0).any()})
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
        for col in COLUMNS + NETWORK_COLUMNS + LINK_COLUMNS:
            arr = getattr(self, col.name)
            bad = ~np.isfinite(arr) if arr.dtype.kind == "f" else np.zeros(n, bool)
            bad |= (arr < col.lo) | (arr > col.hi)
            if col.name == "lead_time":  # a link from an upstream location may take 0 days
                bad &= ~((arr == 0) & (self.upstream >= 0))
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
        if self.has_network:
            from skurl.catalog.network import validate_network

            validate_network(self)
        return self


def catalog_digest(catalog: Catalog) -> str:
    """sha256 of every column of `catalog` (names and bytes): equal digests, equal SKUs."""
    h = hashlib.sha256()
    for f in fields(catalog):
        if f.name in NETWORK_NAMES and not (getattr(catalog, f.name) >= 0).any():
            continue  # network-free catalogs keep the digests they had before these columns
        if f.name in LINK_NAMES and not (getattr(catalog, f.name) != 0).any():
            continue  # so do catalogs without shipping costs
        h.update(f.name.encode())
        h.update(np.ascontiguousarray(getattr(catalog, f.name)).tobytes())
    return h.hexdigest()
