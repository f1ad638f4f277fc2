"""Small heterogeneous random catalogs for simulator tests (every feature switched on).

`random_catalog(n, seed)` draws SKUs with all three demand distributions, perishables,
promotions, trends, supplier delays, forecast noise, fixed order costs and substitution
groups whose members are scattered over the rows (not adjacent), so tests exercise the
general paths of the kernels. Tests of other parts may use it too.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from skurl.catalog.schema import WEEK, Catalog


def random_catalog(n: int, seed: int, *, max_lead: int = 5, max_life: int = 6,
                   group_share: float = 0.6, id_offset: int = 0) -> Catalog:
    """A valid catalog of `n` SKUs (ids id_offset.. shuffled), reproducible from `seed`."""
    rng = np.random.default_rng(seed)
    means = np.exp(rng.uniform(np.log(0.02), np.log(60.0), n))
    means[rng.random(n) < 0.05] = 0.0  # a few dead SKUs
    dist = rng.integers(0, 3, n)
    perishable = rng.random(n) < 0.5
    promo = rng.random(n) < 0.5
    delayed = rng.random(n) < 0.4
    season = rng.uniform(0.5, 1.5, (n, WEEK))
    season /= season.mean(axis=1, keepdims=True)
    groups = np.full(n, -1)
    grouped = np.flatnonzero(rng.random(n) < group_share)
    if grouped.size:
        groups[grouped] = rng.integers(0, max(1, grouped.size // 2), grouped.size) * 7 + 3
    unit_cost = rng.uniform(0.5, 10.0, n)
    return Catalog(
        sku_id=rng.permutation(n).astype(np.int64) * 3 + id_offset,
        category=rng.integers(0, 4, n),
        group=groups,
        sub_frac=rng.uniform(0.0, 1.0, n),
        demand_mean=means,
        demand_dist=dist,
        dispersion=np.exp(rng.uniform(np.log(0.3), np.log(20.0), n)),
        trend=rng.uniform(-0.01, 0.01, n) * (rng.random(n) < 0.7),
        promo_uplift=rng.uniform(0.0, 3.0, n),
        promo_period=np.where(promo, rng.integers(3, 15, n), 0),
        promo_length=rng.integers(1, 4, n),
        promo_offset=rng.integers(0, 10, n),
        lead_time=rng.integers(1, max_lead + 1, n),
        delay_prob=np.where(delayed, rng.uniform(0.1, 0.9, n), 0.0),
        delay_max=np.where(delayed, rng.integers(1, 4, n), 0),
        shelf_life=np.where(perishable, rng.integers(1, max_life + 1, n), 0),
        holding_cost=rng.uniform(0.0, 2.0, n),
        lost_sale_cost=rng.uniform(0.0, 20.0, n),
        order_cost=rng.uniform(0.0, 30.0, n) * (rng.random(n) < 0.5),
        unit_cost=unit_cost,
        waste_cost=rng.uniform(0.0, 5.0, n) * perishable,
        price=unit_cost * rng.uniform(1.0, 2.5, n) * (rng.random(n) < 0.8),
        forecast_noise=rng.uniform(0.0, 0.5, n) * (rng.random(n) < 0.7),
        season=season,
    ).validate()


def random_network_catalog(n: int, seed: int) -> Catalog:
    """random_catalog(n, seed) without groups, its rows linked into random supply networks
    (docs/networks.md): depth 1-3, links of 0-3 days, some locations with no upstream."""
    import dataclasses

    cat = random_catalog(n, seed, group_share=0.0)
    rng = np.random.default_rng([seed, 41])
    depth = np.ones(n, np.int64)
    parent = np.full(n, -1)
    for i in rng.permutation(n)[1:]:  # a test helper: n is small
        candidates = np.array([j for j in np.flatnonzero(depth <= 2) if not _below(parent, j, i)], np.int64)
        candidates = candidates[depth[candidates] + _subtree_height(parent, i) <= 3]
        if candidates.size and rng.random() < 0.75:
            parent[i] = rng.choice(candidates)
            depth[i] = depth[parent[i]] + 1
            depth[:] = _depths(parent)
    lead = np.where(parent >= 0, rng.integers(0, 4, n), cat.lead_time)
    upstream = np.where(parent >= 0, cat.sku_id[np.maximum(parent, 0)], -1)
    return dataclasses.replace(cat, lead_time=lead, upstream=upstream).validate()


def _below(parent: np.ndarray, j: int | np.integer, i: int | np.integer) -> bool:
    """j is i or one of the locations i supplies, directly or not."""
    while j >= 0:
        if j == i:
            return True
        j = parent[j]
    return False


def _depths(parent: np.ndarray) -> np.ndarray:
    depth = np.ones(parent.shape[0], np.int64)
    for i in range(parent.shape[0]):
        j = i
        while parent[j] >= 0:
            j = parent[j]
            depth[i] += 1
    return depth


def _subtree_height(parent: np.ndarray, i: int) -> int:
    """Locations on the longest path from i down to a store (1 for a store)."""
    kids = np.flatnonzero(parent == i)
    return 1 + max((_subtree_height(parent, int(k)) for k in kids), default=0)


@njit(cache=True, parallel=True)
def order_up_to(on_hand: np.ndarray, pipeline: np.ndarray, backlog: np.ndarray,
                forecast: np.ndarray, lead_time: np.ndarray, out: np.ndarray) -> np.ndarray:
    """A cheap base-stock rule on the raw state (tests and benchmarks): order up to the
    forecast of today x (lead time + 2) minus the inventory position; writes `out`."""
    for i in prange(on_hand.shape[0]):
        position = on_hand[i] - backlog[i]
        for k in range(pipeline.shape[1]):
            position += pipeline[i, k]
        target = np.float64(forecast[i, 0]) * (lead_time[i] + 2)
        out[i] = max(target - position, 0.0)
    return out
