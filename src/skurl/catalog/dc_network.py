"""catalog.synthetic.network=dc: each item at one DC, fed by suppliers, and 2-10 stores.

The rows of the synthetic catalog are cut into consecutive blocks of 3-11 rows (sizes from
their own random stream, so network=none draws nothing new); a block is one item. Its first
row becomes the DC: it keeps its supplier lead time and delays, meets no customers (price and
penalty 0), holds at half its stores' mean rate (warehouse space), has no promotions and a
flat week, and carries its stores' summed demand mean (features and initial stock scale by
it). The others are its stores: demand as generated, the DC's category, shelf life and
money, lead time 1-3 days from the DC, no supplier delays, no substitution, and a shipping
cost per unit from the DC of SHIP_COST_SHARE of the item's unit cost (docs/networks.md).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from skurl.catalog.schema import Catalog
from skurl.errors import ConfigError

STORES = (2, 10)  # stores per item, inclusive
STORE_LEAD = (1, 3)  # days from DC to store, inclusive
DC_HOLDING_SHARE = 0.5
SHIP_COST_SHARE = 0.02  # DC-to-store freight per unit, a share of the unit cost (typical retail: 1-5%)
SEED_SALT = 0x5EED_D0C  # the stream of block sizes, apart from the generator's own


def _block_starts(rng: np.random.Generator, n: int) -> np.ndarray:
    """First row of each block; every block has 1 + STORES[0]..1 + STORES[1] rows."""
    sizes = 1 + rng.integers(STORES[0], STORES[1] + 1, n // (1 + STORES[0]) + 1)
    ends = np.cumsum(sizes)
    k = int(np.searchsorted(ends, n))  # blocks 0..k cover n rows, block k cut short
    starts = np.concatenate([[0], ends[:k]])
    last = n - starts[-1]
    if 0 < last < 1 + STORES[0] and starts.shape[0] > 1:
        prev = starts[-1] - starts[-2]
        if prev - (1 + STORES[0] - last) >= 1 + STORES[0]:
            starts[-1] -= 1 + STORES[0] - last  # borrow stores from the previous item
        else:
            starts = starts[:-1]  # merge: at most 1 + 3 + 2 rows
    return starts.astype(np.int64)


def dc_network(catalog: Catalog, seed: int) -> Catalog:
    """`catalog` (network-free, sku_id 0..n-1) with its rows made DCs and stores; validated."""
    n = len(catalog)
    if n < 1 + STORES[0]:
        raise ConfigError(f"config key 'catalog.skus': got {n}, expected at least {1 + STORES[0]} "
                          "with catalog.synthetic.network=dc (one DC and two stores)")
    rng = np.random.default_rng([seed, SEED_SALT])
    starts = _block_starts(rng, n)
    item = np.repeat(np.arange(starts.shape[0]), np.diff(np.append(starts, n)))
    dc_row = starts[item]
    is_dc = np.arange(n) == dc_row
    store = ~is_dc
    c = catalog
    stores_mean = np.bincount(item, weights=np.where(store, c.demand_mean, 0.0))
    stores_hold = np.bincount(item, weights=np.where(store, c.holding_cost, 0.0)) / np.bincount(item, store)
    cols = {f.name: getattr(c, f.name).copy() for f in dataclasses.fields(c)}
    for name in ("category", "shelf_life", "unit_cost", "waste_cost", "price", "lost_sale_cost", "order_cost"):
        cols[name] = cols[name][dc_row]  # item-level traits from the block's first row
    cols["group"][:] = -1
    cols["sub_frac"][:] = 0.0
    cols["lead_time"] = np.where(store, rng.integers(STORE_LEAD[0], STORE_LEAD[1] + 1, n), c.lead_time)
    cols["delay_prob"] = np.where(store, 0.0, c.delay_prob)
    cols["delay_max"] = np.where(store, 0, c.delay_max)
    cols["demand_mean"] = np.where(is_dc, stores_mean[item], c.demand_mean)
    cols["holding_cost"] = np.where(is_dc, DC_HOLDING_SHARE * stores_hold[item], c.holding_cost)
    for name in ("price", "lost_sale_cost", "promo_uplift", "promo_period", "promo_length", "promo_offset",
                 "trend"):
        cols[name] = np.where(is_dc, 0, cols[name])
    cols["season"] = np.where(is_dc[:, None], 1.0, c.season)
    cols["ship_cost"] = np.where(store, SHIP_COST_SHARE * cols["unit_cost"], 0.0)
    cols["upstream"] = np.where(store, c.sku_id[dc_row], -1)
    cols["item"] = item.astype(np.int64)
    return Catalog(**cols).validate()
