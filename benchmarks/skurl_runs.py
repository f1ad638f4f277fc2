"""The benchmarks' way of running skurl as a user would: `skurl train` in a subprocess
(its own CPU time measured), `skurl eval --json`, and the tuned capped base-stock on the
evaluation seeds a run's `skurl eval` uses (the paired bar for a trained policy)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKURL = [sys.executable, "-m", "skurl.cli"]


def set_args(sets: list[str]) -> list[str]:
    return [a for s in sets for a in ("--set", s)]


def skurl_json(nice: int, *cli: str) -> dict:
    out = subprocess.run(["nice", "-n", str(nice), *SKURL, *cli, "--json"],
                         check=True, cwd=ROOT, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def train_run(run_dir: Path, config: str, sets: list[str], nice: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of `skurl train --no-baseline`; its log is RUN_DIR.log."""
    cmd = ["nice", "-n", str(nice), *SKURL, "train", "--config", config, "--no-baseline",
           "--run-dir", str(run_dir), *set_args(sets)]
    start = time.perf_counter()
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    log_path = run_dir.parent / f"{run_dir.name}.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        # wait4: this child's own CPU time, not mixed with the other jobs' (shared cores
        # make wall time say more about the neighbours than about skurl)
        _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"training {run_dir.name} failed; see {log_path}")
    return time.perf_counter() - start, usage.ru_utime + usage.ru_stime


def capped_base_stock(config: str, sets: list[str], nice: int, episodes: int = 1) -> float:
    """The tuned capped base-stock's cost on the evaluation seeds a run's `skurl eval` uses."""
    result = skurl_json(nice, "eval", "--policy", "capped-base-stock", "--tune", "--config", config,
                        "--episodes", str(episodes), *set_args(sets))
    return result["avg_cost_per_sku_day"]
