"""The catalog's columns (name, dtype, inclusive bounds, meaning) and their strata, named
once: the catalog (catalog/schema.py) checks its rows against them and the config
(config/sections.py, config/dcl.py) its catalog.uniform and dcl.stratify keys. A leaf
package, so that config never imports the catalog package (which reads config)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


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

# Optional supply-network columns (docs/networks.md): outside COLUMNS so that network-free
# catalogs, their files and digests stay as they were; -1 everywhere = no network.
NETWORK_COLUMNS: tuple[Column, ...] = (
    Column("upstream", np.int64, -1, 2**62, "sku_id of the SKU-location that supplies this one; -1 = outside supplier"),
    Column("item", np.int64, -1, 2**62, "product shared by the SKU-locations of a network; -1 = unspecified"),
)

# Optional link columns (docs/networks.md): default 0, outside COLUMNS for the same reason;
# a file carries them only when some row is not 0.
LINK_COLUMNS: tuple[Column, ...] = (
    Column("ship_cost", np.float32, 0.0, 1e9, "per unit shipped to this row from its upstream location"),
)
