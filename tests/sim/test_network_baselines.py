"""Echelon and installation base-stock on serial systems against Clark-Scarf
(benchmarks/serial_optimal.py; docs/networks.md)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from benchmark_module import load_benchmark

from skurl.catalog import load_catalog
from skurl.cli import main
from skurl.collect.evaluate import evaluate
from skurl.config import load_config
from skurl.policy.baselines import applies, make_policy
from skurl.policy.tuning import tune

so = load_benchmark("serial_optimal")


def _serial(leads, holding, penalty, mean, copies):
    cfg = load_config(None, ["catalog.kind=serial", f"catalog.skus={copies}", f"catalog.serial.lead_times={leads}",
                             f"catalog.serial.holding={holding}", f"catalog.lost_sale_cost={penalty}",
                             f"catalog.demand.mean={mean}", "sim.backorders=true", "sim.reward=cost", "sim.threads=1"])
    return cfg, load_catalog(cfg.catalog)


@pytest.mark.parametrize(("leads", "holding", "penalty"), [([0, 2], [2.0, 1.0], 9.0),
                                                           ([1, 0, 1], [3.0, 2.0, 1.0], 19.0)])
def test_simulated_cost_of_the_optimal_levels_is_the_exact_cost(leads, holding, penalty):
    mean, copies = 3.0, 600
    cfg, catalog = _serial(leads, holding, penalty, mean, copies)
    opt = so.clark_scarf(leads, holding, penalty, mean)
    policy = make_policy("echelon-base-stock", catalog, cfg.sim, {"S": np.tile(np.array(opt.levels, float), copies)})
    net = evaluate(catalog, cfg.sim, policy, days=300, warmup=60, seed=5).network
    assert net["networks"] == copies
    assert abs(net["avg_cost_per_network_day"] - opt.cost) < 3 * net["cost_se"], (net, opt)
    assert net["cost_se"] < 0.01 * opt.cost


def test_tuned_echelon_near_optimum_installation_a_day_late():
    leads, holding, penalty, mean, copies = [1, 1], [2.0, 1.0], 9.0, 2.0, 400
    cfg, catalog = _serial(leads, holding, penalty, mean, copies)
    opt = so.clark_scarf(leads, holding, penalty, mean)
    lagged = so.clark_scarf([1, 2], holding, penalty, mean)  # installation: upstream a day late
    cost = {}
    for name in ("echelon-base-stock", "installation-base-stock"):
        tuned = tune(name, catalog, cfg.sim, eval_seed=3, days=200, warmup=50, progress=lambda _: None)
        res = evaluate(catalog, cfg.sim, make_policy(name, catalog, cfg.sim, tuned.params), days=300, warmup=60,
                       seed=3)
        cost[name] = res.network["avg_cost_per_network_day"]
    assert abs(cost["echelon-base-stock"] / opt.cost - 1) < 0.01, (cost, opt)
    assert abs(cost["installation-base-stock"] / lagged.cost - 1) < 0.015, (cost, lagged)
    assert cost["installation-base-stock"] > cost["echelon-base-stock"]


def test_network_policies_apply_only_to_networks():
    _, catalog = _serial([1, 1], [2.0, 1.0], 9.0, 2.0, 3)
    flat = load_catalog(load_config(None, ["catalog.kind=uniform", "catalog.skus=3"]).catalog)
    assert applies("echelon-base-stock", catalog) and not applies("installation-base-stock", flat)


def test_eval_json_reports_cost_per_network_day(capsys):
    args = ["eval", "--policy", "echelon-base-stock", "--json", "--set", "catalog.kind=serial",
            "--set", "catalog.skus=50", "--set", "sim.backorders=true", "--set", "sim.reward=cost",
            "--set", "eval.days=40", "--set", "eval.warmup=10", "--set", "eval.skus=7"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["network"]["networks"] == 4 and out["skus"] == 8  # eval.skus=7 rows: 4 whole networks
    assert out["avg_cost_per_network_day"] == out["network"]["avg_cost_per_network_day"] > 0
    for echelon in out["network"]["by_echelon"].values():  # serial: no price, profit = -cost
        assert echelon["profit_per_location_day"] == -echelon["cost_per_location_day"] < 0
