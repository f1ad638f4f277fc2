"""Optimal long-run average cost of Zipkin's lost-sales instances by relative value iteration.

Instances (Zipkin 2008, "Old and New Methods for Lost-Sales Inventory Systems", Operations
Research 56(5):1256-1263): Poisson or (--dist) geometric demand with mean 5, holding h = 1 per unit
left at the end of a period, penalty p in {4, 9, 19, 39} per lost unit, lead time L in
{1, 2, 3, 4}. Timing as in skurl's simulator (docs/architecture.md, Simulator semantics) and Zipkin: the order
placed L periods ago arrives, the state is observed and an order placed, demand is served
from stock on hand, the rest is lost; costs on the period's end.

More: docs/benchmarks.md (benchmarks/lost_sales_optimal.py)."""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from dataclasses import dataclass

import numpy as np

MEAN, HOLDING = 5.0, 1.0
LEADS, PENALTIES = (1, 2, 3, 4), (4.0, 9.0, 19.0, 39.0)
# Optimal costs printed in Zipkin (2008) Table 3 (Poisson, mean 5), as carried by public
# benchmark suites that cite that table; only the cells found with their source are listed.
PUBLISHED_OPTIMAL = {(4, 4.0): 4.73, (4, 19.0): 8.89}
DISTS = ("poisson", "geometric")


def geometric_pmf(mean: float, upto: int) -> np.ndarray:
    """Failures before the first success, P(D = k) = (1 - q) q^k with q = mean / (1 + mean):
    the parametrization of skurl's sampler (sim/demand.py, geometric)."""
    q = mean / (1.0 + mean)
    return (1.0 - q) * q ** np.arange(upto + 1)


def demand_pmf(dist: str, mean: float, upto: int) -> np.ndarray:
    """P(D = 0..upto) of one day's demand."""
    if dist == "poisson":
        return poisson_pmf(mean, upto)
    if dist == "geometric":
        return geometric_pmf(mean, upto)
    raise ValueError(f"dist: expected one of {DISTS}, got {dist!r}")


def lead_time_demand_pmf(dist: str, mean: float, periods: int, upto: int) -> np.ndarray:
    """P(D_1 + .. + D_periods = 0..upto): Poisson(periods mean), or for geometric days the
    negative binomial of `periods` successes (failures before the periods-th success)."""
    if dist == "poisson":
        return poisson_pmf(mean * periods, upto)
    q = mean / (1.0 + mean)
    k = np.arange(upto + 1)
    log_choose = np.array([math.lgamma(i + periods) - math.lgamma(i + 1) - math.lgamma(periods) for i in k])
    return np.exp(log_choose + periods * math.log1p(-q) + k * math.log(q))


def poisson_pmf(mean: float, upto: int) -> np.ndarray:
    k = np.arange(upto + 1)
    logp = -mean + k * math.log(mean) - np.array([math.lgamma(i + 1) for i in k])
    return np.exp(logp)


def backorder_level(mean: float, lead: int, h: float, p: float, dist: str = "poisson") -> int:
    """Smallest S with P(D_1 + .. + D_{L+1} <= S) >= p / (p + h): the (L+1)-day quantile
    at the critical ratio, so a heavier tail or a larger penalty raises it."""
    upto = int(mean * (lead + 1) * (4 if dist == "poisson" else 12) + 50)
    pmf = lead_time_demand_pmf(dist, mean, lead + 1, upto)
    return int(np.searchsorted(np.cumsum(pmf), p / (p + h)))


@dataclass
class Model:
    """Enumerated states (total stock <= bound) and, per (state, action) pair, the demand
    outcomes: next-state index and probability."""

    states: np.ndarray  # int [n, L]: y, p_1..p_{L-1}
    stage_cost: np.ndarray  # float [n]: E[h (y-D)^+ + p (D-y)^+]
    pair_state: np.ndarray  # int [m]: state of each (state, action) pair, sorted
    pair_first: np.ndarray  # int [n]: first pair of each state (for reduceat)
    out_pair: np.ndarray  # int [k]: pair of each outcome
    out_next: np.ndarray  # int [k]: next state of each outcome
    out_prob: np.ndarray  # float [k]


def enumerate_states(lead: int, bound: int) -> tuple[np.ndarray, np.ndarray]:
    """All (y, p_1..p_{L-1}) >= 0 with sum <= bound, and a dense index lookup."""
    grid = np.array(list(itertools.product(range(bound + 1), repeat=lead)), dtype=np.int64)
    states = grid[grid.sum(axis=1) <= bound]
    lookup = np.full((bound + 1,) * lead, -1, dtype=np.int64)
    lookup[tuple(states.T)] = np.arange(states.shape[0])
    return states, lookup


