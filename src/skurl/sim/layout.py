"""Widths of the state arrays and the observation schema, derived from a catalog.

A = longest shelf life (expiring-by-day columns; 0 without perishables),
P = longest lead time + longest supplier delay (pipeline slots),
H = P + review days (forecast days in the raw state).
The feature order is the contract of sim/api.ObsSchema (docs/architecture.md, Simulator semantics).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit

from skurl.catalog.schema import Catalog
from skurl.sim.api import ObsSchema
from skurl.sim.demand import DIST_GEOMETRIC, DIST_NEGBIN

WEEK = 7
N_ECONOMICS = 6
# Columns of the per-SKU block of features that never change (filled once per env).
STATIC_FIELDS = ("lead_time", "shelf_life", "log_demand", "economics", "demand_dispersion")


@dataclass(frozen=True)
class Layout:
    expiring: int  # A
    pipeline: int  # P
    horizon: int  # H
    schema: ObsSchema

    @property
    def dim(self) -> int:
        return self.schema.dim


# Appended only for catalogs with supply networks (docs/networks.md), in days of the row's demand.
NETWORK_FIELDS = (("upstream_on_hand", 1), ("upstream_pipeline", 1), ("upstream_backlog", 1),
                  ("echelon_position", 1), ("echelon", 1))


def schema_for(expiring: int, pipeline: int, network: bool = False) -> ObsSchema:
    extra = NETWORK_FIELDS if network else ()
    return ObsSchema(fields=(
        ("on_hand", 1),
        ("expiring", expiring),
        ("backlog", 1),
        ("pipeline", pipeline),
        ("forecast_today", 1),
        ("forecast_protection", 1),
        ("sales_yesterday", 1),
        ("sales_week", 1),
        ("lost_yesterday", 1),
        ("lead_time", 1),
        ("shelf_life", 1),
        ("promo_today", 1),
        ("promo_ahead", 1),
        ("day_of_week", WEEK),
        ("log_demand", 1),
        ("economics", N_ECONOMICS),
        ("demand_dispersion", 1),
        *extra,
    ))


def catalog_widths(catalog: Catalog) -> tuple[int, int]:
    """(A, P) of `catalog`: the widths its own SKUs need."""
    return catalog.max_shelf_life, catalog.max_lead_time + catalog.max_delay


def layout_for(catalog: Catalog, review_days: int, min_widths: tuple[int, int] = (0, 0)) -> Layout:
    """The layout of an env over `catalog`, at least `min_widths` = (A, P) wide.

    A subset of a catalog (an evaluation sample, a training shard) passes the whole
    catalog's `catalog_widths` so that its features line up with the network's inputs;
    the extra columns stay zero, exactly what the whole-catalog env shows there."""
    own_a, own_p = catalog_widths(catalog)
    expiring, pipeline = max(own_a, int(min_widths[0])), max(own_p, int(min_widths[1]))
    return Layout(expiring, pipeline, pipeline + review_days,
                  schema_for(expiring, pipeline, catalog.has_network))


def feature_scale(demand_mean: np.ndarray) -> np.ndarray:
    """scale_i = max(demand_mean_i, 0.1) (float64): quantities are shown in days of demand."""
    return np.maximum(demand_mean.astype(np.float64), 0.1)


def economics_features(catalog: Catalog) -> np.ndarray:
    """float32 [N, 6]: holding, lost-sale, unit, waste cost, price, order_cost / scale, each
    divided by v_i = max(price, lost_sale_cost + holding_cost, 1e-6) (a unit's value)."""
    h = catalog.holding_cost.astype(np.float64)
    p = catalog.lost_sale_cost.astype(np.float64)
    price = catalog.price.astype(np.float64)
    v = np.maximum(np.maximum(price, p + h), 1e-6)
    cols = (h, p, catalog.unit_cost.astype(np.float64), catalog.waste_cost.astype(np.float64),
            price, catalog.order_cost.astype(np.float64) / feature_scale(catalog.demand_mean))
    return np.stack([c / v for c in cols], axis=1).astype(np.float32)


@njit(cache=True)
def _log_demand(demand_mean: np.ndarray) -> np.ndarray:
    # math.log (the C library's), not np.log (numpy's own SIMD code may differ in the last
    # bit), so the scalar reference computes the very same feature.
    out = np.empty(demand_mean.shape[0], np.float64)
    for i in range(demand_mean.shape[0]):
        x = np.float64(demand_mean[i]) + 1e-3
        out[i] = math.log(x) if x > 0.0 else np.nan
    return out


@njit(cache=True)
def _log_dispersion(demand_mean: np.ndarray, dist: np.ndarray, size: np.ndarray) -> np.ndarray:
    # log(variance / mean) of a day's demand at the base mean: 0 Poisson, log(1 + m)
    # geometric, log(1 + m / r) negative binomial (size r). math.log1p, as the reference.
    out = np.empty(demand_mean.shape[0], np.float64)
    for i in range(demand_mean.shape[0]):
        m = max(np.float64(demand_mean[i]), 0.0)
        if dist[i] == DIST_GEOMETRIC:
            out[i] = math.log1p(m)
        elif dist[i] == DIST_NEGBIN:
            out[i] = math.log1p(m / np.float64(size[i]))
        else:
            out[i] = 0.0
    return out


def dispersion_feature(catalog: Catalog) -> np.ndarray:
    """float64 [N]: the demand_dispersion feature, log(var / mean) of the SKU's declared
    distribution at its base mean (Poisson 0). With log_demand it gives the demand's shape
    (CV^2 = exp(dispersion - log mean)), so SKUs of equal mean but different families or
    dispersions look different to the network (Poisson and geometric looked alike)."""
    return _log_dispersion(catalog.demand_mean, catalog.demand_dist.astype(np.int64), catalog.dispersion)


def static_features(catalog: Catalog) -> np.ndarray:
    """float32 [N, 10]: lead_time, shelf_life, log_demand, economics[6], demand_dispersion
    (constant per SKU)."""
    out = np.empty((len(catalog), 4 + N_ECONOMICS), np.float32)
    out[:, 0] = catalog.lead_time
    out[:, 1] = catalog.shelf_life
    out[:, 2] = _log_demand(catalog.demand_mean)
    out[:, 3:3 + N_ECONOMICS] = economics_features(catalog)
    out[:, 3 + N_ECONOMICS] = dispersion_feature(catalog)
    return out
