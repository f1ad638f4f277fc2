"""Serial supply chains for exact checks (catalog.kind=serial; docs/networks.md).

`catalog.skus` independent copies of one chain: stage 1 is the store (customer demand from
catalog.demand, penalty catalog.lost_sale_cost, price catalog.price), stage N orders from the
outside supplier; catalog.serial gives each link's lead time and each stage's installation
holding cost. Copy c, stage j has sku_id c * N + j - 1 and item c. Upstream stages carry
the store's demand mean as their own (features and initial stock scale by it), no penalty
and no price: only the store meets customers.
"""

from __future__ import annotations

import numpy as np

from skurl.catalog.schema import DIST_CODES, WEEK, Catalog
from skurl.config import CatalogConfig


def serial_catalog(cfg: CatalogConfig, skus: int | None = None) -> Catalog:
    """`skus` (default cfg.skus) copies of the chain of cfg.serial, validated."""
    copies = cfg.skus if skus is None else int(skus)
    leads = np.asarray(cfg.serial.lead_times, np.int32)
    stages = leads.shape[0]
    n = copies * stages
    stage = np.tile(np.arange(stages), copies)  # 0 = store
    sku_id = np.arange(n, dtype=np.int64)
    store = stage == 0

    def full(value: float, dtype: type) -> np.ndarray:
        return np.full(n, value, dtype=dtype)

    return Catalog(
        sku_id=sku_id,
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
        lead_time=leads[stage],
        delay_prob=full(0.0, np.float32),
        delay_max=full(0, np.int32),
        shelf_life=full(0, np.int32),
        holding_cost=np.asarray(cfg.serial.holding, np.float32)[stage],
        lost_sale_cost=np.where(store, cfg.lost_sale_cost, 0.0).astype(np.float32),
        order_cost=full(cfg.order_cost, np.float32),
        unit_cost=full(0.0, np.float32),
        waste_cost=full(0.0, np.float32),
        price=np.where(store, cfg.price, 0.0).astype(np.float32),
        forecast_noise=full(0.0, np.float32),
        season=np.ones((n, WEEK), dtype=np.float32),
        upstream=np.where(stage < stages - 1, sku_id + 1, -1),
        item=sku_id // stages,
    ).validate()