def stage_costs(y: np.ndarray, mean: float, h: float, p: float, dist: str = "poisson") -> np.ndarray:
    top = int(y.max()) + int(mean * (10 if dist == "poisson" else 40) + 60)
    pmf = demand_pmf(dist, mean, top)
    d = np.arange(top + 1)
    over = np.maximum(y[:, None] - d[None, :], 0)
    under = np.maximum(d[None, :] - y[:, None], 0)
    tail_mean = mean - (pmf * d).sum()  # E[D; D > top], negligible but kept
    return (pmf * (h * over + p * under)).sum(axis=1) + p * max(tail_mean, 0.0)


def build_model(lead: int, bound: int, mean: float, h: float, p: float,
                action: np.ndarray | None = None, dist: str = "poisson",
                max_order: int | None = None) -> Model:
    """`action` (per state) fixes the order (policy evaluation); None allows every order
    that keeps the total stock within the bound (and, given, at most max_order: a policy
    whose action set stops there). Indices are int32: L = 4 has ~10^8 outcomes."""
    states, lookup = enumerate_states(lead, bound)
    n = states.shape[0]
    total = states.sum(axis=1)
    if action is None:
        room = bound - total
        counts = (room if max_order is None else np.minimum(room, max_order)) + 1
        pair_state = np.repeat(np.arange(n), counts)
        starts = np.cumsum(counts) - counts
        pair_q = np.arange(pair_state.size) - np.repeat(starts, counts)
    else:
        pair_state, pair_q = np.arange(n), np.asarray(action, dtype=np.int64)
        starts = np.arange(n)
    y = states[pair_state, 0]
    outcomes = y + 1  # d = 0..y-1 exactly, and d >= y lumped (all leave 0 on hand)
    out_pair = np.repeat(np.arange(pair_state.size, dtype=np.int32), outcomes)
    d = np.arange(out_pair.size) - np.repeat(np.cumsum(outcomes) - outcomes, outcomes)
    pmf = demand_pmf(dist, mean, bound + 1)
    cdf = np.cumsum(pmf)
    y_out = y[out_pair]
    prob = np.where(d < y_out, pmf[np.minimum(d, bound + 1)], 1.0 - np.where(y_out > 0, cdf[y_out - 1], 0.0))
    src = states[pair_state[out_pair]]
    nxt = np.empty_like(src)
    left = y_out - d
    nxt[:, 0] = left + (src[:, 1] if lead > 1 else pair_q[out_pair])
    if lead > 1:
        nxt[:, 1:-1] = src[:, 2:]
        nxt[:, -1] = pair_q[out_pair]
    del src, left, y_out, d
    out_next = lookup[tuple(nxt.T)].astype(np.int32)
    if (out_next < 0).any():
        raise ValueError("a transition leaves the truncated state space")
    return Model(states, stage_costs(states[:, 0], mean, h, p, dist), pair_state, starts,
                 out_pair, out_next, prob)


def relative_value_iteration(model: Model, tol: float = 1e-7, max_iter: int = 100_000,
                             ) -> tuple[float, np.ndarray, int]:
    """Average cost g (midpoint of the Odoni bounds), relative values and sweeps used."""
    v = np.zeros(model.states.shape[0])
    npairs = model.pair_state.size
    for it in range(1, max_iter + 1):
        cont = np.bincount(model.out_pair, weights=model.out_prob * v[model.out_next], minlength=npairs)
        best = np.minimum.reduceat(cont, model.pair_first)
        new = model.stage_cost + best
        diff = new - v
        lo, hi = diff.min(), diff.max()
        v = new - new[0]
        if hi - lo < tol:
            return 0.5 * (lo + hi), v, it
    raise RuntimeError(f"relative value iteration did not converge in {max_iter} sweeps")


def base_stock_cost(lead: int, level: int, mean: float, h: float, p: float, dist: str = "poisson") -> float:
    """Exact average cost of order-up-to `level` (states with total <= level recur)."""
    states, _ = enumerate_states(lead, level)
    action = level - states.sum(axis=1)
    g, _, _ = relative_value_iteration(build_model(lead, level, mean, h, p, action, dist))
    return g


def best_base_stock(lead: int, mean: float, h: float, p: float, dist: str = "poisson") -> tuple[int, float]:
    """Scan levels upward from below the mean lead-time demand (Poisson), or downward from
    the backorder level (geometric, whose best level lies far above the mean), until the
    cost rises twice; the cost is convex in the level (Janakiraman and Roundy 2004)."""
    if dist == "poisson":
        start, step = max(0, int(mean * (lead + 1)) - 4), 1
    else:
        start, step = backorder_level(mean, lead, h, p, dist), -1
    best = (start, math.inf)
    rises = 0
    level = start
    while rises < 2 and level >= 0:
        cost = base_stock_cost(lead, level, mean, h, p, dist)
        if cost < best[1]:
            best, rises = (level, cost), 0
        else:
            rises += 1
        level += step
    if step < 0 and best[0] == start:
        raise RuntimeError("best base-stock level at the backorder level: scan upward")
    return best


