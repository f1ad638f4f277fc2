"""The simulator against an exact Markov chain: lost sales, Poisson demand, base-stock.

Under the simulator's timing (docs/architecture.md, Simulator semantics: arrival, order, demand, holding on end-of-day stock, penalty per
lost unit) and an order-up-to level S, the state seen when ordering, x = (y, p_1..p_{L-1})
(on hand after today's arrival, orders due in 1..L-1 days), is a finite Markov chain: the
order is q = S - y - sum(p), and after demand D the next state is
((y - D)^+ + p_1, p_2, ..., p_{L-1}, q). Its stationary distribution gives the exact
long-run average cost E[h (y - D)^+ + p (D - y)^+], which the simulator's estimate (many
SKUs x days, independent copies) must match within a few of its standard errors.
The tuner's choice of S is checked against the chain's best level the same way.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from skurl.catalog.uniform import uniform_catalog
from skurl.collect.evaluate import evaluate
from skurl.config import CatalogConfig, DemandConfig, SimConfig
from skurl.policy.baselines import make_policy
from skurl.policy.tuning import tune

MEAN, H = 5.0, 1.0
SIM = SimConfig(reward="cost", backorders=False, threads=1)  # results do not depend on threads


def poisson_pmf(mean: float, upto: int) -> np.ndarray:
    k = np.arange(upto + 1)
    return np.exp(-mean + k * math.log(mean) - np.array([math.lgamma(i + 1) for i in k]))


def chain(lead: int, level: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """States with total stock <= level, and every transition (from, to, probability)."""
    states = np.array([s for s in itertools.product(range(level + 1), repeat=lead) if sum(s) <= level])
    index = {tuple(s): i for i, s in enumerate(states)}
    pmf = poisson_pmf(MEAN, level + 1)
    src, dst, prob = [], [], []
    for i, s in enumerate(states):
        y, pipe = int(s[0]), [int(v) for v in s[1:]]
        q = level - y - sum(pipe)
        for d in range(y + 1):  # d = y stands for every demand >= y (all of it sold)
            pr = pmf[d] if d < y else 1.0 - pmf[:y].sum()
            left = y - d
            nxt = (left + pipe[0], *pipe[1:], q) if lead > 1 else (left + q,)
            src.append(i)
            dst.append(index[nxt])
            prob.append(pr)
    return states, np.array(src), np.array(dst), np.array(prob)


def exact_cost(lead: int, level: int, penalty: float) -> float:
    """Long-run average cost per day of order-up-to `level` (power iteration)."""
    states, src, dst, prob = chain(lead, level)
    pi = np.full(len(states), 1.0 / len(states))
    for _ in range(100_000):
        new = np.bincount(dst, weights=pi[src] * prob, minlength=len(states))
        if np.abs(new - pi).sum() < 1e-13:
            break
        pi = new
    y = states[:, 0]
    d = np.arange(200)
    pmf = poisson_pmf(MEAN, 199)
    stage = (pmf * (H * np.maximum(y[:, None] - d, 0) + penalty * np.maximum(d - y[:, None], 0))).sum(1)
    return float(pi @ stage)


def uniform(lead: int, penalty: float, skus: int):
    return uniform_catalog(CatalogConfig(kind="uniform", skus=skus, lead_time=lead, lost_sale_cost=penalty,
                                         holding_cost=H, demand=DemandConfig(dist="poisson", mean=MEAN)))


def test_chain_on_a_case_worked_by_hand():
    # L = 1, S = 1: on hand y is 0 or 1. From 1, any demand empties it and nothing was
    # ordered (q = 0); from 0, the unit ordered yesterday arrives. So pi(1) = 1 / (2 - P(D=0)).
    p0 = math.exp(-MEAN)
    pi1 = 1.0 / (2.0 - p0)
    cost_at_1 = H * p0 + 9.0 * (MEAN - 1.0 + p0)  # E[(1 - D)^+] = P(D=0), E[(D - 1)^+] = m - 1 + P(D=0)
    expected = pi1 * cost_at_1 + (1.0 - pi1) * 9.0 * MEAN
    assert exact_cost(1, 1, 9.0) == pytest.approx(expected, rel=1e-9)
    assert exact_cost(1, 0, 9.0) == pytest.approx(9.0 * MEAN)


@pytest.mark.parametrize(("lead", "level", "penalty"), [(1, 13, 9.0), (2, 19, 9.0), (3, 20, 4.0)])
def test_simulated_cost_matches_exact_chain(lead, level, penalty):
    exact = exact_cost(lead, level, penalty)
    catalog = uniform(lead, penalty, skus=2000)
    policy = make_policy("base-stock", catalog, SIM, {"S": float(level)})
    res = evaluate(catalog, SIM, policy, days=400, warmup=50, seed=123)
    assert 0 < res.cost_se < 0.03  # 800k SKU-days: a sharp estimate, not a vacuous check
    assert abs(res.avg_cost_per_sku_day - exact) < 4 * res.cost_se, (res.avg_cost_per_sku_day, exact, res.cost_se)
    # Penalty per lost unit: the lost units and the penalty line agree exactly.
    sku_days = res.skus * res.days
    assert res.breakdown["penalty"] == pytest.approx(penalty * res.lost_units / sku_days)


def test_tuned_level_is_the_exact_optimum():
    lead, penalty = 2, 9.0
    exact = {s: exact_cost(lead, s, penalty) for s in range(14, 24)}
    best = min(exact, key=exact.get)
    assert best not in (14, 23)  # the range brackets the optimum
    catalog = uniform(lead, penalty, skus=50)
    result = tune("base-stock", catalog, SIM, eval_seed=10_000, days=200, warmup=50)
    chosen = int(result.params["S"][0])
    assert np.all(result.params["S"] == chosen)
    # The search must land on the optimum, or on a level whose exact cost is within a
    # hair of it (a tie the simulation cannot and need not separate).
    assert exact[chosen] - exact[best] < 0.005, (chosen, best, exact)
    assert result.objective == pytest.approx(exact[chosen], abs=0.05)
