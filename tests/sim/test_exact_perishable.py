"""The perishable relative-value-iteration benchmark (benchmarks/perishable_optimal.py)
against brute force on a tiny instance (every deterministic policy's exact long-run cost
from a transition matrix built here, independently) and against skurl's simulator running
the benchmark's optimal policy."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from benchmark_module import load_benchmark

bench = load_benchmark("perishable_optimal")


def _matrices(inst) -> tuple[list[tuple[int, ...]], np.ndarray, np.ndarray]:
    """States (x_1, x_2) of lead time 1, shelf life 2, and per order q: P[q] [S, S], cost[q] [S],
    by plain enumeration of the demand (FIFO: the units with one day left sell first)."""
    assert inst.lead == 1 and inst.life == 2
    states = list(itertools.product(range(inst.cap + 1), repeat=2))
    index = {s: k for k, s in enumerate(states)}
    pmf = bench.poisson_pmf(inst.mean, 60)
    n, nq = len(states), inst.cap + 1
    P, cost = np.zeros((nq, n, n)), np.zeros((nq, n))
    for (old, new), q in itertools.product(states, range(nq)):
        s = index[(old, new)]
        for d, pd in enumerate(pmf):
            sold_old = min(old, d)
            sold_new = min(new, d - sold_old)
            lost = d - sold_old - sold_new
            waste, keep = old - sold_old, new - sold_new
            cost[q, s] += pd * (inst.holding * keep + inst.penalty * lost + inst.waste * waste)
            P[q, s, index[(keep, q)]] += pd
        cost[q, s] += inst.unit_cost * q
    return states, P, cost


def _gain_from_empty(P: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """Long-run average cost from state 0 of each chain (batched [K, S, S]): the limit of the
    lazy chain (I + P) / 2 (same averages, aperiodic) by repeated squaring."""
    A = 0.5 * (P + np.eye(P.shape[1]))
    for _ in range(14):
        A = A @ A
    return np.einsum("ks,ks->k", A[:, 0, :], cost)


def test_rvi_optimum_is_the_best_of_all_policies_on_a_tiny_instance() -> None:
    inst = bench.Instance(lead=1, life=2, penalty=6.0, mean=1.0, cap=2, waste=3.0)
    states, P, cost = _matrices(inst)
    n = len(states)
    policies = np.array(list(itertools.product(range(inst.cap + 1), repeat=n)))  # 3^9
    rows = np.arange(n)
    gains = _gain_from_empty(P[policies, rows], cost[policies, rows])
    solver = bench.Solver(inst)
    g, orders, _ = solver.rvi(tol=1e-11)
    assert g == pytest.approx(gains.min(), abs=1e-8)
    # the benchmark's states are (x_1, x_2) with index x_1 + 3 x_2; the brute force's x_1 * 3 + x_2
    mine = np.array([orders[a + (inst.cap + 1) * b] for a, b in states])
    assert _gain_from_empty(P[mine, rows][None], cost[mine, rows][None])[0] == pytest.approx(g, abs=1e-8)


def test_policy_evaluation_agrees_with_the_transition_matrix() -> None:
    inst = bench.Instance(lead=1, life=2, penalty=8.0, mean=2.0, cap=6)
    states, P, cost = _matrices(inst)
    solver = bench.Solver(inst)
    for level in (3, 5, 8):
        orders = solver.base_stock(level)
        mine = np.array([orders[a + (inst.cap + 1) * b] for a, b in states])
        rows = np.arange(len(states))
        want = _gain_from_empty(P[mine, rows][None], cost[mine, rows][None])[0]
        assert solver.rvi(orders, tol=1e-11)[0] == pytest.approx(want, abs=1e-8)


def test_the_optimal_policy_costs_the_same_in_skurls_simulator() -> None:
    inst = bench.Instance(lead=2, life=2, penalty=5.0)
    solver = bench.Solver(inst)
    g, orders, _ = solver.rvi()
    cost, se, largest = bench.simulate(inst, orders, skus=1000, days=400, warmup=30)
    assert abs(cost - g) < 4 * se, (cost, g, se)
    assert largest < inst.cap