def discounted_policy(model: Model, gamma: float, tol: float = 1e-6, max_iter: int = 20_000) -> np.ndarray:
    """The order (per state) of the gamma-discounted optimal policy, by value iteration
    (Puterman 1994, section 6.3): how much the discount alone moves the policy that PPO
    approximates away from the average-cost optimum."""
    v = np.zeros(model.states.shape[0])
    npairs = model.pair_state.size
    for _ in range(max_iter):
        cont = np.bincount(model.out_pair, weights=model.out_prob * v[model.out_next], minlength=npairs)
        new = model.stage_cost + gamma * np.minimum.reduceat(cont, model.pair_first)
        done = np.abs(new - v).max() < tol
        v = new
        if done:
            break
    cont = np.bincount(model.out_pair, weights=model.out_prob * v[model.out_next], minlength=npairs)
    best = np.minimum.reduceat(cont, model.pair_first)
    # Pairs of a state are its orders 0, 1, ...: the first pair reaching the minimum.
    is_best = cont <= best[model.pair_state] + 1e-12
    first = np.full(model.states.shape[0], np.iinfo(np.int64).max)
    np.minimum.at(first, model.pair_state[is_best], np.flatnonzero(is_best))
    return first - model.pair_first


def discounted_policy_cost(lead: int, p: float, margin: int, gamma: float, dist: str = "poisson") -> float:
    """Exact average cost of the gamma-discounted optimal policy."""
    bound = backorder_level(MEAN, lead, HOLDING, p, dist) + margin
    q = discounted_policy(build_model(lead, bound, MEAN, HOLDING, p, dist=dist), gamma)
    g, _, _ = relative_value_iteration(build_model(lead, bound, MEAN, HOLDING, p, q, dist))
    return g


def solve(lead: int, p: float, margin: int, with_base_stock: bool, dist: str = "poisson",
          max_order: int | None = None) -> dict:
    start = time.perf_counter()
    bound = backorder_level(MEAN, lead, HOLDING, p, dist) + margin
    model = build_model(lead, bound, MEAN, HOLDING, p, dist=dist, max_order=max_order)
    g, _, sweeps = relative_value_iteration(model)
    row = {"dist": dist, "lead_time": lead, "penalty": p, "optimal_cost": round(g, 4), "bound": bound,
           "max_order": max_order, "states": int(model.states.shape[0]),
           "outcomes": int(model.out_pair.size), "sweeps": sweeps,
           "published_optimal": PUBLISHED_OPTIMAL.get((lead, p)) if dist == "poisson" else None}
    del model
    if with_base_stock:
        level, cost = best_base_stock(lead, MEAN, HOLDING, p, dist)
        row.update(best_base_stock_level=level, best_base_stock_cost=round(cost, 4))
    row["seconds"] = round(time.perf_counter() - start, 2)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lead", type=int, nargs="+", default=list(LEADS))
    ap.add_argument("--penalty", type=float, nargs="+", default=list(PENALTIES))
    ap.add_argument("--dist", choices=DISTS, default="poisson", help="daily demand distribution (mean 5)")
    ap.add_argument("--margin", type=int, default=2, help="states above the backorder level kept")
    ap.add_argument("--max-order", type=int, help="largest order allowed (skurl's policy.actions: n - 1)")
    ap.add_argument("--no-base-stock", action="store_true", help="skip the exact best base-stock scan")
    ap.add_argument("--json", help="write the rows to this JSON file")
    ap.add_argument("--gamma", type=float, nargs="*", default=[],
                    help="also print the average cost of the gamma-discounted optimal policy")
    args = ap.parse_args(argv)
    rows = []
    print(f"{'L':>2} {'p':>4} {'optimal':>8} {'published':>9} {'best S':>6} {'S cost':>7} "
          f"{'states':>7} {'outcomes':>10} {'sweeps':>6} {'s':>6}")
    for lead, p in itertools.product(args.lead, args.penalty):
        row = solve(lead, p, args.margin, not args.no_base_stock, args.dist, args.max_order)
        rows.append(row)
        pub = row["published_optimal"]
        print(f"{lead:>2} {p:>4g} {row['optimal_cost']:>8.4f} {pub if pub else '-':>9} "
              f"{row.get('best_base_stock_level', '-'):>6} {row.get('best_base_stock_cost', float('nan')):>7.4f} "
              f"{row['states']:>7} {row['outcomes']:>10} {row['sweeps']:>6} {row['seconds']:>6}", flush=True)
        for gamma in args.gamma:
            g = discounted_policy_cost(lead, p, args.margin, gamma, args.dist)
            row[f"discounted_{gamma:g}_cost"] = round(g, 4)
            print(f"   gamma {gamma:g}: discounted-optimal policy costs {g:.4f} "
                  f"({100 * (g / row['optimal_cost'] - 1):+.3f}% vs optimal)", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"dist": args.dist, "mean": MEAN, "holding": HOLDING, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
