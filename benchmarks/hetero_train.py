"""One shared network on the heterogeneous catalog of hetero_catalog.py: per-type cost of a
`skurl train` run against each type's best capped base-stock and, where known, its optimum.

Trains with the given config (configs/lost_sales.yaml, or none: the embedded defaults) on
the catalog file (catalog.kind=file), then scores the run's policy and the per-type tuned
capped base-stock on the same held-out seeds (common random numbers: both face the very
same demand), and prints one row per type and a summary: overall cost against the
baseline, mean and worst gap to the optima, and how many types end above their best
capped base-stock. --run-dir of an existing run skips the training.

More: docs/benchmarks.md (benchmarks/hetero_train.py)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from skurl.catalog.io import read_catalog
from skurl.collect.evaluate import evaluate
from skurl.config import load_config
from skurl.learn.run_policy import policy_of_run
from skurl.policy.baselines import make_policy
from skurl.policy.learned import run_config_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hetero_catalog import sku_types

ROOT = Path(__file__).resolve().parents[1]


def train(args: argparse.Namespace) -> float:
    sets = ["catalog.kind=file", f"catalog.path={Path(args.catalog).resolve()}",
            f"train.iterations={args.iterations}", *args.set]
    cmd = ["nice", "-n", "10", sys.executable, "-m", "skurl.cli", "train", "--no-baseline",
           "--run-dir", str(args.run_dir), *(["--config", args.config] if args.config else []),
           *[a for s in sets for a in ("--set", s)]]
    start = time.perf_counter()
    Path(args.run_dir).parent.mkdir(parents=True, exist_ok=True)
    with open(f"{args.run_dir}.log", "w") as log:
        rc = subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        raise SystemExit(f"training failed (exit {rc}); see {args.run_dir}.log")
    return time.perf_counter() - start


def per_type(values: np.ndarray, category: np.ndarray, k: int) -> np.ndarray:
    return np.bincount(category, weights=values, minlength=k) / np.bincount(category, minlength=k)


def per_type_se(values: np.ndarray, category: np.ndarray, k: int) -> np.ndarray:
    """Standard error of each type's mean cost over its (independent) SKUs."""
    count = np.bincount(category, minlength=k)
    mean = per_type(values, category, k)
    var = np.bincount(category, weights=(values - mean[category]) ** 2, minlength=k) / np.maximum(count - 1, 1)
    return np.sqrt(var / count)


def score(args: argparse.Namespace) -> dict:
    catalog = read_catalog(args.catalog)
    refs = json.loads(Path(args.catalog).with_suffix(".refs.json").read_text())
    names = refs.get("types") or [t.name for t in sku_types()]  # older refs files: the 28 types
    cfg = load_config(run_config_file(Path(args.run_dir), "run"))
    kw = {"days": args.days, "warmup": args.warmup, "seed": args.seed, "episodes": args.episodes}
    learned = evaluate(catalog, cfg.sim, policy_of_run(args.run_dir, catalog=catalog), **kw)
    cat = catalog.category.astype(np.int64)
    bs = refs["base_stock"]
    params = {key: np.array([bs[names[c]][key] for c in cat]) for key in ("S", "r")}
    base = evaluate(catalog, cfg.sim, make_policy("capped-base-stock", catalog, cfg.sim, params), **kw)
    ours, theirs = per_type(learned.per_sku_cost, cat, len(names)), per_type(base.per_sku_cost, cat, len(names))
    optimal = refs.get("optimal", {})
    se = per_type_se(learned.per_sku_cost, cat, len(names))
    rows = [{"type": name, "cost": float(ours[k]), "se": float(se[k]), "base_stock": float(theirs[k]),
             "vs_base_stock_pct": float(100 * (ours[k] / theirs[k] - 1)),
             "optimal": optimal.get(name),
             "gap_pct": None if optimal.get(name) is None else float(100 * (ours[k] / optimal[name] - 1))}
            for k, name in enumerate(names)]
    gaps = [r["gap_pct"] for r in rows if r["gap_pct"] is not None]
    summary = {"cost": learned.avg_cost_per_sku_day, "base_stock": base.avg_cost_per_sku_day,
               "vs_base_stock_pct": 100 * (learned.avg_cost_per_sku_day / base.avg_cost_per_sku_day - 1),
               "types_above_base_stock": sum(r["vs_base_stock_pct"] > 0 for r in rows),
               "mean_vs_base_stock_pct": float(np.mean([r["vs_base_stock_pct"] for r in rows])),
               "worst_vs_base_stock_pct": max(r["vs_base_stock_pct"] for r in rows),
               "mean_gap_pct": float(np.mean(gaps)) if gaps else None, "worst_gap_pct": max(gaps) if gaps else None}
    return {"rows": rows, "summary": summary}


def print_result(result: dict) -> None:
    print(f"{'type':<16} {'cost':>8} {'se':>6} {'best cbs':>8} {'vs cbs%':>8} {'optimal':>8} {'gap%':>7}")
    for r in result["rows"]:
        opt = "-" if r["optimal"] is None else f"{r['optimal']:.4f}"
        gap = "-" if r["gap_pct"] is None else f"{r['gap_pct']:+.2f}"
        print(f"{r['type']:<16} {r['cost']:>8.4f} {r['se']:>6.4f} {r['base_stock']:>8.4f} {r['vs_base_stock_pct']:>+8.2f} {opt:>8} {gap:>7}")
    s = result["summary"]
    print(f"overall {s['cost']:.4f} vs best capped base-stock {s['base_stock']:.4f} ({s['vs_base_stock_pct']:+.2f}%); "
          f"vs base-stock per type mean {s['mean_vs_base_stock_pct']:+.2f}% worst {s['worst_vs_base_stock_pct']:+.2f}%; "
          f"{s['types_above_base_stock']} of {len(result['rows'])} types above it; gap to optimum mean "
          f"{s['mean_gap_pct'] if s['mean_gap_pct'] is None else round(s['mean_gap_pct'], 2)}% worst "
          f"{s['worst_gap_pct'] if s['worst_gap_pct'] is None else round(s['worst_gap_pct'], 2)}%")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--catalog", default="runs/hetero/catalog.parquet")
    ap.add_argument("--config", default=None, help="config file (default: the embedded defaults)")
    ap.add_argument("--iterations", type=int, default=40)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="extra config override")
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--no-train", action="store_true", help="score the existing run in --run-dir")
    ap.add_argument("--days", type=int, default=1000, help="evaluation days per episode")
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--episodes", type=int, default=1)
    ap.add_argument("--seed", type=int, default=10_000, help="first held-out evaluation seed")
    ap.add_argument("--json", help="write the rows and summary to this file")
    args = ap.parse_args(argv)
    seconds = None if args.no_train else train(args)
    result = score(args)
    result["summary"]["train_seconds"] = seconds
    print_result(result)
    if seconds is not None:
        print(f"training took {seconds:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
