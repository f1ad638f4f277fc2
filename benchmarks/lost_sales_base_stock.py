"""Best base-stock level of Zipkin's 16 lost-sales instances, found by skurl's tuner.

The same path as `skurl eval --policy base-stock --tune` on a uniform catalog (Poisson
mean 5, h = 1, p in {4, 9, 19, 39}, L in {1, 2, 3, 4}; sim.reward=cost, lost sales): the
exhaustive CRN search over integer levels on tuning seeds, then an evaluation of the chosen
level on the held-out evaluation seeds. With --exact, each row also shows the best level
and its cost from the exact Markov chain (lost_sales_optimal.py), which the simulated
search should reproduce.

    .venv/bin/python benchmarks/lost_sales_base_stock.py [--exact] [--json out.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

from skurl.catalog import load_catalog
from skurl.collect.evaluate import evaluate
from skurl.config import load_config
from skurl.policy.baselines import make_policy
from skurl.policy.tuning import tune

LEADS, PENALTIES = (1, 2, 3, 4), (4.0, 9.0, 19.0, 39.0)


def instance_config(lead: int, penalty: float, seed: int, threads: int = 0):
    return load_config(None, [f"sim.threads={threads}",
        "catalog.kind=uniform", "catalog.demand.dist=poisson", "catalog.demand.mean=5",
        f"catalog.lead_time={lead}", "catalog.holding_cost=1", f"catalog.lost_sale_cost={penalty}",
        "sim.reward=cost", "sim.backorders=false", f"eval.seed={seed}",
    ])


def run_instance(lead: int, penalty: float, args: argparse.Namespace, policy: str = "base-stock") -> dict:
    """Tune baseline `policy` on the instance, then score it on the evaluation seeds."""
    cfg = instance_config(lead, penalty, args.seed, args.threads)
    start = time.perf_counter()
    catalog = load_catalog(cfg.catalog, skus=args.eval_skus)
    tuned = tune(policy, catalog, cfg.sim, eval_seed=cfg.eval.seed, days=args.days,
                 warmup=args.warmup, uniform_skus=args.skus, max_uniform_skus=args.max_skus)
    tune_s = time.perf_counter() - start
    result = evaluate(catalog, cfg.sim, make_policy(policy, catalog, cfg.sim, tuned.params),
                      days=args.eval_days, warmup=args.warmup, seed=cfg.eval.seed)
    row = {"lead_time": lead, "penalty": penalty, "policy": policy, "level": int(tuned.params["S"][0]),
           **({"cap": int(tuned.params["r"][0])} if "r" in tuned.params else {}),
           "tuning_cost": round(tuned.objective, 4), "eval_cost": round(result.avg_cost_per_sku_day, 4),
           "eval_se": round(result.cost_se, 4), "fill_rate": round(result.fill_rate, 4),
           "tuning_runs": tuned.runs, "tuning_sku_days": tuned.sku_days,
           "runner_up": tuned.details.get("runner_up"), "tune_seconds": round(tune_s, 1),
           "seconds": round(time.perf_counter() - start, 1)}
    if getattr(args, "exact", False):
        sys.path.insert(0, str(Path(__file__).parent))
        from lost_sales_optimal import best_base_stock

        level, cost = best_base_stock(lead, 5.0, 1.0, penalty)
        row.update(exact_level=level, exact_cost=round(cost, 4))
    return row


def instance_parser(description: str, leads: tuple[int, ...]) -> argparse.ArgumentParser:
    """The flags of a table of tuned instances (shared with lost_sales_long_lead.py)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--lead", type=int, nargs="+", default=list(leads))
    ap.add_argument("--penalty", type=float, nargs="+", default=list(PENALTIES))
    ap.add_argument("--skus", type=int, default=1000, help="SKUs per tuning batch")
    ap.add_argument("--max-skus", type=int, default=16_000, help="most SKUs for close contenders")
    ap.add_argument("--days", type=int, default=200, help="tuning days per episode")
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--eval-skus", type=int, default=4000)
    ap.add_argument("--eval-days", type=int, default=500)
    ap.add_argument("--seed", type=int, default=10_000, help="first evaluation seed")
    ap.add_argument("--threads", type=int, default=0, help="sim.threads (0 = all cores)")
    ap.add_argument("--json", help="write the rows to this JSON file")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = instance_parser(__doc__.split("\n")[0], LEADS)
    ap.add_argument("--exact", action="store_true", help="add the exact Markov-chain optimum")
    args = ap.parse_args(argv)
    rows = []
    print(f"{'L':>2} {'p':>4} {'S':>3} {'eval cost':>16} {'exact S':>7} {'exact':>7} {'runs':>4} {'s':>6}")
    for lead, p in itertools.product(args.lead, args.penalty):
        row = run_instance(lead, p, args)
        rows.append(row)
        print(f"{lead:>2} {p:>4g} {row['level']:>3} {row['eval_cost']:>8.4f} ± {row['eval_se']:.4f} "
              f"{row.get('exact_level', '-'):>7} {row.get('exact_cost', float('nan')):>7.4f} "
              f"{row['tuning_runs']:>4} {row['seconds']:>6}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
