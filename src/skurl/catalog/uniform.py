"""Identical SKUs: the classic textbook instances (e.g. Zipkin's lost-sales family)."""

from __future__ import annotations

import numpy as np

from skurl.catalog.schema import DIST_CODES, WEEK, Catalog
from skurl.config import CatalogConfig


def uniform_catalog(cfg: CatalogConfig, skus: int | None = None) -> Catalog:
    """`skus` copies of the SKU described by the uniform keys of `cfg`."""
    n = cfg.skus if skus is None else skus

    def full(value: float, dtype: type) -> np.ndarray:
        return np.full(n, value, dtype=dtype)

    return Catalog(
        sku_id=np.arange(n, dtype=np.int64),
        category=full(0, np.int32),
        group=full(-1, np.int32),
        sub_frac=full(0.0, np.float32),
        demand_mean=full(cfg.demand.mean, np.float32),
        demand_dist=full(DIST_CODES[cfg.demand.dist], np.int8),
        dispersion=full(cfg.demand.dispersion, np.float32),
        trend=full(0.0, np.float32),
        promo_uplift=full(0.0, np.float32),
        promo_period=full(0, np.int32),
        promo_length=full(0, np.int32),
        promo_offset=full(0, np.int32),
        lead_time=full(cfg.lead_time, np.int32),
        delay_prob=full(cfg.supplier_delay_prob, np.float32),
        delay_max=full(cfg.supplier_delay_max, np.int32),
        shelf_life=full(cfg.shelf_life, np.int32),
        holding_cost=full(cfg.holding_cost, np.float32),
        lost_sale_cost=full(cfg.lost_sale_cost, np.float32),
        order_cost=full(cfg.order_cost, np.float32),
        unit_cost=full(cfg.unit_cost, np.float32),
        waste_cost=full(cfg.waste_cost, np.float32),
        price=full(cfg.price, np.float32),
        forecast_noise=full(0.0, np.float32),
        season=np.ones((n, WEEK), dtype=np.float32),
    ).validate()
