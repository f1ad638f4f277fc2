"""Fault soak for `skurl train`: kill it (SIGKILL, whole process group) at random moments,
restart it until it finishes, and check that the result is the one of a run never killed.

Each restart is `skurl train --resume RUN` once RUN holds a checkpoint, else the first
command again (an attempt killed before its first checkpoint starts over in its dir).
Compared with the uninterrupted run: every non-RNG tensor of the last checkpoint, the
metrics.jsonl records (iteration, reward_mean, eval_profit, validation_score: one record
per iteration, none doubled or lost), eval.json (policies and history) and the kept best
policy (train.keep_best). Exit status 0 when all match, 1 otherwise:
    .venv/bin/python scripts/kill_resume_soak.py --kills 10
    .venv/bin/python scripts/kill_resume_soak.py --mode decoupled --set sync.backend=redis \\
        --set sync.redis_url=redis://127.0.0.1:6379/0"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from safetensors.numpy import load_file

SMALL = ["catalog.skus=300", "ppo.sample_skus=100", "train.iterations=12", "train.eval_every=3",
         "train.checkpoint_every=2", "sim.days=30", "eval.days=20", "eval.warmup=5", "policy.hidden=[32,32]",
         "train.warm_start_steps=100", "train.warm_start_episodes=1", "train.torch_threads=1", "sim.threads=1"]
RECORD_KEYS = ("reward_mean", "eval_profit", "validation_score")


def _run(cmd: list[str], kill_after: float | None) -> str:
    """'ok', 'killed', or the failure's last stderr line."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=kill_after)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the run and every process it started
        proc.communicate()
        return "killed"
    if proc.returncode == 0:
        return "ok"
    lines = err.decode(errors="replace").strip().splitlines()
    return f"exit {proc.returncode}: {lines[-1] if lines else ''}"


def _final_tensors(run: Path) -> tuple[str, dict[str, Any]]:
    last = sorted((run / "checkpoints").iterdir())[-1]
    tensors = load_file(str(last / "state.safetensors"))
    return last.name, {k: v for k, v in tensors.items() if not k.startswith("rng/")}


def _records(run: Path) -> list[tuple]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [(r["iteration"], *(r.get(k) for k in RECORD_KEYS)) for r in rows]


def _best(run: Path) -> tuple | None:
    root = run / "best" / "checkpoints"
    if not root.is_dir():
        return None
    meta = json.loads(next(root.iterdir()).joinpath("meta.json").read_text())
    return meta["iteration"], meta["validation_score"]


def compare(straight: Path, killed: Path) -> list[str]:
    """What differs between the two run dirs ([] when nothing does)."""
    problems = []
    (na, a), (nb, b) = _final_tensors(straight), _final_tensors(killed)
    if na != nb or set(a) != set(b) or any(not (a[k] == b[k]).all() for k in a):
        problems.append(f"last checkpoint differs ({na} vs {nb})")
    ra, rb = _records(straight), _records(killed)
    if ra != rb:
        problems.append(f"metrics.jsonl records differ: iterations {[r[0] for r in ra]} vs {[r[0] for r in rb]}")
    ea, eb = (json.loads((d / "eval.json").read_text()) for d in (straight, killed))
    if ea != eb:
        problems.append("eval.json differs")
    if _best(straight) != _best(killed):
        problems.append(f"kept best policy differs: {_best(straight)} vs {_best(killed)}")
    if not (killed / "report.md").is_file():
        problems.append("no report.md")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", default="colocated", choices=("colocated", "decoupled", "ray"))
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="extra config override")
    ap.add_argument("--kills", type=int, default=5, help="kills before the run is let finish")
    ap.add_argument("--seed", type=int, default=0, help="seeds the kill moments")
    ap.add_argument("--dir", type=Path, default=None, help="work dir (default: a new temporary one)")
    ap.add_argument("--skurl", default=str(Path(sys.executable).with_name("skurl")))
    args = ap.parse_args(argv)
    root = args.dir or Path(subprocess.check_output(["mktemp", "-d"], text=True).strip())
    shutil.rmtree(root / "straight", ignore_errors=True)
    shutil.rmtree(root / "killed", ignore_errors=True)
    settings = [arg for s in SMALL + args.overrides for arg in ("--set", s)]

    def first(run: Path) -> list[str]:
        return [args.skurl, "train", "--run-dir", str(run), "--mode", args.mode, *settings]

    began = time.perf_counter()
    outcome = _run(first(root / "straight"), None)
    straight_s = time.perf_counter() - began
    print(f"uninterrupted run: {outcome} in {straight_s:.1f}s")
    if outcome != "ok":
        return 1
    rng = random.Random(args.seed)
    killed, kills, cmd = root / "killed", 0, first(root / "killed")
    while True:
        window = None if kills >= args.kills else rng.uniform(0.2 * straight_s, straight_s)
        outcome = _run(cmd, window)
        ckpt = killed / "checkpoints"
        done = sorted(p.name for p in ckpt.iterdir()) if ckpt.is_dir() else []
        print(f"attempt {kills + 1}: {outcome}" + (f" after {window:.1f}s" if outcome == "killed" else "")
              + f"; checkpoints {done[-1] if done else 'none'}")
        if outcome != "killed":
            break
        kills += 1
        cmd = [args.skurl, "train", "--resume", str(killed), "--mode", args.mode] if done else first(killed)
    problems = compare(root / "straight", killed) if outcome == "ok" else [f"last attempt: {outcome}"]
    print(json.dumps({"mode": args.mode, "kills": kills, "same_result": not problems, "problems": problems,
                      "dir": str(root)}))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
