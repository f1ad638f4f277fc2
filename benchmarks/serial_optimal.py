"""Exact optimum of a serial system (Poisson demand, backorders) by the Clark-Scarf recursion.

Stage 1 is the store, stage N is fed by an outside supplier; L_j is the lead time of the
link into stage j (an order placed on day t arrives at the start of day t + L_j), h'_j the
installation holding rate on end-of-day on-hand, stock in transit to j charged at h'_{j+1}
(0 into stage N), p the penalty per backordered unit per day at the store (docs/networks.md).
Echelon rates h_j = h'_j - h'_{j+1} >= 0 turn the daily cost into sum_j h_j IN_j + (p + h'_1) B.
The recursion (Chen & Zheng 1994; Gallego & Zipkin 1999), D_k ~ Poisson(k m):
  G_1(y) = E[h_1 (y - D_{L1+1}) + (p + h'_1) (D_{L1+1} - y)^+],   S_1 = argmin G_1
  G_j(y) = h_j (y - (L_j + 1) m) + E[G_{j-1}(min(S_{j-1}, y - D_{L_j}))],  S_j = argmin G_j
Optimal echelon base-stock levels S_1..S_N, optimal cost per day G_N(S_N). Usage:
    .venv/bin/python benchmarks/serial_optimal.py --lead 1 1 --holding 2 1 --penalty 9 [--simulate] [--tune]
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import asdict, dataclass

import numpy as np

TAIL = 1e-15  # Poisson mass left out beyond the grid's reach


@dataclass(frozen=True)
class SerialOptimum:
    levels: list[int]  # optimal echelon base-stock levels S_1..S_N (stage 1 = store)
    cost: float  # optimal long-run cost per day
    stage_costs: list[float]  # min G_j: the optimum of the first j stages' subsystem


def poisson_pmf(lam: float, upto: int | None = None) -> np.ndarray:
    """P(D = 0..K) for D ~ Poisson(lam), K the 1 - TAIL quantile (or `upto`)."""
    if upto is None:
        upto = int(lam + 12 * math.sqrt(lam + 1) + 30)
    d = np.arange(upto + 1)
    if lam == 0:
        return (d == 0).astype(float)
    logp = -lam + d * math.log(lam) - np.array([math.lgamma(k + 1) for k in d])
    return np.exp(logp)


def echelon_rates(holding: list[float]) -> list[float]:
    """h_j = h'_j - h'_{j+1} from installation rates h'_1..h'_N (h'_{N+1} = 0)."""
    rates = [holding[j] - (holding[j + 1] if j + 1 < len(holding) else 0.0) for j in range(len(holding))]
    if min(rates) < 0:
        raise ValueError(f"holding {holding}: installation rates must not increase downstream")
    return rates


def _expect_shift(values: np.ndarray, pmf: np.ndarray) -> np.ndarray:
    """out[y] = sum_d pmf[d] values[max(y - d, 0)] on the grid (index 0 = its lowest point)."""
    out = np.zeros_like(values)
    n = values.shape[0]
    for d, w in enumerate(pmf):
        shifted = np.concatenate([np.full(min(d, n), values[0]), values[: max(n - d, 0)]])
        out += w * shifted
    return out


def clark_scarf(lead_times: list[int], holding: list[float], penalty: float, mean: float) -> SerialOptimum:
    """Optimal echelon levels and cost of the serial system (module docstring)."""
    if len(lead_times) != len(holding) or not lead_times:
        raise ValueError("lead_times and holding: one entry per stage, at least one stage")
    h = echelon_rates(holding)
    total = mean * (sum(lead_times) + len(lead_times))
    reach = int(total + 14 * math.sqrt(total + 1) + 40)
    grid = np.arange(-3 * reach, reach + 1)  # wide below: G_j is needed at y - D for y near S
    pmf1 = poisson_pmf(mean * (lead_times[0] + 1))
    d = np.arange(pmf1.shape[0])
    short = np.array([(pmf1 * np.maximum(d - y, 0)).sum() for y in grid])
    g = h[0] * (grid - mean * (lead_times[0] + 1)) + (penalty + holding[0]) * short
    levels, stage_costs = [], []
    for j in range(len(lead_times)):
        if j > 0:
            induced = np.where(grid <= levels[-1], g, g[grid == levels[-1]][0])
            pmf = poisson_pmf(mean * lead_times[j])
            g = h[j] * (grid - mean * (lead_times[j] + 1)) + _expect_shift(induced, pmf)
        k = int(np.argmin(g))
        levels.append(int(grid[k]))
        stage_costs.append(float(g[k]))
    return SerialOptimum(levels, stage_costs[-1], stage_costs)


def simulate(lead_times: list[int], holding: list[float], penalty: float, mean: float, *, copies: int = 2000,
             days: int = 400, warmup: int = 100, seed: int = 11, tune: bool = False) -> dict:
    """skurl's simulator on `copies` copies of the chain (catalog.kind=serial, backorders):
    the cost per network-day of the optimal levels (with its standard error), and with
    `tune` the tuned echelon and installation base-stock (`skurl eval --policy ... --tune`)."""
    from skurl.catalog import load_catalog
    from skurl.collect.evaluate import evaluate
    from skurl.config import load_config
    from skurl.policy.baselines import make_policy
    from skurl.policy.tuning import tune as tune_policy

    cfg = load_config(None, ["catalog.kind=serial", f"catalog.skus={copies}", f"catalog.serial.lead_times={lead_times}",
                             f"catalog.serial.holding={holding}", f"catalog.lost_sale_cost={penalty}",
                             f"catalog.demand.mean={mean}", "sim.backorders=true", "sim.reward=cost"])
    catalog = load_catalog(cfg.catalog)
    opt = clark_scarf(lead_times, holding, penalty, mean)
    levels = np.tile(np.asarray(opt.levels, float), copies)
    res = evaluate(catalog, cfg.sim, make_policy("echelon-base-stock", catalog, cfg.sim, {"S": levels}),
                   days=days, warmup=warmup, seed=seed)
    # Orders are placed simultaneously, so an upstream sees its location's order a day late
    # on its installation position: installation base-stock is then echelon base-stock with
    # every upstream link a day longer (docs/networks.md), and its best cost is that optimum.
    lagged = clark_scarf([lead_times[0]] + [x + 1 for x in lead_times[1:]], holding, penalty, mean).cost
    out = {"exact": opt.cost, "levels": opt.levels, "simulated": res.network["avg_cost_per_network_day"],
           "se": res.network["cost_se"], "installation_predicted": lagged}
    for name in ("echelon-base-stock", "installation-base-stock") if tune else ():
        tuned = tune_policy(name, catalog, cfg.sim, eval_seed=seed, days=days, warmup=warmup, progress=lambda _: None)
        r = evaluate(catalog, cfg.sim, make_policy(name, catalog, cfg.sim, tuned.params), days=days,
                     warmup=warmup, seed=seed)
        out[name] = {"levels": tuned.params["S"][: len(lead_times)].tolist(),
                     "cost": r.network["avg_cost_per_network_day"], "se": r.network["cost_se"],
                     "gap": r.network["avg_cost_per_network_day"] / opt.cost - 1.0}
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lead", type=int, nargs="+", default=[1, 1], help="L_1..L_N, stage 1 = store")
    ap.add_argument("--holding", type=float, nargs="+", default=[2.0, 1.0], help="installation h'_1..h'_N")
    ap.add_argument("--penalty", type=float, nargs="+", default=[9.0, 19.0])
    ap.add_argument("--mean", type=float, default=5.0)
    ap.add_argument("--simulate", action="store_true", help="also run skurl's simulator at the optimal levels")
    ap.add_argument("--tune", action="store_true", help="also tune echelon and installation base-stock")
    ap.add_argument("--copies", type=int, default=2000, help="networks simulated (catalog.skus)")
    ap.add_argument("--json", help="write the rows to this file")
    args = ap.parse_args(argv)
    rows = []
    for p in args.penalty:
        opt = clark_scarf(args.lead, args.holding, p, args.mean)
        row = {"lead": args.lead, "holding": args.holding, "penalty": p, "mean": args.mean, **asdict(opt)}
        line = f"L={args.lead} h'={args.holding} p={p:g} m={args.mean:g}: levels {opt.levels} cost/day {opt.cost:.4f}"
        if args.simulate or args.tune:
            sim = simulate(args.lead, args.holding, p, args.mean, copies=args.copies, tune=args.tune)
            row["sim"] = sim
            line += f"; simulated {sim['simulated']:.4f} +- {sim['se']:.4f} ({(sim['simulated'] - opt.cost) / sim['se']:+.2f} SE)"
            for name in ("echelon-base-stock", "installation-base-stock"):
                if name in sim:
                    t = sim[name]
                    line += f"; tuned {name.split('-')[0]} {t['levels']} {t['cost']:.4f} ({100 * t['gap']:+.2f}%)"
            if args.tune:
                line += f"; installation predicted {sim['installation_predicted']:.4f}"
        rows.append(row)
        print(line, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
