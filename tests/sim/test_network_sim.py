"""Supply networks in the simulator (docs/networks.md): VectorEnv against the scalar
reference on random network catalogs, stock conservation per network, allocation rules."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from skurl.catalog.network import echelons
from skurl.config import SimConfig, TransfersConfig
from skurl.sim import VectorEnv
from skurl.sim.reference import ReferenceSim
from skurl.sim.reference_network import allocate
from skurl.sim.state import METRIC_FIELDS
from skurl.sim.testing import random_network_catalog

RAW_FIELDS = ("on_hand", "pipeline", "backlog", "forecast")


def _same(name: str, got: np.ndarray, want: np.ndarray, day: int) -> None:
    if not np.array_equal(got, want):
        where = tuple(np.argwhere(got != want)[0])
        raise AssertionError(f"day {day}: {name} differs at {where}: vector {got[where]!r} vs reference {want[where]!r}")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 12), catalog_seed=st.integers(0, 10_000), run_seed=st.integers(0, 2**40),
       days=st.integers(1, 14), backorders=st.booleans(), lifo=st.booleans(), cost=st.booleans(),
       rule=st.sampled_from(["proportional", "fair", "priority"]), cancel=st.booleans(),
       init_days=st.sampled_from([-1.0, 0.0, 2.0]), shared=st.booleans(), ship=st.booleans(),
       transfers=st.sampled_from([None, (0, 0.0, 1.0, 1.5, 3.0), (1, 0.5, 0.5, 2.0, 2.0), (3, 2.0, 2.0, 2.0, 6.0),
                                  (2, 0.1, 0.0, 0.5, 1.0)]))
@example(n=10, catalog_seed=10, run_seed=0, days=3, backorders=False, lifo=False, cost=False, rule="proportional",
         cancel=False, init_days=-1.0, shared=False, ship=False, transfers=(3, 2.0, 2.0, 2.0, 6.0)).via(
    "a transfer due beyond the store's own lead time shows in its pipeline features")
def test_network_vector_env_matches_reference(n, catalog_seed, run_seed, days, backorders, lifo, cost, rule,
                                              cancel, init_days, shared, ship, transfers):
    catalog = random_network_catalog(n, catalog_seed)
    if ship:  # shipping costs per unit on every row (charged on internal links only)
        catalog = dataclasses.replace(catalog, ship_cost=np.random.default_rng(catalog_seed).uniform(0, 3, n))
    xfer = TransfersConfig()
    if transfers is not None:  # (lead time, cost, below, target, above); cost_share from the seed
        lead, unit, below, target, above = transfers
        xfer = TransfersConfig(enabled=True, lead_time=min(lead, catalog.max_lead_time), cost=unit,
                               cost_share=0.05 * (run_seed % 3), below=below, target=target, above=above)
    cfg = SimConfig(days=days, backorders=backorders, issuing="lifo" if lifo else "fifo",
                    reward="cost" if cost else "profit", initial_stock_days=init_days, threads=1,
                    upstream_allocation=rule, upstream_shortage="cancel" if cancel else "backorder",
                    network_reward="network" if shared else "location", transfers=xfer)
    env, ref = VectorEnv(catalog, cfg), ReferenceSim(catalog, cfg)
    obs, want = env.reset(run_seed, 1), ref.reset(run_seed, 1)
    rng = np.random.default_rng(catalog_seed)
    parent, root, _ = echelons(catalog)
    for day in range(days):
        _same("features", obs.features, want.features, day)
        for name in RAW_FIELDS:
            _same(name, getattr(obs.raw, name), getattr(want.raw, name), day)
        stock = np.bincount(root, obs.raw.on_hand + obs.raw.pipeline.sum(1), minlength=n)
        orders = rng.integers(0, 30, n) * (rng.random(n) < 0.7) + rng.random(n) * (rng.random(n) < 0.3)
        res = env.step(orders)
        want, reward, _, metrics = ref.step(orders)
        _same("reward", res.reward, reward, day)
        for name in METRIC_FIELDS:
            _same(name, getattr(res.metrics, name), metrics[name], day)
        assert not res.failed.any()
        # stock conserved per network (transfers move units within it): + outside orders
        # - store sales - waste
        m = res.metrics
        store = ~np.isin(np.arange(n), parent)
        flow = np.where(parent < 0, m.ordered, 0) - np.where(store, m.sales, 0) - m.waste
        after = np.bincount(root, res.obs.raw.on_hand + res.obs.raw.pipeline.sum(1), minlength=n)
        np.testing.assert_array_equal(after, stock + np.bincount(root, flow, minlength=n).astype(np.int64))
        obs = res.obs
    _same("features", obs.features, want.features, days)


@pytest.mark.parametrize(("rule", "requests", "avail", "expected"), [
    ("priority", [5, 5, 5], 7, [5, 2, 0]),
    ("fair", [1, 6, 6], 9, [1, 4, 4]),
    ("fair", [3, 6, 6], 10, [3, 4, 3]),
    ("proportional", [2, 4, 4], 5, [1, 2, 2]),
    ("proportional", [1, 1, 1], 2, [1, 1, 0]),
])
def test_allocation_rules(rule, requests, avail, expected):
    got = allocate(rule, requests, avail)
    assert got == expected and sum(got) == avail


@pytest.mark.parametrize("rule", ["proportional", "fair", "priority"])
def test_kernel_allocation_matches_the_rule(rule):
    """The kernel's split of a short upstream is the rule's (random requests and stock)."""
    from skurl.sim.allocation import allocate as kernel_allocate
    from skurl.sim.network_cols import N_REQUEST, N_SHIPPED

    rng = np.random.default_rng(5)
    for _ in range(200):
        k = int(rng.integers(1, 7))
        req = rng.integers(0, 20, k)
        if req.sum() == 0:
            continue
        avail = int(rng.integers(0, int(req.sum())))
        st_ = np.zeros((k, 30), np.int64)
        st_[:, N_REQUEST] = req
        kernel_allocate(st_, np.arange(k, dtype=np.int64), 0, k, avail, {"proportional": 0, "fair": 1,
                                                                         "priority": 2}[rule])
        assert st_[:, N_SHIPPED].tolist() == allocate(rule, req.tolist(), avail)


def test_network_columns_only_with_networks():
    from skurl.sim.layout import NETWORK_FIELDS
    from skurl.sim.testing import random_catalog

    plain = VectorEnv(random_catalog(6, 3, group_share=0.0), SimConfig(threads=1))
    net = VectorEnv(random_network_catalog(6, 3), SimConfig(threads=1))
    names = [name for name, _ in NETWORK_FIELDS]
    assert not set(names) & set(plain.schema.names())
    assert net.schema.names()[-len(names):] == names
    assert net.schema.dim == plain.schema.dim + len(names) or net.layout.pipeline != plain.layout.pipeline


def test_shards_of_a_network_catalog_simulate_as_the_whole():
    from skurl.catalog import load_catalog
    from skurl.catalog.partition import partition
    from skurl.config import load_config

    catalog = load_catalog(load_config(None, ["catalog.skus=300", "catalog.synthetic.network=dc"]).catalog)
    cfg = SimConfig(days=12, threads=1)
    rng = np.random.default_rng(0)
    orders = rng.integers(0, 20, (cfg.days, len(catalog))).astype(float)
    whole = VectorEnv(catalog, cfg)
    whole.reset(7)
    for day in range(cfg.days):
        res = whole.step(orders[day])
    want = whole.totals()
    for rows in partition(catalog, 3):
        env = VectorEnv(catalog.subset(rows), cfg)
        env.reset(7)
        for day in range(cfg.days):
            env.step(orders[day, rows])
        got = env.totals()
        for name in want:
            np.testing.assert_array_equal(got[name], want[name][rows], err_msg=name)
    assert res.metrics.sales.sum() > 0
