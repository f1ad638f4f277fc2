"""Iteration wall time and learner idle share of collect.staleness=1 against 0 (issue 24's
throughput acceptance: at most 0.6x, idle at most 10%), in paired, interleaved rounds.

More: docs/benchmarks.md (benchmarks/staleness_throughput.py)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
THREADS = ("train.torch_threads=1", "sim.threads=1")


def bench(args: argparse.Namespace, staleness: int, keep: Path) -> dict:
    """One `skurl bench modes` run at `staleness`; its figures and the idle share."""
    cmd = ["nice", "-n", str(args.nice), sys.executable, "-m", "skurl.cli", "bench", "modes", "--modes", "colocated",
           "--json", "--keep", str(keep), "--skus", str(args.skus), "--days", str(args.days),
           "--iterations", str(args.iterations), *(["--config", args.config] if args.config else [])]
    for kv in [*THREADS, *args.set, f"collect.staleness={staleness}"]:
        cmd += ["--set", kv]
    load = os.getloadavg()[0]
    env = {**os.environ, "NUMBA_NUM_THREADS": "1"}
    out = subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True, text=True).stdout
    r = json.loads(out)["modes"]["colocated"]
    rows = [json.loads(line) for line in (keep / "r0" / "colocated" / "metrics.jsonl").read_text().splitlines()]
    rows = [x for x in rows if "iteration_seconds" in x][1:]
    seconds = sum(x["iteration_seconds"] for x in rows)
    if staleness == 0:
        idle = sum(x.get("time_infer", 0.0) + x.get("time_simulate", 0.0) for x in rows)
    else:
        idle = sum(x["learner_idle_seconds"] for x in rows)
    return {"staleness": staleness, "seconds_per_iteration": r["seconds_per_iteration"], "stages_s": r["stages_s"],
            "learner_idle_share": idle / seconds, "load_1m_before": load, "wall_s": r["wall_s"]}


def show(k: int, r: dict) -> None:
    stages = ", ".join(f"{name} {s:.2f}" for name, s in r["stages_s"].items())
    print(f"round {k} staleness {r['staleness']}: {r['seconds_per_iteration']:.3f} s/iteration ({stages}); "
          f"learner idle {100 * r['learner_idle_share']:.1f}%; load {r['load_1m_before']:.2f}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="paired rounds (order alternates)")
    ap.add_argument("--skus", type=int, default=4000, help="bench modes --skus")
    ap.add_argument("--days", type=int, default=100, help="bench modes --days")
    ap.add_argument("--iterations", type=int, default=8, help="bench modes --iterations (the first is warm-up)")
    ap.add_argument("--config", help="YAML config (bench modes' embedded defaults without it)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="extra config override")
    ap.add_argument("--out", default="runs/staleness_throughput", help="kept run directories go here")
    ap.add_argument("--nice", type=int, default=10, help="niceness of the runs")
    ap.add_argument("--json", help="write the rounds and medians to this file")
    args = ap.parse_args(argv)
    rounds = []
    for k in range(args.rounds):
        pair = {}
        for s in ((0, 1) if k % 2 == 0 else (1, 0)):
            pair[s] = bench(args, s, Path(args.out) / f"round{k}" / f"staleness{s}")
            show(k, pair[s])
        rounds.append({"ratio": pair[1]["seconds_per_iteration"] / pair[0]["seconds_per_iteration"],
                       "runs": [pair[0], pair[1]]})
        print(f"round {k}: ratio {rounds[-1]['ratio']:.3f}", flush=True)
    summary = {"ratio_median": statistics.median(r["ratio"] for r in rounds),
               **{f"idle_share_median_s{s}": statistics.median(r["runs"][s]["learner_idle_share"] for r in rounds)
                  for s in (0, 1)},
               **{f"seconds_median_s{s}": statistics.median(r["runs"][s]["seconds_per_iteration"] for r in rounds)
                  for s in (0, 1)}}
    print(f"median ratio {summary['ratio_median']:.3f} (goal <= 0.6); learner idle median: staleness 0 "
          f"{100 * summary['idle_share_median_s0']:.1f}%, staleness 1 {100 * summary['idle_share_median_s1']:.1f}% "
          f"(goal <= 10%)")
    if args.json:
        Path(args.json).write_text(json.dumps({"rounds": rounds, "summary": summary, "sets": args.set}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
