"""A SKU's trajectory does not depend on who it is simulated with: whole catalog vs random
group-closed shards in shuffled row order, compact vs scattered groups (the kernels' local
and global group passes), and 1 vs 2 threads all give identical per-SKU results."""

from __future__ import annotations

import numpy as np
import pytest

from skurl.catalog.schema import Catalog
from skurl.config import SimConfig
from skurl.sim import VectorEnv
from skurl.sim.state import METRIC_FIELDS
from skurl.sim.testing import order_up_to, random_catalog


def _trajectory(catalog: Catalog, cfg: SimConfig, seed: int = 21) -> dict[int, np.ndarray]:
    """sku_id -> every feature, raw value, reward and metric of every day, concatenated."""
    env = VectorEnv(catalog, cfg)
    obs = env.reset(seed, episode=2)
    orders = np.zeros(len(catalog))
    lead = catalog.lead_time.astype(np.float64)
    rows = []
    for _ in range(cfg.days):
        raw = obs.raw
        order_up_to(raw.on_hand, raw.pipeline, raw.backlog, raw.forecast, lead, orders)
        parts = [obs.features, raw.on_hand[:, None], raw.pipeline, raw.backlog[:, None], raw.forecast]
        res = env.step(orders * 1.3)
        parts += [res.reward[:, None]] + [getattr(res.metrics, m)[:, None] for m in METRIC_FIELDS]
        rows.append(np.concatenate([p.astype(np.float64) for p in parts], axis=1))
        obs = res.obs
    per_day = np.stack(rows, axis=1)  # [N, days, columns]
    return {int(s): per_day[i] for i, s in enumerate(catalog.sku_id)}


def _group_closed_shards(catalog: Catalog, k: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Random shards that keep every substitution group whole, rows shuffled within."""
    unit = np.where(catalog.group >= 0, catalog.group, -1 - np.arange(len(catalog)))
    units = np.unique(unit)
    shard_of_unit = dict(zip(units.tolist(), rng.integers(0, k, units.size).tolist(), strict=True))
    shard = np.array([shard_of_unit[u] for u in unit.tolist()])
    return [rng.permutation(np.flatnonzero(shard == s)) for s in range(k) if (shard == s).any()]


def _assert_same(whole: dict[int, np.ndarray], part: dict[int, np.ndarray]) -> None:
    for sku, traj in part.items():
        if not np.array_equal(traj, whole[sku]):
            day = int(np.argwhere(traj != whole[sku])[0][0])
            raise AssertionError(f"SKU {sku} differs from day {day} on")


def _pad_layout(shard: Catalog, like: Catalog) -> Catalog:
    """Feature widths follow the catalog's longest lead time / shelf life; comparing shards
    column by column needs the same widths, so every shard carries two padding SKUs."""
    return Catalog.concat([shard, like])


@pytest.mark.parametrize("backorders", [False, True])
def test_shards_and_row_order_do_not_change_trajectories(backorders: bool) -> None:
    catalog = random_catalog(60, seed=5)
    # two ungrouped SKUs with the catalog's widest layout, ids apart, for padding shards
    widest = np.array([np.argmax(catalog.shelf_life), np.argmax(catalog.lead_time + catalog.delay_max)])
    pad = catalog.subset(widest)
    pad.group[:] = -1
    pad.sku_id[:] = [10**6, 10**6 + 1]
    pad.delay_max[1] = catalog.max_delay
    pad.lead_time[1] = catalog.max_lead_time
    cfg = SimConfig(days=20, backorders=backorders, threads=1)
    whole = _trajectory(_pad_layout(catalog, pad), cfg)
    rng = np.random.default_rng(0)
    for k in (2, 3, 7):
        for rows in _group_closed_shards(catalog, k, rng):
            shard = _pad_layout(catalog.subset(rows), pad)
            _assert_same(whole, _trajectory(shard, cfg))


def test_scattered_groups_and_thread_counts_do_not_change_trajectories() -> None:
    # ~2000 SKUs in groups of ~4: sorted rows keep groups compact (settled with their
    # chunk); shuffled rows spread them over chunks (settled in the global group pass).
    catalog = random_catalog(2000, seed=8, group_share=0.8)
    catalog.group[:] = np.where(catalog.group >= 0, np.arange(2000) // 4, -1)
    compact = catalog.subset(np.argsort(catalog.group, kind="stable"))
    cfg = SimConfig(days=8, threads=1)
    reference = _trajectory(compact, cfg)
    env = VectorEnv(catalog.subset(np.random.default_rng(1).permutation(2000)), cfg)
    assert env._params.global_groups.size > 0  # the shuffled layout exercises the global pass
    assert VectorEnv(compact, cfg)._params.global_groups.size == 0
    _assert_same(reference, _trajectory(catalog.subset(np.random.default_rng(1).permutation(2000)), cfg))
    two = SimConfig(days=8, threads=2)
    _assert_same(reference, _trajectory(compact, two))
    _assert_same(reference, _trajectory(catalog, two))
