"""Per-network tuning of the network baselines (policy/network_refine.py): each network's
own factors, checked on fresh episodes, independent of the other networks."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from skurl.catalog import load_catalog
from skurl.catalog.network import echelons
from skurl.collect.evaluate import evaluate
from skurl.config import load_config
from skurl.errors import ConfigError
from skurl.policy.baselines import make_policy
from skurl.policy.network_baselines import Topology
from skurl.policy.network_refine import NetworkScorer, dense_networks, refine_per_network
from skurl.policy.network_tuning import REFINE_STEPS, _moves
from skurl.policy.tuning import tune
from skurl.sim.episode import make_env

DC = ["catalog.synthetic.network=dc", "sim.backorders=false", "sim.reward=profit", "sim.threads=1"]


def _dc(skus: int, seed: int = 0):
    cfg = load_config(None, [*DC, f"catalog.skus={skus}", f"catalog.seed={seed}"])
    return cfg, load_catalog(cfg.catalog)


def _scorer(catalog, cfg, days=40, warmup=10):
    topo = Topology.of(catalog)
    env = make_env(catalog, dataclasses.replace(cfg.sim, days=days + warmup))
    return NetworkScorer("echelon-base-stock", catalog, topo, env, cfg.sim, 77, days, warmup,
                         dense_networks(echelons(catalog)[1]))


def test_per_network_tuning_beats_one_factor_per_echelon_on_held_out_days():
    cfg, catalog = _dc(120)
    profit = {}
    for by in ("per-echelon", "per-network"):
        tuned = tune("echelon-base-stock", catalog, cfg.sim, eval_seed=3, days=40, warmup=10, sku_days=10_000,
                     network_tuning=by, progress=lambda _: None)
        assert tuned.method == {"per-echelon": "network-echelon-z", "per-network": "network-per-network-z"}[by]
        policy = make_policy("echelon-base-stock", catalog, cfg.sim, tuned.params)
        profit[by] = evaluate(catalog, cfg.sim, policy, days=100, warmup=20, seed=3).avg_profit_per_sku_day
    assert profit["per-network"] > profit["per-echelon"], profit


def test_a_networks_factors_do_not_depend_on_the_other_networks():
    cfg, catalog = _dc(120, seed=4)
    root = echelons(catalog)[1]
    first = np.flatnonzero(np.isin(root, np.unique(root)[:6]))  # the first six networks alone
    shared = np.array([1.0, 1.5])
    alone = refine_per_network(_scorer(catalog.subset(first), cfg), shared, REFINE_STEPS, _moves(2), 2, 10**6)
    among = refine_per_network(_scorer(catalog, cfg), shared, REFINE_STEPS, _moves(2), 2, 10**6)
    assert alone.kept > 0
    np.testing.assert_array_equal(alone.z, among.z[:6])
    np.testing.assert_array_equal(alone.objective, among.objective[:6])


def test_each_network_keeps_the_better_of_its_own_and_the_shared_factor_on_fresh_episodes():
    cfg, catalog = _dc(90, seed=2)
    scorer = _scorer(catalog, cfg)
    shared = np.array([0.5, 0.5])
    refined = refine_per_network(scorer, shared, REFINE_STEPS, _moves(2), 2, 200)
    start = np.tile(shared, (scorer.networks, 1))
    own = np.any(refined.z != start, axis=1)
    assert refined.kept == int(own.sum())
    np.testing.assert_array_equal(refined.objective, scorer(refined.z, 2, 2))
    assert np.all(refined.objective[own] < scorer(start, 2, 2)[own])


def test_copies_of_one_network_are_tuned_together():
    cfg = load_config(None, ["catalog.kind=serial", "catalog.skus=40", "catalog.serial.lead_times=[1,1]",
                             "catalog.serial.holding=[2.0,1.0]", "sim.backorders=true", "sim.reward=cost",
                             "sim.threads=1"])
    catalog = load_catalog(cfg.catalog)
    tuned = tune("echelon-base-stock", catalog, cfg.sim, eval_seed=3, days=50, warmup=10, progress=lambda _: None)
    assert tuned.method == "network-echelon-z"


def test_network_tuning_is_checked():
    with pytest.raises(ConfigError, match=r"eval\.network_tuning"):
        load_config(None, ["eval.network_tuning=per-sku"])


def test_a_large_catalog_is_searched_on_a_sample_and_every_network_checked(monkeypatch):
    import skurl.policy.network_tuning as network_tuning

    cfg, catalog = _dc(240, seed=1)
    monkeypatch.setattr(network_tuning, "REFINE_SKU_DAYS", 800 * 50 * 80)  # a sample of about 80 rows
    tuned = tune("echelon-base-stock", catalog, cfg.sim, eval_seed=3, days=40, warmup=10, sku_days=10_000,
                 progress=lambda _: None)
    shared = tune("echelon-base-stock", catalog, cfg.sim, eval_seed=3, days=40, warmup=10, sku_days=10_000,
                  network_tuning="per-echelon", progress=lambda _: None)
    info = tuned.details["per_network"]
    assert info["sampled"] and 0 < info["kept_own_z"] <= info["networks"]
    profit = {name: evaluate(catalog, cfg.sim, make_policy("echelon-base-stock", catalog, cfg.sim, t.params),
                             days=100, warmup=20, seed=3).avg_profit_per_sku_day
              for name, t in (("sampled", tuned), ("shared", shared))}
    assert profit["sampled"] > profit["shared"], profit
