"""Train and evaluate skurl on Zipkin's lost-sales instances; print a table against the
optimal, the best base-stock and (--capped) the best capped base-stock average costs.

Each instance is exactly what a user runs (the shipped config, instance parameters by
--set, then the evaluation of the run's last checkpoint on held-out seeds):

    skurl train --config configs/lost_sales.yaml --set catalog.lead_time=L \\
        --set catalog.lost_sale_cost=p --no-baseline --run-dir OUT/LxPy
    skurl eval --run OUT/LxPy --json

--dist geometric runs Zipkin's geometric-demand instances (catalog.demand.dist=geometric).

More: docs/benchmarks.md (benchmarks/lost_sales_grid.py)."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from skurl_runs import ROOT, capped_base_stock, set_args, skurl_json, train_run

LEADS, LONG_LEADS, PENALTIES = (1, 2, 3, 4), (6, 8, 10), (4, 9, 19, 39)
# (L, p) -> (optimal average cost, best base-stock average cost), exact (lost_sales_optimal.py).
REFERENCE = {
    (1, 4): (4.0407, 4.1647), (1, 9): (5.4382, 5.5539), (1, 19): (6.6757, 6.7323), (1, 39): (7.8359, 7.8692),
    (2, 4): (4.3953, 4.6432), (2, 9): (6.0936, 6.3219), (2, 19): (7.6644, 7.8481), (2, 39): (9.1064, 9.2001),
    (3, 4): (4.5987, 4.9750), (3, 9): (6.5314, 6.8640), (3, 19): (8.3625, 8.6045), (3, 39): (10.0385, 10.2176),
    (4, 4): (4.7285, 5.1978), (4, 9): (6.8359, 7.2709), (4, 19): (8.8872, 9.2319), (4, 39): (10.7944, 11.0623),
}
GEOMETRIC_REFERENCE = {  # the same for geometric demand (mean 5): --dist geometric
    (1, 4): (9.8175, 10.0418), (1, 9): (14.5082, 14.7273), (1, 19): (19.2179, 19.4026), (1, 39): (23.8657, 24.0066),
    (2, 4): (10.2402, 10.7050), (2, 9): (15.5029, 15.9882), (2, 19): (20.8906, 21.3081), (2, 39): (26.2138, 26.5535),
    (3, 4): (10.4667, 11.1337), (3, 9): (16.1367, 16.8717), (3, 19): (22.0645, 22.7258), (3, 39): (27.9635, 28.5109),
    (4, 4): (10.6065, 11.4383), (4, 9): (16.5774, 17.5428), (4, 19): (22.9530, 23.8495), (4, 39): (29.3559, 30.1078),
}
REFERENCES = {"poisson": REFERENCE, "geometric": GEOMETRIC_REFERENCE}


def parse_instances(names: list[str]) -> list[tuple[int, int]]:
    if names == ["all"]:
        return [(lead, p) for lead in LEADS for p in PENALTIES]
    if names == ["long"]:
        return [(lead, p) for lead in LONG_LEADS for p in PENALTIES]
    out = []
    for name in names:
        m = re.fullmatch(r"L(\d+)p(\d+)", name)
        if not m or int(m[1]) not in LEADS + LONG_LEADS or int(m[2]) not in PENALTIES:
            raise SystemExit(f"instance {name!r}: expected LxPy with L in {LEADS + LONG_LEADS}, "
                             f"p in {PENALTIES}, or 'all' / 'long'")
        out.append((int(m[1]), int(m[2])))
    return out


def exact_reference(lead: int, p: int, dist: str) -> tuple[float, float]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from lost_sales_optimal import solve

    row = solve(lead, float(p), margin=2, with_base_stock=True, dist=dist)
    return row["optimal_cost"], row["best_base_stock_cost"]


def time_to_within(run_dir: Path, optimal: float, gap: float) -> float | None:
    """Seconds from the start of training (after start-up: imports, catalog, env) until an
    evaluation first came within `gap` of optimal, evaluations and any warm start
    included (the records' wall_seconds)."""
    bar = optimal * (1.0 + gap)
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec.get("warm_start_eval_cost", math.inf) <= bar:  # the clone, before iteration 0
            return rec["warm_start_seconds"] + rec["warm_start_eval_seconds"]
        if rec.get("eval_cost", math.inf) <= bar:
            return rec["wall_seconds"]
    return None


def paired_cost(cost: float, lead: int, p: int, args: argparse.Namespace, sets: list[str]) -> float:
    """The trained cost with the tuned base stock as control variate: cost - the base
    stock's simulated cost on the same seeds + its exact cost. Common random numbers cancel
    the seeds' luck, which one episode of geometric demand leaves at ~0.15% of the cost."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from lost_sales_optimal import HOLDING, MEAN, base_stock_cost

    result = skurl_json(args.nice, "eval", "--policy", "base-stock", "--tune", "--config", args.config,
                        "--episodes", str(args.episodes), *set_args(sets))
    level = int(result["params"]["S"])
    return cost - result["avg_cost_per_sku_day"] + base_stock_cost(lead, level, MEAN, HOLDING, float(p), args.dist)


def last_fit_accuracy(run_dir: Path) -> float | None:
    """The last DCL iteration's label fit accuracy (dcl_fit_accuracy): how many of the
    labelled states the fitted net orders as labelled; None for PPO runs."""
    values = [json.loads(line).get("dcl_fit_accuracy") for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    values = [v for v in values if v is not None]
    return values[-1] if values else None


def run_instance(lead: int, p: int, args: argparse.Namespace, threads: int) -> dict:
    run_dir = Path(args.out) / f"L{lead}p{p}"
    sets = [f"catalog.demand.dist={args.dist}", f"catalog.lead_time={lead}", f"catalog.lost_sale_cost={p}",
            f"train.torch_threads={threads}", f"sim.threads={threads}", *args.set]
    wall, cpu = train_run(run_dir, args.config, sets, args.nice)
    result = skurl_json(args.nice, "eval", "--run", str(run_dir), "--episodes", str(args.episodes))
    known = lead in LEADS
    if not known:
        optimal, base_stock = None, None
    elif args.exact:
        optimal, base_stock = exact_reference(lead, p, args.dist)
    else:
        optimal, base_stock = REFERENCES[args.dist][(lead, p)]
    capped = capped_base_stock(args.config, sets, args.nice, args.episodes) if args.capped or not known else None
    cost = result["avg_cost_per_sku_day"]
    paired = paired_cost(cost, lead, p, args, sets) if args.paired and known else None

    def vs(ref: float | None) -> float | None:
        return None if ref is None else 100 * (cost / ref - 1)

    return {"dist": args.dist, "lead_time": lead, "penalty": p, "cost": cost, "cost_se": result["cost_se"],
            "optimal": optimal, "gap_pct": vs(optimal),
            "paired_cost": paired, "paired_gap_pct": None if paired is None else 100 * (paired / optimal - 1),
            "best_base_stock": base_stock, "vs_base_stock_pct": vs(base_stock),
            "best_capped_base_stock": capped, "vs_capped_pct": vs(capped),
            "train_seconds": wall, "train_cpu_seconds": cpu,
            "seconds_to_2pct": time_to_within(run_dir, optimal, 0.02) if known else None,
            "fit_accuracy": last_fit_accuracy(run_dir),
            "run_dir": str(run_dir)}


def cell(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def print_row(r: dict) -> None:
    name = f"L{r['lead_time']}p{r['penalty']}"
    print(f"{name:<7} {r['cost']:>8.4f} {r['cost_se']:>7.4f} {cell(r['optimal'], '.4f'):>8} "
          f"{cell(r['gap_pct'], '+.2f'):>7}% {cell(r['best_base_stock'], '.4f'):>8} "
          f"{cell(r['vs_base_stock_pct'], '+.2f'):>7}% {cell(r['best_capped_base_stock'], '.4f'):>8} "
          f"{cell(r['vs_capped_pct'], '+.2f'):>7}% {r['train_seconds']:>7.0f} {r['train_cpu_seconds']:>7.0f} "
          f"{cell(r['seconds_to_2pct'], '.0f'):>7} {cell(r['fit_accuracy'], '.2f'):>5} "
          f"{cell(r['paired_gap_pct'], '+.2f'):>7}%", flush=True)


def summary(rows: list[dict]) -> None:
    parts = []
    for key, what in (("gap_pct", "gap"), ("vs_capped_pct", "vs capped base-stock")):
        values = [r[key] for r in rows if r[key] is not None]
        if values:
            parts.append(f"{what}: mean {sum(values) / len(values):+.2f}% max {max(values):+.2f}%")
    above = sum(r["vs_capped_pct"] > 0 for r in rows if r["vs_capped_pct"] is not None)
    print("; ".join(parts) + f"; above capped base-stock {above}; "
          f"longest training {max(r['train_seconds'] for r in rows):.0f} s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--instances", nargs="+", default=["L1p4", "L2p9", "L4p39", "L4p4"],
                    help="LxPy names (e.g. L2p9), or 'all' for the 16")
    ap.add_argument("--jobs", type=int, default=1, help="trainings at once (cores are split among them)")
    ap.add_argument("--config", default="configs/lost_sales.yaml")
    ap.add_argument("--dist", choices=("poisson", "geometric"), default="poisson",
                    help="daily demand (mean 5): sets catalog.demand.dist and picks the matching optimum")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="extra config override")
    ap.add_argument("--out", default="runs/lost_sales_grid", help="run directories go here")
    ap.add_argument("--nice", type=int, default=10, help="niceness of the trainings")
    ap.add_argument("--exact", action="store_true", help="recompute the reference costs (minutes)")
    ap.add_argument("--capped", action="store_true",
                    help="also tune the capped base-stock per instance (always for lead times 6-10)")
    ap.add_argument("--episodes", type=int, default=1,
                    help="evaluation episodes (held-out seeds eval.seed, +1, ...): geometric demand's "
                         "standard error at one is ~0.15%% of the cost, above the gaps it should resolve")
    ap.add_argument("--paired", action="store_true",
                    help="also the gap with the tuned base stock as control variate (its exact cost minus "
                         "its simulated one on the same seeds); lead times 1-4")
    ap.add_argument("--json", help="write the rows to this file")
    args = ap.parse_args(argv)
    instances = parse_instances(args.instances)
    threads = max((os.cpu_count() or 1) // args.jobs, 1)
    print(f"{'inst':<7} {'cost':>8} {'se':>7} {'optimal':>8} {'gap':>8} {'base-stk':>8} {'vs S':>8} "
          f"{'capped':>8} {'vs cap':>8} {'train s':>7} {'cpu s':>7} {'to 2% s':>7} {'fit':>5} {'paired':>8}")
    with ThreadPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(run_instance, lead, p, args, threads) for lead, p in instances]
        rows = []
        for f in futures:
            rows.append(f.result())
            print_row(rows[-1])
    summary(rows)
    if args.json:
        Path(args.json).write_text(json.dumps({"dist": args.dist, "rows": rows, "sets": args.set}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
