"""benchmarks/serial_optimal.py (Clark-Scarf) against independent checks.

1 stage: the newsvendor (smallest S with P(D <= S) >= p / (p + h), D ~ Poisson((L+1) m)).
2 and 3 stages: an exhaustive search over echelon levels, each evaluated exactly in
installation terms (distribution of each stage's echelon position after ordering,
Y_N = S_N, Y_j = min(S_j, Y_{j+1} - A_{j+1}), A_j ~ Poisson(L_j m); expected on-hand per
location, backlog at the store, transit charged at the upstream's rate), and a day-by-day
Monte Carlo of the event order of docs/networks.md with echelon base-stock.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from benchmark_module import load_benchmark

so = load_benchmark("serial_optimal")


def _pmf(lam: float, upto: int = 200) -> np.ndarray:
    d = np.arange(upto + 1)
    if lam == 0:
        return (d == 0).astype(float)
    return np.exp(-lam + d * math.log(lam) - np.array([math.lgamma(k + 1) for k in d]))


def _min_shift(dist: dict[int, float], cap: int, lam: float) -> dict[int, float]:
    """Distribution of min(cap, Y - A), Y ~ dist, A ~ Poisson(lam) independent."""
    out: dict[int, float] = {}
    for y, py in dist.items():
        for a, pa in enumerate(_pmf(lam)):
            if pa < 1e-17:
                continue
            v = min(cap, y - a)
            out[v] = out.get(v, 0.0) + py * pa
    return out


def exact_cost(levels, leads, holding, penalty, mean) -> float:
    """Long-run cost per day of echelon base-stock `levels` (installation accounting)."""
    n = len(levels)
    dist = {levels[-1]: 1.0}
    cost = 0.0
    for j in range(n - 1, -1, -1):  # dist: Y_{j+1} (0-based stage j+1 = stage j+2 in the docs)
        if j < n - 1:
            # on-hand at stage j+1 (0-based) at the end of a day: (Y_{j+1} - A_{j+1} - S_j)^+
            a = _pmf(mean * leads[j + 1])
            cost += holding[j + 1] * sum(py * pa * max(y - k - levels[j], 0)
                                         for y, py in dist.items() for k, pa in enumerate(a))
            cost += holding[j + 1] * leads[j] * mean  # in transit to stage j, Little's law
            dist = _min_shift(dist, levels[j], mean * leads[j + 1])
    dd = _pmf(mean * (leads[0] + 1))
    for y, py in dist.items():
        k = np.arange(dd.shape[0])
        cost += py * float((dd * (holding[0] * np.maximum(y - k, 0) + penalty * np.maximum(k - y, 0))).sum())
    return cost


def test_one_stage_is_the_newsvendor():
    for lead, h, p, m in [(0, 1.0, 9.0, 5.0), (2, 2.0, 19.0, 3.0), (4, 1.0, 4.0, 2.5)]:
        opt = so.clark_scarf([lead], [h], p, m)
        pmf = _pmf(m * (lead + 1))
        s = int(np.argmax(np.cumsum(pmf) >= p / (p + h)))
        assert opt.levels == [s]
        assert opt.cost == pytest.approx(exact_cost([s], [lead], [h], p, m), rel=1e-9)


@pytest.mark.parametrize(("leads", "holding", "penalty"), [
    ([1, 1], [2.0, 1.0], 9.0), ([0, 3], [2.0, 1.0], 19.0), ([2, 0], [3.0, 1.0], 9.0)])
def test_two_stages_match_exhaustive_search(leads, holding, penalty):
    mean = 2.0
    opt = so.clark_scarf(leads, holding, penalty, mean)
    best = min((exact_cost([s1, s2], leads, holding, penalty, mean), s1, s2)
               for s1 in range(0, 20) for s2 in range(0, 30) if s2 >= s1)
    assert opt.cost == pytest.approx(best[0], rel=1e-9)
    assert exact_cost(opt.levels, leads, holding, penalty, mean) == pytest.approx(best[0], rel=1e-9)


def test_three_stages_match_exhaustive_search():
    leads, holding, penalty, mean = [1, 1, 2], [3.0, 2.0, 1.0], 9.0, 1.0
    opt = so.clark_scarf(leads, holding, penalty, mean)
    best = min((exact_cost([a, b, c], leads, holding, penalty, mean), a, b, c)
               for a, b, c in itertools.product(range(0, 9), range(0, 12), range(0, 16)) if a <= b <= c)
    assert opt.cost == pytest.approx(best[0], rel=1e-9)
    assert tuple(opt.levels) == best[1:]


def _monte_carlo(levels, leads, holding, penalty, mean, reps=4000, days=300, warm=60, seed=3):
    """Echelon base-stock day by day: arrivals, orders, shipments top down, demand, costs."""
    rng = np.random.default_rng(seed)
    n = len(levels)
    oh = np.zeros((n, reps), np.int64)
    transit = [np.zeros((leads[j] + 1, reps), np.int64) for j in range(n)]  # ring by due day
    backlog = np.zeros(reps, np.int64)
    total = np.zeros(reps)
    for t in range(days):
        for j in range(n):
            slot = t % (leads[j] + 1)
            oh[j] += transit[j][slot]
            transit[j][slot] = 0
        for j in range(n - 1, -1, -1):  # top down: echelon position, order, ship what is there
            pos = oh[: j + 1].sum(0) - backlog + sum(transit[i].sum(0) for i in range(j + 1))
            want = np.maximum(levels[j] - pos, 0)
            ship = want if j == n - 1 else np.minimum(want, oh[j + 1])
            if j < n - 1:
                oh[j + 1] -= ship
            due = (t + leads[j]) % (leads[j] + 1)
            if leads[j] == 0:
                oh[j] += ship
            else:
                transit[j][due] += ship
        need = backlog + rng.poisson(mean, reps)
        served = np.minimum(need, oh[0])
        oh[0] -= served
        backlog = need - served
        if t >= warm:
            cost = holding[0] * oh[0] + penalty * backlog
            for j in range(1, n):
                cost = cost + holding[j] * (oh[j] + transit[j - 1].sum(0))
            total += cost
    per_rep = total / (days - warm)
    return per_rep.mean(), per_rep.std() / math.sqrt(reps)


@pytest.mark.parametrize(("leads", "holding"), [([1, 2], [2.0, 1.0]), ([0, 1, 2], [3.0, 2.0, 1.0])])
def test_monte_carlo_of_the_event_order_matches(leads, holding):
    mean, penalty = 2.0, 9.0
    opt = so.clark_scarf(leads, holding, penalty, mean)
    mc, se = _monte_carlo(opt.levels, leads, holding, penalty, mean)
    assert abs(mc - opt.cost) < 4 * se + 1e-9, (mc, opt.cost, se)
