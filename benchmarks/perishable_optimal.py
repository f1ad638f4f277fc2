"""Optimal long-run average cost of a perishable lost-sales family by relative value iteration.

Model (skurl's simulator, docs/architecture.md, Simulator semantics; sim.reward=cost): Poisson demand, lead time L,
shelf life m; the order placed today arrives in L days at age 0 and can be sold on m days
(it expires at the end of the m-th); demand is served oldest first (FIFO), the rest is
lost. Costs of a day: unit cost c per unit ordered, holding h per unit on hand at the end
of the day (after expiry), penalty p per lost unit, waste w per expired unit (on top of its
purchase). The family: mean 3, h = 1, c = 2, w = 4, p in {5, 10}, L in {1, 2}, m in {2, 3}.

More: docs/benchmarks.md (benchmarks/perishable_optimal.py)."""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numba import njit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from skurl_runs import capped_base_stock, skurl_json, train_run

MEAN, HOLDING, UNIT_COST, WASTE = 3.0, 1.0, 2.0, 4.0
LEADS, LIVES, PENALTIES = (1, 2), (2, 3), (5.0, 10.0)


@dataclass(frozen=True)
class Instance:
    lead: int
    life: int
    penalty: float
    mean: float = MEAN
    holding: float = HOLDING
    unit_cost: float = UNIT_COST
    waste: float = WASTE
    cap: int = 12  # Q: the largest order

    @property
    def dims(self) -> int:
        return self.life + self.lead - 1


def poisson_pmf(mean: float, upto: int) -> np.ndarray:
    k = np.arange(upto + 1)
    return np.exp(-mean + k * math.log(mean) - np.array([math.lgamma(i + 1) for i in k]))


