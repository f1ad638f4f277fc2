"""Partitioning: every row once, groups whole, shards balanced, deterministic."""

from __future__ import annotations

import numpy as np
import pytest

from skurl.catalog.partition import METHODS, parse_shard, partition, shard_of, sku_cost, units
from skurl.catalog.schema import Catalog
from skurl.catalog.synthetic import synthetic_catalog
from skurl.catalog.uniform import uniform_catalog
from skurl.config import load_config
from skurl.errors import CatalogError, UserError


@pytest.fixture(scope="module")
def cat() -> Catalog:
    return synthetic_catalog(load_config(overrides=["catalog.synthetic.substitution_share=0.5"]).catalog, 20_000)


@pytest.fixture(scope="module")
def shuffled(cat: Catalog) -> Catalog:
    """Groups scattered over the rows (as in a file sorted by something else)."""
    return cat.subset(np.random.default_rng(1).permutation(len(cat)))


def _check_cover(catalog: Catalog, shards: list[np.ndarray], k: int) -> np.ndarray:
    assert len(shards) == k
    for s in shards:
        assert s.dtype == np.int64 and np.all(np.diff(s) > 0)  # sorted, no repeats
    allrows = np.concatenate(shards)
    assert np.array_equal(np.sort(allrows), np.arange(len(catalog)))  # every row once
    shard_of_row = np.empty(len(catalog), dtype=np.int64)
    for i, s in enumerate(shards):
        shard_of_row[s] = i
    grouped = catalog.group >= 0
    # A group is never split: all its rows share one shard.
    g, sh = catalog.group[grouped], shard_of_row[grouped]
    lo = np.full(g.max() + 1, k)
    hi = np.full(g.max() + 1, -1)
    np.minimum.at(lo, g, sh)
    np.maximum.at(hi, g, sh)
    used = np.unique(g)
    assert np.array_equal(lo[used], hi[used])
    return shard_of_row


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("k", [1, 3, 8])
def test_cover_and_groups_whole(cat: Catalog, shuffled: Catalog, method: str, k: int) -> None:
    for catalog in (cat, shuffled):
        _check_cover(catalog, partition(catalog, k, method), k)


def test_equal_is_contiguous_and_balanced_in_rows(cat: Catalog) -> None:
    shards = partition(cat, 7, "equal")
    for s in shards:
        assert s[-1] - s[0] + 1 == s.shape[0]  # contiguous
    counts = [s.shape[0] for s in shards]
    assert max(counts) - min(counts) <= 2 * 6  # boundaries move by at most a group


@pytest.mark.parametrize("method", ["round_robin_cost", "lpt"])
def test_cost_methods_balance_cost_and_count(shuffled: Catalog, method: str) -> None:
    cost = sku_cost(shuffled)
    shards = partition(shuffled, 8, method)
    loads = np.array([cost[s].sum() for s in shards])
    counts = np.array([s.shape[0] for s in shards])
    assert loads.max() / loads.min() < 1.01
    assert counts.max() / counts.min() < 1.05
    # Contiguous equal split of the same catalog is worse on cost than either.
    eq = np.array([cost[s].sum() for s in partition(shuffled, 8, "equal")])
    assert loads.max() - loads.min() < eq.max() - eq.min()


def test_lpt_uses_given_costs(cat: Catalog) -> None:
    measured = np.ones(len(cat))
    measured[:100] = 500.0  # a profiling pass found 100 very slow SKUs
    shards = partition(cat, 4, "lpt", cost=measured)
    loads = np.array([measured[s].sum() for s in shards])
    assert loads.max() - loads.min() <= 500.0 * 6 + 6  # within one unit's cost
    heavy = [np.count_nonzero(s < 100) for s in shards]
    assert min(heavy) >= 15  # the slow SKUs are spread out


def test_lpt_matches_textbook_example() -> None:
    cat = uniform_catalog(load_config().catalog, 5)
    # Jobs 3,3,2,2,2 on 2 machines: LPT gives 7 / 5 (the optimum 6 / 6 is not found).
    shards = partition(cat, 2, "lpt", cost=np.array([3.0, 3.0, 2.0, 2.0, 2.0]))
    assert [s.tolist() for s in shards] == [[0, 2, 4], [1, 3]]


def test_cost_model_grows_with_rate_shelf_life_and_pipeline() -> None:
    cat = uniform_catalog(load_config().catalog, 4)
    cat.demand_mean[:] = [0.0, 1.0, 3.0, 1000.0]
    cost = sku_cost(cat)
    assert cost[0] == 1.0 + 0.03125 * 2  # lead time 2, no delay, rate 0
    assert np.all(np.diff(cost) > 0)
    assert cost[2] - cost[1] == pytest.approx(0.25, abs=1e-12)  # log2(4) - log2(2) = 1, exact
    base = sku_cost(cat)[1]
    cat.shelf_life[1], cat.lead_time[1], cat.group[1] = 16, 10, 0
    assert sku_cost(cat)[1] == base + 1.0 + 0.03125 * 8 + 0.5


def test_partition_is_deterministic(shuffled: Catalog) -> None:
    for method in METHODS:
        a = partition(shuffled, 5, method)
        b = partition(shuffled, 5, method)
        assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def test_units_are_numbered_by_first_row(cat: Catalog, shuffled: Catalog) -> None:
    for catalog in (cat, shuffled):
        u = units(catalog)
        first = np.unique(u, return_index=True)[1]
        assert np.all(np.diff(first) > 0)
        assert u.max() + 1 == (catalog.group < 0).sum() + np.unique(catalog.group[catalog.group >= 0]).shape[0]


def test_more_shards_than_units_gives_empty_shards() -> None:
    cat = uniform_catalog(load_config().catalog, 3)
    shards = partition(cat, 5, "round_robin_cost")
    assert sorted(s.shape[0] for s in shards) == [0, 0, 1, 1, 1]


def test_shard_of_and_parse_shard(cat: Catalog) -> None:
    shards = partition(cat, 4)
    assert np.array_equal(shard_of(cat, 2, 4), shards[2])
    assert np.array_equal(shard_of(cat, "3/4"), shards[3])
    assert parse_shard(" 1/8 ") == (1, 8)
    for spec in ["4/4", "-1/4", "a/b", "1", "1/2/3", "0/0"]:
        with pytest.raises(UserError, match="--shard") as info:
            parse_shard(spec)
        assert "\n" not in str(info.value)
    with pytest.raises(UserError, match=r"--shard 5/2"):
        shard_of(cat, 5, 2)
    with pytest.raises(UserError, match="--shard"):
        shard_of(cat, 1)


def test_bad_arguments(cat: Catalog) -> None:
    with pytest.raises(UserError, match="partition method 'random'"):
        partition(cat, 2, "random")  # type: ignore[arg-type]
    with pytest.raises(UserError, match="0 shards"):
        partition(cat, 0)
    with pytest.raises(CatalogError, match="expected"):
        partition(cat, 2, "lpt", cost=np.ones(3))
    bad = np.ones(len(cat))
    bad[17] = np.nan
    with pytest.raises(CatalogError, match="SKU 17"):
        partition(cat, 2, "lpt", cost=bad)


def test_most_expensive_first_is_a_stable_descending_sort() -> None:
    from skurl.catalog.partition import _most_expensive_first

    cost = np.random.default_rng(2).integers(0, 50, 5000).astype(np.float64)  # many ties
    assert np.array_equal(_most_expensive_first(cost), np.argsort(-cost, kind="stable"))
    assert np.array_equal(_most_expensive_first(np.zeros(4)), np.arange(4))
