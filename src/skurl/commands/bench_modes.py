"""`skurl bench modes`: training throughput of each `--mode` on the same config and seed.

    skurl bench modes --skus 100000 --days 10 --iterations 5 [--modes colocated,decoupled]
                      [--config FILE] [--set k=v ...] [--json]

More: docs/internals.md (commands/bench_modes.py)."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from skurl.commands.common import add_config_flags, print_json
from skurl.errors import UserError

MODES = ("colocated", "decoupled", "ray")
Summary = dict[str, Any]  # one run's figures (_summarize)
DEFAULTS = ("ppo.epochs=1", "ppo.sample_skus=5000", "train.eval_every=0", "eval.skus=1000",
            "eval.days=20", "eval.warmup=5", "train.checkpoint_every=1000")


def register_bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("modes", help="training throughput of each --mode on the same config and seed")
    add_config_flags(p)
    p.add_argument("--skus", type=int, default=100_000, help="SKUs in the catalog")
    p.add_argument("--days", type=int, default=10, help="days per collected episode (sim.days)")
    p.add_argument("--iterations", type=int, default=5, help="iterations per mode (the first is warm-up)")
    p.add_argument("--modes", default="colocated,decoupled", help=f"comma-separated, from {', '.join(MODES)}")
    p.add_argument("--rounds", type=int, default=1,
                   help="run every mode this many times, in alternating order; report medians")
    p.add_argument("--ray-workers", metavar="W,W,...",
                   help="with --modes ray: run ray once per worker count (W simulator workers and W "
                   "collectors each; must include 1) and print a scaling table with a projection to "
                   "8, 64 and 512 workers (commands/bench_scaling.py)")
    p.add_argument("--keep", metavar="DIR", help="keep the run directories under DIR")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run_modes)


def run_modes(args: argparse.Namespace) -> int:
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise UserError(f"bench modes: --modes {args.modes!r}, expected a comma-separated list of {', '.join(MODES)}")
    if args.skus < 1 or args.days < 1 or args.iterations < 2 or args.rounds < 1:
        raise UserError(f"bench modes: --skus {args.skus} --days {args.days} --iterations {args.iterations} "
                        f"--rounds {args.rounds}, expected >= 1, >= 1, >= 2 (the first iteration is "
                        "warm-up) and >= 1")
    settings = [*DEFAULTS, f"catalog.skus={args.skus}", f"sim.days={args.days}",
                f"train.iterations={args.iterations}"]
    if args.ray_workers is not None:
        return run_ray_scaling(args, modes, settings)
    rounds: list[dict[str, Summary]] = []
    with tempfile.TemporaryDirectory(prefix="skurl-bench-modes-") as tmp:
        root = Path(args.keep or tmp)
        for k in range(args.rounds):
            order = modes if k % 2 == 0 else modes[::-1]
            runs = {m: _run_mode(args, m, settings, root / f"r{k}" / m) for m in order}
            rounds.append({m: runs[m] for m in modes})
    results = combine_rounds(rounds, modes[0])
    out = {"bench": "modes", "skus": args.skus, "days": args.days, "iterations": args.iterations,
           "rounds": args.rounds, "settings": settings + list(args.overrides), "modes": results,
           "load_avg_1m": round(os.getloadavg()[0], 2)}
    if args.json:
        print_json(out)
    else:
        for m, r in results.items():
            stages = ", ".join(f"{k} {v:.2f}s" for k, v in r["stages_s"].items())
            barrier = f"; barrier {100 * r['barrier_share']:.3f}% of the iteration" if "barrier_share" in r else ""
            each = f"; per round x{', x'.join(f'{x:.2f}' for x in r['round_ratios'])}" if args.rounds > 1 else ""
            print(f"{m:10s} {r['transitions_per_s']:>12,.0f} transitions/s  x{r['ratio']:.2f}  "
                  f"({r['seconds_per_iteration']:.2f} s/iteration: {stages}{barrier}{each})")
    return 0


def run_ray_scaling(args: argparse.Namespace, modes: list[str], settings: list[str]) -> int:
    """--ray-workers: ray once per worker count per round (alternating order), the median
    round of each count, then bench_scaling's table and projection."""
    from skurl.commands.bench_scaling import parse_workers, print_scaling, ray_settings, scaling

    if modes != ["ray"]:
        raise UserError(f"bench modes: --ray-workers needs --modes ray, got --modes {args.modes!r}")
    try:
        counts = parse_workers(args.ray_workers)
        if 1 not in counts:
            raise ValueError(f"--ray-workers {args.ray_workers!r} must include 1 (the reference)")
    except ValueError as exc:
        raise UserError(f"bench modes: {exc}") from None
    rounds: list[dict[str, Summary]] = []
    with tempfile.TemporaryDirectory(prefix="skurl-bench-modes-") as tmp:
        root = Path(args.keep or tmp)
        for k in range(args.rounds):
            order = counts if k % 2 == 0 else counts[::-1]
            runs = {w: _run_mode(args, "ray", [*settings, *ray_settings(w)], root / f"r{k}" / f"ray{w}")
                    for w in order}
            rounds.append({f"ray{w}": runs[w] for w in counts})
    medians = combine_rounds(rounds, "ray1")
    out = {"bench": "modes", "mode": "ray", "skus": args.skus, "days": args.days, "iterations": args.iterations,
           "rounds": args.rounds, "settings": settings + list(args.overrides),
           "workers": {w: medians[f"ray{w}"] for w in counts},
           "scaling": scaling({w: medians[f"ray{w}"] for w in counts}), "cpu_count": os.cpu_count(),
           "load_avg_1m": round(os.getloadavg()[0], 2)}
    if args.json:
        print_json(out)
    else:
        print_scaling(out["scaling"])
    return 0