def states_of(inst: Instance) -> np.ndarray:
    """int64 [S, dims]: (x_1..x_m, o_1..o_{L-1}); index = sum comp[k] (Q + 1)^k."""
    r = inst.cap + 1
    idx = np.arange(r ** inst.dims)
    return np.stack([(idx // r ** k) % r for k in range(inst.dims)], axis=1).astype(np.int64)


def demand_tables(inst: Instance, top: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """pmf[d] for d <= top, P(D >= y) and E[(D - y)^+] for y = 0..top."""
    pmf = poisson_pmf(inst.mean, top + 200)
    tail = 1.0 - np.concatenate([[0.0], np.cumsum(pmf)[:top]])
    d = np.arange(pmf.size)
    lost = np.array([(pmf * np.maximum(d - y, 0)).sum() for y in range(top + 1)])
    return pmf[:top + 1], tail, lost


@njit(cache=True)
def _outcomes(comp, life, lead, radix, pmf, tail, h, w, idx0, prob, cost):
    """Demand outcomes d = 0..total of one state (d = total lumps D >= total): next-state
    index without today's order, probability, holding + waste cost. Returns the count."""
    total = 0
    for r in range(life):
        total += comp[r]
    for d in range(total + 1):
        left = np.empty(life, np.int64)
        rem = d
        for r in range(life):
            take = min(comp[r], rem)
            left[r] = comp[r] - take
            rem -= take
        on_hand = 0
        for r in range(1, life):
            on_hand += left[r]
        nxt = 0
        mult = 1
        for r in range(life - 1):  # x'_r = x_{r+1} left over
            nxt += left[r + 1] * mult
            mult *= radix
        if lead > 1:
            nxt += comp[life] * mult  # the order due tomorrow arrives with m days left
            mult *= radix
            for k in range(1, lead - 1):
                nxt += comp[life + k] * mult
                mult *= radix
        idx0[d] = nxt
        prob[d] = pmf[d] if d < total else tail[total]
        cost[d] = h * on_hand + w * left[0]
    return total + 1


@njit(cache=True)
def sweep(v, states, policy, cap, life, lead, pmf, tail, elost, h, c, p, w, out_v, out_q):
    """out_v = T v (the Bellman operator of average cost); out_q = the minimizing order.
    policy[s] >= 0 fixes the order of state s (policy evaluation); -1 minimizes."""
    radix = cap + 1
    stride = radix ** (life + lead - 2)  # today's order: x'_m (L = 1) or o'_{L-1}
    n = states.shape[0]
    top = pmf.shape[0] + 1
    idx0 = np.empty(top, np.int64)
    prob = np.empty(top)
    cost = np.empty(top)
    for s in range(n):
        k = _outcomes(states[s], life, lead, radix, pmf, tail, h, w, idx0, prob, cost)
        total = 0
        for r in range(life):
            total += states[s, r]
        base = p * elost[total]
        for d in range(k):
            base += prob[d] * cost[d]
        lo, hi = (0, cap) if policy[s] < 0 else (policy[s], policy[s])
        best, arg = np.inf, lo
        for q in range(lo, hi + 1):
            val = base + c * q
            for d in range(k):
                val += prob[d] * v[idx0[d] + q * stride]
            if val < best:
                best, arg = val, q
        out_v[s] = best
        out_q[s] = arg


@njit(cache=True)
def step_distribution(pi, states, orders, cap, life, lead, pmf, tail, out):
    """out = pi P under the orders per state (for the stationary mass)."""
    radix = cap + 1
    stride = radix ** (life + lead - 2)
    top = pmf.shape[0] + 1
    idx0 = np.empty(top, np.int64)
    prob = np.empty(top)
    cost = np.empty(top)
    out[:] = 0.0
    for s in range(states.shape[0]):
        if pi[s] == 0.0:
            continue
        k = _outcomes(states[s], life, lead, radix, pmf, tail, 0.0, 0.0, idx0, prob, cost)
        for d in range(k):
            out[idx0[d] + orders[s] * stride] += pi[s] * prob[d]


class Solver:
    """The arrays of one instance, shared by its optimization and policy evaluations."""

    def __init__(self, inst: Instance) -> None:
        self.inst = inst
        self.states = states_of(inst)
        top = inst.cap * inst.life
        self.pmf, self.tail, self.elost = demand_tables(inst, top)

    def rvi(self, policy: np.ndarray | None = None, tol: float = 1e-8,
            max_iter: int = 50_000) -> tuple[float, np.ndarray, int]:
        """(average cost, orders per state, sweeps); `policy` fixes the orders."""
        inst, n = self.inst, self.states.shape[0]
        fixed = np.full(n, -1, np.int64) if policy is None else policy.astype(np.int64)
        v, new, q = np.zeros(n), np.empty(n), np.empty(n, np.int64)
        for it in range(1, max_iter + 1):
            sweep(v, self.states, fixed, inst.cap, inst.life, inst.lead, self.pmf, self.tail, self.elost,
                  inst.holding, inst.unit_cost, inst.penalty, inst.waste, new, q)
            diff = new - v
            lo, hi = diff.min(), diff.max()
            v = new - new[0]
            if hi - lo < tol:
                return 0.5 * (lo + hi), q.copy(), it
        raise RuntimeError(f"{inst}: relative value iteration did not converge in {max_iter} sweeps")

    def stationary(self, orders: np.ndarray, iters: int = 20_000, tol: float = 1e-12) -> np.ndarray:
        inst, n = self.inst, self.states.shape[0]
        pi, out = np.zeros(n), np.empty(n)
        pi[0] = 1.0
        for _ in range(iters):
            step_distribution(pi, self.states, orders, inst.cap, inst.life, inst.lead, self.pmf, self.tail, out)
            done = np.abs(out - pi).sum() < tol
            pi, out = out, pi
            if done:
                break
        return pi

    def base_stock(self, level: int) -> np.ndarray:
        position = self.states.sum(axis=1)
        return np.clip(level - position, 0, self.inst.cap)

    def best_base_stock(self) -> tuple[int, float]:
        """Scan levels upward from the mean demand over L days until the cost rises twice."""
        best, rises = (0, math.inf), 0
        level = max(0, int(self.inst.mean * self.inst.lead) - 2)
        while rises < 2:
            g, _, _ = self.rvi(self.base_stock(level))
            best, rises = ((level, g), 0) if g < best[1] else (best, rises + 1)
            level += 1
        return best


def simulate(inst: Instance, orders: np.ndarray, skus: int, days: int, warmup: int) -> tuple[float, float, float]:
    """(cost per SKU-day, its standard error, largest order) of the table policy in skurl's
    simulator: uniform catalog of this instance, sim.reward=cost."""
    from skurl.catalog import load_catalog
    from skurl.config import load_config
    from skurl.sim import VectorEnv

    cfg = load_config(None, [
        "catalog.kind=uniform", "catalog.demand.dist=poisson", f"catalog.demand.mean={inst.mean}",
        f"catalog.lead_time={inst.lead}", f"catalog.shelf_life={inst.life}", f"catalog.holding_cost={inst.holding}",
        f"catalog.lost_sale_cost={inst.penalty}", f"catalog.unit_cost={inst.unit_cost}",
        f"catalog.waste_cost={inst.waste}", "sim.reward=cost", "sim.backorders=false", "sim.substitution=false",
        "sim.initial_stock_days=0", f"sim.days={warmup + days}"])
    env = VectorEnv(load_catalog(cfg.catalog, skus), cfg.sim)
    obs = env.reset(seed=20_000)
    expiring = obs.schema.slices()["expiring"]
    scale = max(inst.mean, 0.1)
    radix = inst.cap + 1
    largest = 0.0
    for day in range(warmup + days):
        if day == warmup:
            env.reset_totals()
        by_life = np.rint(obs.features[:, expiring][:, :inst.life] * scale).astype(np.int64)
        comps = np.concatenate([by_life, obs.raw.pipeline[:, :inst.lead - 1]], axis=1)
        index = (np.minimum(comps, inst.cap) * radix ** np.arange(inst.dims)).sum(axis=1)
        q = orders[index].astype(np.float64)
        largest = max(largest, float(q.max()))
        obs = env.step(q).obs
    per_sku = -env.totals()["reward"] / days
    return float(per_sku.mean()), float(per_sku.std(ddof=1) / math.sqrt(skus)), largest


def instance_sets(inst: Instance) -> list[str]:
    """The instance as `--set`s over configs/lost_sales.yaml (Poisson, lost sales, cost reward)."""
    return [f"catalog.demand.mean={inst.mean}", f"catalog.lead_time={inst.lead}", f"catalog.shelf_life={inst.life}",
            f"catalog.holding_cost={inst.holding}", f"catalog.lost_sale_cost={inst.penalty}",
            f"catalog.unit_cost={inst.unit_cost}", f"catalog.waste_cost={inst.waste}"]


def train_instance(inst: Instance, optimal: float, args: argparse.Namespace) -> dict:
    run_dir = Path(args.train) / f"L{inst.lead}m{inst.life}p{inst.penalty:g}"
    sets = [*instance_sets(inst), *args.set]
    wall, cpu = train_run(run_dir, args.config, sets, args.nice)
    cost = skurl_json(args.nice, "eval", "--run", str(run_dir))["avg_cost_per_sku_day"]
    capped = capped_base_stock(args.config, sets, args.nice)
    return {"trained_cost": round(cost, 5), "trained_gap_pct": round(100 * (cost / optimal - 1), 3),
            "capped_base_stock_cost": round(capped, 5), "trained_vs_capped_pct": round(100 * (cost / capped - 1), 3),
            "train_seconds": round(wall, 1), "train_cpu_seconds": round(cpu, 1)}


def solve(inst: Instance, args: argparse.Namespace) -> dict:
    start = time.perf_counter()
    solver = Solver(inst)
    g, orders, sweeps = solver.rvi(tol=args.tol)
    at_cap = float(solver.stationary(orders)[orders == inst.cap].sum())
    level, bs_cost = solver.best_base_stock()
    row = {"lead_time": inst.lead, "shelf_life": inst.life, "penalty": inst.penalty,
           "optimal_cost": round(g, 5), "best_base_stock_level": level, "best_base_stock_cost": round(bs_cost, 5),
           "base_stock_gap_pct": round(100 * (bs_cost / g - 1), 3), "states": int(solver.states.shape[0]),
           "sweeps": sweeps, "mass_at_cap": at_cap}
    if args.simulate:
        cost, se, largest = simulate(inst, orders, args.skus, args.days, args.warmup)
        row.update(simulated_cost=round(cost, 4), simulated_se=round(se, 4), simulated_largest_order=largest)
    row["seconds"] = round(time.perf_counter() - start, 1)
    if args.train:
        row.update(train_instance(inst, g, args))
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lead", type=int, nargs="+", default=list(LEADS))
    ap.add_argument("--life", type=int, nargs="+", default=list(LIVES))
    ap.add_argument("--penalty", type=float, nargs="+", default=list(PENALTIES))
    ap.add_argument("--cap", type=int, default=12, help="largest order Q (the truncation)")
    ap.add_argument("--tol", type=float, default=1e-8)
    ap.add_argument("--simulate", action="store_true", help="also run the optimal policy in skurl's simulator")
    ap.add_argument("--skus", type=int, default=2000)
    ap.add_argument("--days", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--json", help="write the rows to this JSON file")
    ap.add_argument("--train", metavar="OUT", help="also train skurl on each instance; run dirs go here")
    ap.add_argument("--config", default="configs/lost_sales.yaml", help="with --train: the config trained")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="with --train: overrides")
    ap.add_argument("--nice", type=int, default=10, help="with --train: niceness of the runs")
    args = ap.parse_args(argv)
    rows = []
    print(f"{'L':>2} {'m':>2} {'p':>4} {'optimal':>9} {'best S':>6} {'S cost':>9} {'gap %':>6} "
          f"{'at cap':>8} {'simulated':>16} {'states':>6} {'sweeps':>6} {'s':>6}")
    for lead, life, p in itertools.product(args.lead, args.life, args.penalty):
        row = solve(Instance(lead, life, p, cap=args.cap), args)
        rows.append(row)
        sim = f"{row['simulated_cost']:.4f}+-{row['simulated_se']:.4f}" if args.simulate else "-"
        print(f"{lead:>2} {life:>2} {p:>4g} {row['optimal_cost']:>9.5f} {row['best_base_stock_level']:>6} "
              f"{row['best_base_stock_cost']:>9.5f} {row['base_stock_gap_pct']:>6.2f} {row['mass_at_cap']:>8.1e} "
              f"{sim:>16} {row['states']:>6} {row['sweeps']:>6} {row['seconds']:>6}", flush=True)
        if args.train:
            print(f"   trained {row['trained_cost']:.4f} ({row['trained_gap_pct']:+.2f}% to optimal, "
                  f"{row['trained_vs_capped_pct']:+.2f}% to capped base-stock {row['capped_base_stock_cost']:.4f}) "
                  f"in {row['train_seconds']:.0f} s", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"mean": MEAN, "holding": HOLDING, "unit_cost": UNIT_COST, "waste": WASTE, "rows": rows},
                      f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
