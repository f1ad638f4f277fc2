"""Serial supply chains for exact checks (catalog.kind=serial; docs/networks.md).

`catalog.skus` independent copies of one chain: stage 1 is the store (customer demand from
catalog.demand, penalty catalog.lost_sale_cost, price catalog.price), stage N orders from the
outside supplier; catalog.serial gives each link's lead time and each stage's installation
holding cost. Copy c, stage j has sku_id c * N + j - 1 and item c. Upstream stages carry
the store's demand mean as their own (features and initial stock scale by it), no penalty
and no price: only the store meets customers.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from skurl.catalog.schema import Catalog
from skurl.catalog.uniform import uniform_catalog
from skurl.config import CatalogConfig


def serial_catalog(cfg: CatalogConfig, skus: int | None = None) -> Catalog:
    """`skus` (default cfg.skus) copies of the chain of cfg.serial, validated: the uniform
    catalog of cfg's demand and order cost, with each stage's lead, holding and links."""
    copies = cfg.skus if skus is None else int(skus)
    leads = np.asarray(cfg.serial.lead_times, np.int32)
    stages = leads.shape[0]
    n = copies * stages
    stage = np.tile(np.arange(stages), copies)  # 0 = store
    store = stage == 0
    base = uniform_catalog(cfg, n)
    zero = np.zeros(n, np.float32)
    return dataclasses.replace(
        base,
        lead_time=leads[stage],
        delay_prob=zero, delay_max=np.zeros(n, np.int32), shelf_life=np.zeros(n, np.int32),
        holding_cost=np.asarray(cfg.serial.holding, np.float32)[stage],
        lost_sale_cost=np.where(store, cfg.lost_sale_cost, 0.0).astype(np.float32),
        unit_cost=zero, waste_cost=zero,
        price=np.where(store, cfg.price, 0.0).astype(np.float32),
        upstream=np.where(stage < stages - 1, base.sku_id + 1, -1),
        item=base.sku_id // stages,
    ).validate()
