"""The README's job (a bare `skurl train`) under PPO schedules side by side: held-out profit
against learn time, over train and catalog seeds (issue 43: half the arithmetic where the
held-out results say it is free).

Each variant is a list of --set keys on top of the embedded defaults; every (seed, variant)
pair runs one after the other, the variants alternating, each a `skurl train` subprocess.
Per run it prints the shipped policy's held-out profit per SKU-day (keep-best's choice,
eval.json), the mean of the in-training evaluations from iteration 40 on (less sensitive to
which evaluation keep-best ships), the warm start's profit, learn seconds and wall seconds.

    .venv/bin/python benchmarks/embedded_schedule.py --variant k10:ppo.epochs=10,ppo.minibatch=1024 --variant shipped: \\
        --seeds train.seed=0 train.seed=1 catalog.seed=1 --out runs/schedule

More: docs/performance.md ("Half the arithmetic", under the README job's figures)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from statistics import mean

from skurl_runs import SKURL, set_args

from skurl.telemetry.logger import read_metrics

LATE_FROM = 40  # in-training evaluations from this iteration on enter the late mean


def run_one(run_dir: Path, sets: list[str]) -> dict:
    """Train once (embedded defaults plus `sets`) and read the figures back."""
    start = time.perf_counter()
    with open(f"{run_dir}.log", "w") as log:
        subprocess.run([*SKURL, "train", "--run-dir", str(run_dir), *set_args(sets)], check=True,
                       stdout=log, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - start
    rows = read_metrics(run_dir / "metrics.jsonl")
    late = [r["eval_profit"] for r in rows if "eval_profit" in r and r["iteration"] >= LATE_FROM]
    final = json.loads((run_dir / "eval.json").read_text())
    return {"profit": final["policies"][final["trained"]]["avg_profit_per_sku_day"],
            "late_mean": mean(late) if late else float("nan"),
            "warm_start": next((r["warm_start_eval_profit"] for r in rows if "warm_start_eval_profit" in r),
                               float("nan")),
            "learn_s": sum(r.get("time_learn", 0.0) for r in rows), "wall_s": wall}


def parse_variant(text: str) -> tuple[str, list[str]]:
    name, _, keys = text.partition(":")
    if not name:
        raise SystemExit(f"--variant {text!r}: expected NAME:KEY=VALUE,KEY=VALUE (keys may be empty)")
    return name, [k for k in keys.split(",") if k]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variant", action="append", required=True, help="NAME:KEY=VALUE,... (repeatable)")
    ap.add_argument("--seeds", nargs="+", default=["train.seed=0"], help="one --set key per pair of runs")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    variants = [parse_variant(v) for v in args.variant]
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for seed in args.seeds:
        for name, sets in variants:
            tag = f"{name}-{seed.replace('=', '')}"
            res = {"variant": name, "seed": seed, **run_one(args.out / tag, [seed, *sets])}
            results.append(res)
            print(json.dumps(res), flush=True)
    print(f"{'variant':<10} {'profit':>8} {'late mean':>9} {'learn s':>8} {'wall s':>7}")
    for name, _ in variants:
        mine = [r for r in results if r["variant"] == name]
        print(f"{name:<10} {mean(r['profit'] for r in mine):8.4f} {mean(r['late_mean'] for r in mine):9.4f} "
              f"{mean(r['learn_s'] for r in mine):8.1f} {mean(r['wall_s'] for r in mine):7.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
