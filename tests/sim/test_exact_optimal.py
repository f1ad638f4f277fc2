"""The relative-value-iteration benchmark (benchmarks/lost_sales_optimal.py) against the
stationary-distribution chain of test_exact_lost_sales.py and Zipkin's (2008) published
costs: two independent exact computations of one lost-sales model must agree. Geometric
demand: against dense policy iteration (L = 1) and skurl's simulator (base stock)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from skurl.catalog.uniform import uniform_catalog
from skurl.collect.evaluate import evaluate
from skurl.config import CatalogConfig, DemandConfig, SimConfig
from skurl.policy.baselines import make_policy

ROOT = Path(__file__).resolve().parents[2]


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(path.stem, module)
    spec.loader.exec_module(module)
    return module


rvi = load(ROOT / "benchmarks" / "lost_sales_optimal.py")
chain = load(Path(__file__).with_name("test_exact_lost_sales.py"))


@pytest.mark.parametrize(("lead", "level", "penalty"), [(1, 12, 4.0), (2, 19, 9.0), (3, 21, 19.0)])
def test_policy_evaluation_agrees_with_stationary_distribution(lead, level, penalty):
    by_rvi = rvi.base_stock_cost(lead, level, 5.0, 1.0, penalty)
    assert by_rvi == pytest.approx(chain.exact_cost(lead, level, penalty), abs=1e-6)


@pytest.mark.parametrize("lead", [1, 2])
def test_optimal_beats_the_best_base_stock_level(lead):
    row = rvi.solve(lead, 4.0, margin=2, with_base_stock=True)
    levels = range(row["best_base_stock_level"] - 2, row["best_base_stock_level"] + 3)
    by_chain = min(chain.exact_cost(lead, s, 4.0) for s in levels)
    assert row["best_base_stock_cost"] == pytest.approx(by_chain, abs=1e-4)  # rows are rounded
    # Base-stock ignores what is on hand versus in the pipeline; under lost sales and
    # p = 4 that costs a few percent (Zipkin 2008).
    assert 0.02 * by_chain < by_chain - row["optimal_cost"] < 0.2 * by_chain


def test_truncation_margin_does_not_change_the_optimum():
    narrow = rvi.solve(2, 19.0, margin=0, with_base_stock=False)["optimal_cost"]
    wide = rvi.solve(2, 19.0, margin=4, with_base_stock=False)["optimal_cost"]
    assert narrow == pytest.approx(wide, abs=1e-4)


@pytest.mark.slow
def test_lead_time_four_matches_zipkins_published_optimum():
    row = rvi.solve(4, 4.0, margin=2, with_base_stock=False)
    assert round(row["optimal_cost"], 2) == rvi.PUBLISHED_OPTIMAL[(4, 4.0)]


# Geometric demand (mean 5, variance 30): the same model with a heavier tail.
GEO = "geometric"


def test_geometric_lead_time_demand_is_the_convolution_of_days():
    day = rvi.geometric_pmf(5.0, 400)
    assert day.sum() == pytest.approx(1.0, abs=1e-12)
    assert (day * np.arange(401)).sum() == pytest.approx(5.0, abs=1e-9)
    three = np.convolve(np.convolve(day, day), day)[:120]
    assert rvi.lead_time_demand_pmf(GEO, 5.0, 3, 119) == pytest.approx(three, abs=1e-14)


def policy_iteration_lead_one(bound: int, penalty: float) -> float:
    """Optimal average cost for L = 1 by Howard's policy iteration on dense matrices: state
    y = on hand after arrival, order q <= bound - y, next y' = (y - D)^+ + q."""
    n = bound + 1
    pmf = rvi.geometric_pmf(5.0, 2000)
    d = np.arange(pmf.size)
    stage = np.array([(pmf * (np.maximum(y - d, 0) + penalty * np.maximum(d - y, 0))).sum() for y in range(n)])
    left = np.zeros((n, n))  # P(y -> (y - D)^+ = j)
    for y in range(n):
        left[y, 1:y + 1] = pmf[:y][::-1]
        left[y, 0] = 1.0 - pmf[:y].sum()
    policy = np.zeros(n, dtype=int)
    for _ in range(100):
        trans = np.zeros((n, n))
        for y in range(n):
            trans[y, policy[y]:policy[y] + y + 1] = left[y, :y + 1]
        # g + h(y) = c(y) + sum P h, h(0) = 0: unknowns (g, h(1..n-1)).
        a = np.eye(n) - trans
        a[:, 0] = 1.0
        sol = np.linalg.solve(a, stage)
        g, h = sol[0], np.concatenate([[0.0], sol[1:]])
        q_values = [[(left[y, :y + 1] * h[q:q + y + 1]).sum() for q in range(n - y)] for y in range(n)]
        improved = np.array([policy[y] if q_values[y][policy[y]] <= min(q_values[y]) + 1e-12
                             else int(np.argmin(q_values[y])) for y in range(n)])
        if np.array_equal(improved, policy):
            return float(g)
        policy = improved
    raise AssertionError("policy iteration did not converge")


@pytest.mark.parametrize("penalty", [4.0, 39.0])
def test_geometric_optimum_agrees_with_policy_iteration(penalty):
    row = rvi.solve(1, penalty, margin=2, with_base_stock=False, dist=GEO)
    assert row["optimal_cost"] == pytest.approx(policy_iteration_lead_one(row["bound"] + 8, penalty), abs=1e-4)


def test_geometric_truncation_margin_does_not_change_the_optimum():
    narrow = rvi.solve(2, 39.0, margin=0, with_base_stock=False, dist=GEO)["optimal_cost"]
    wide = rvi.solve(2, 39.0, margin=6, with_base_stock=False, dist=GEO)["optimal_cost"]
    assert narrow == pytest.approx(wide, rel=1e-4)


def test_geometric_base_stock_cost_is_the_simulated_one():
    # skurl's geometric sampler (sim/demand.py) must be the pmf the value iteration assumes.
    lead, level, penalty = 2, 22, 9.0
    exact = rvi.base_stock_cost(lead, level, 5.0, 1.0, penalty, GEO)
    catalog = uniform_catalog(CatalogConfig(kind="uniform", skus=2000, lead_time=lead, lost_sale_cost=penalty,
                                            holding_cost=1.0, demand=DemandConfig(dist=GEO, mean=5.0)))
    sim = SimConfig(reward="cost", backorders=False, threads=1)
    res = evaluate(catalog, sim, make_policy("base-stock", catalog, sim, {"S": float(level)}),
                   days=400, warmup=50, seed=123)
    assert 0 < res.cost_se < 0.1
    assert abs(res.avg_cost_per_sku_day - exact) < 3 * res.cost_se, (res.avg_cost_per_sku_day, exact, res.cost_se)
