"""Train and evaluate fixed near-on-policy variants (collect.staleness, issue 24) on Zipkin's
lost-sales instances; print each variant's cost and gap to the optimum next to strict's.

Each (instance, variant) is exactly what lost_sales_grid.py runs (the shipped config, the
instance by --set, the variant's train.* keys by --set, one training at a time, then
`skurl eval --run` on held-out seeds), into OUT/VARIANT/LxPy:
    .venv/bin/python benchmarks/staleness_quality.py --instances L2p9 --out runs/staleness
    .venv/bin/python benchmarks/staleness_quality.py --instances L4p39 --variants strict s1 s2 \\
        --iterations 100 --json staleness.json

Issue 24's acceptance: s1 and s2 within 0.1 points of strict's gap; s8 with and without the
correction shows what V-trace does at a large lag."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lost_sales_grid import parse_instances, run_instance

# variant name -> train.* overrides (fixed staleness mode, the default; collect_ahead default on)
VARIANTS = {
    "strict": ["collect.staleness=0"],
    "s1": ["collect.staleness=1"],
    "s2": ["collect.staleness=2"],
    "s2-none": ["collect.staleness=2", "collect.staleness_correction=none"],
    "s8": ["collect.staleness=8", "collect.staleness_correction=vtrace"],
    "s8-none": ["collect.staleness=8", "collect.staleness_correction=none"],
    "s8-behaviour": ["collect.staleness=8", "collect.staleness_correction=vtrace", "collect.staleness_clip=behaviour"],
}


def grid_args(args: argparse.Namespace, variant: str) -> argparse.Namespace:
    """The namespace lost_sales_grid.run_instance reads, for one variant."""
    sets = ["train.algo=ppo", *VARIANTS[variant], *args.set]  # staleness is PPO's (the config trains DCL)
    if args.iterations:
        sets.append(f"train.iterations={args.iterations}")
    return argparse.Namespace(out=str(Path(args.out) / variant), config=args.config, set=sets,
                              nice=args.nice, exact=False, capped=False)


def print_row(variant: str, r: dict, strict_gap: float | None) -> None:
    delta = "-" if strict_gap is None else f"{r['gap_pct'] - strict_gap:+.3f}"
    print(f"L{r['lead_time']}p{r['penalty']:<3} {variant:<8} {r['cost']:>8.4f} {r['cost_se']:>7.4f} "
          f"{r['optimal']:>8.4f} {r['gap_pct']:>+8.3f}% {delta:>8} {r['train_seconds']:>7.0f} "
          f"{r['train_cpu_seconds']:>7.0f}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--instances", nargs="+", default=["L2p9"], help="LxPy names (e.g. L2p9), or 'all'")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS),
                    help="which staleness variants, in this order (strict first gives the delta column)")
    ap.add_argument("--iterations", type=int, default=0, help="train.iterations for every run (0 = the config's)")
    ap.add_argument("--config", default="configs/lost_sales.yaml")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="extra config override")
    ap.add_argument("--out", default="runs/staleness_quality", help="run directories go here")
    ap.add_argument("--nice", type=int, default=10, help="niceness of the trainings")
    ap.add_argument("--json", help="write the rows to this file (rewritten after every run)")
    args = ap.parse_args(argv)
    instances = parse_instances(args.instances)
    print(f"{'inst':<6} {'variant':<8} {'cost':>8} {'se':>7} {'optimal':>8} {'gap':>9} {'vs strict':>8} "
          f"{'train s':>7} {'cpu s':>7}", flush=True)
    rows: list[dict] = []
    for lead, p in instances:
        strict_gap = None
        for variant in args.variants:
            # threads=2: the 2 cores; the collect-ahead thread shares them with the learner
            r = {"variant": variant, **run_instance(lead, p, grid_args(args, variant), threads=2)}
            if variant == "strict":
                strict_gap = r["gap_pct"]
            r["gap_vs_strict_pp"] = None if strict_gap is None else r["gap_pct"] - strict_gap
            rows.append(r)
            print_row(variant, r, strict_gap)
            if args.json:
                Path(args.json).write_text(json.dumps({"rows": rows, "iterations": args.iterations,
                                                       "sets": args.set}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