def combine_rounds(rounds: list[dict[str, Summary]], reference: str) -> dict[str, Summary]:
    """Per mode: its median round's figures (by transitions/s), `round_ratios` (its
    transitions/s over the reference's in the same round) and `ratio`, their median."""
    out = {}
    for mode in rounds[0]:
        ratios = [r[mode]["transitions_per_s"] / r[reference]["transitions_per_s"] for r in rounds]
        ranked = sorted((r[mode] for r in rounds), key=lambda x: x["transitions_per_s"])
        out[mode] = dict(ranked[(len(ranked) - 1) // 2], round_ratios=[round(x, 3) for x in ratios],
                         ratio=round(statistics.median(ratios), 3))
    return out


def _run_mode(args: argparse.Namespace, mode: str, settings: list[str], run_dir: Path) -> dict[str, Any]:
    extra = ["sync.backend=grpc"] if mode == "decoupled" and not _sets(args, "sync.backend") else []  # ray: its slot
    cmd = [sys.executable, "-m", "skurl.cli", "train", "--mode", mode, "--run-dir", str(run_dir),
           "--no-baseline", *(["--config", args.config] if args.config else [])]
    for kv in settings + extra + list(args.overrides):
        cmd += ["--set", kv]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise UserError(f"bench modes: `skurl train --mode {mode}` failed (exit {proc.returncode}): {last}")
    return _summarize(run_dir, wall)


def _sets(args: argparse.Namespace, key: str) -> bool:
    return any(kv.split("=", 1)[0].strip() == key for kv in args.overrides)


def _summarize(run_dir: Path, wall: float) -> dict[str, Any]:
    from skurl.telemetry.logger import read_metrics

    rows = [r for r in read_metrics(run_dir / "metrics.jsonl") if "iteration_seconds" in r][1:]
    if not rows:
        raise UserError(f"bench modes: {run_dir}/metrics.jsonl has no iteration after the warm-up")
    seconds = sum(float(r["iteration_seconds"]) for r in rows)
    stages = sorted({k for r in rows for k in r if k.startswith("time_")})
    collector = sorted({k for r in rows for k in r if k.startswith("collector_") and k.endswith("_s")})
    return {
        "transitions_per_s": round(sum(float(r["transitions"]) for r in rows) / seconds, 1),
        "seconds_per_iteration": round(seconds / len(rows), 4),
        "iterations_timed": len(rows),
        "stages_s": {k.removeprefix("time_"): round(_mean(rows, k), 4) for k in stages},
        "collector_s": {k: round(_mean(rows, k), 4) for k in collector},
        # The sync barrier (decoupled): collectors' wait for the version, as a share of the
        # iteration, and publish -> held lag of the weights.
        **{k: round(_mean(rows, k), 6) for k in ("barrier_share", "weights_lag_s") if any(k in r for r in rows)},
        "wall_s": round(wall, 2),
    }


def _mean(rows: list[dict[str, Any]], key: str) -> float:
    values = [float(r[key]) for r in rows if isinstance(r.get(key), (int, float))]
    return sum(values) / max(len(values), 1)
