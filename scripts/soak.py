"""Soak run for `skurl train --mode decoupled`: train for --minutes, sample every process's
resident memory and open file descriptors (learner, each sim server and collector, Redis)
and the run directory's size every --interval seconds, then stop the run with SIGTERM.

After the warm-up (start-up, then the first --warmup share of the training time), the median of the last tenth
of the samples may exceed the median of the first tenth after warm-up by at most
--max-growth (5%) for every process and figure; medians, so that an update's transient
peak is not read as a leak (the run's data on disk: by its peaks, peak_growth). Prints one JSON line (per-process figures); writes every
sample to DIR/samples.csv; exit status 0 when nothing grew, 1 otherwise.

    .venv/bin/python scripts/soak.py --minutes 60
    .venv/bin/python scripts/soak.py --minutes 2 --interval 2     # the CI version"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chaos import Redis

SETTINGS = ["catalog.skus=300", "ppo.sample_skus=100", "train.iterations=1000000", "train.eval_every=10",
            "train.checkpoint_every=5", "train.keep_checkpoints=2", "sim.days=30", "eval.days=20",
            "eval.warmup=5", "policy.hidden=[32,32]", "train.warm_start=none", "train.torch_threads=1",
            "sim.threads=1", "deploy.sim_servers=2", "deploy.collectors=2", "sync.backend=redis",
            "sync.poll_s=0.1"]
FIGURES = ("rss_mb", "fds")


def proc_figures(pid: int) -> dict[str, float] | None:
    """Resident set (MB) and open descriptors of a live process; None once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    rss_kb = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
    return {"rss_mb": rss_kb / 1024.0, "fds": float(fds)}


# Append-only by design (one record per iteration): reported as a rate, not judged.
LOGS = ("metrics.jsonl", "wire_versions.jsonl", "tb", "decoupled")


def dir_mb(root: Path) -> dict[str, float]:
    """MB of the run's data (rollouts, checkpoints, kept best: must stay bounded) and of
    its logs (LOGS)."""
    sizes = {"data_mb": 0.0, "logs_mb": 0.0}
    for dirpath, _, files in os.walk(root):
        top = Path(dirpath).relative_to(root).parts[:1]
        for f in files:
            key = "logs_mb" if (top[0] if top else f) in LOGS else "data_mb"
            with contextlib.suppress(FileNotFoundError):  # an old shard deleted since the listing
                sizes[key] += os.stat(os.path.join(dirpath, f)).st_size / 2**20
    return sizes


def processes(run: Path, learner: int, redis: Redis) -> dict[str, int]:
    """Name -> pid of every process of the run (children by name: a restart keeps it)."""
    out = {"learner": learner}
    if redis.proc is not None:
        out["redis"] = redis.proc.pid
    try:
        cluster = json.loads((run / "decoupled" / "cluster.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return out
    for child in (*cluster["sims"], *cluster["collectors"]):
        if child.get("pid"):
            out[child["name"]] = int(child["pid"])
    return out


def growth(steady: list[float]) -> dict[str, float]:
    """Median of the first and last tenth of the samples after warm-up, and their growth."""
    k = max(1, len(steady) // 10)
    first, last = statistics.median(steady[:k]), statistics.median(steady[-k:])
    return {"first": round(first, 2), "last": round(last, 2),
            "growth": round((last - first) / first, 4) if first else 0.0}


def peak_growth(steady: list[float], slack_mb: float = 1.0) -> dict[str, float]:
    """The run's data on disk: the peak of the second half after warm-up against the first
    half's. Rollout shards wait for the next checkpoint and checkpoints rotate, so the size
    saw-tooths; a leak raises the peaks. `slack_mb` (one more checkpoint and an iteration's
    shards on a small config) is not judged: a run seconds old has not held them all yet."""
    half = max(1, len(steady) // 2)
    first, last = max(steady[:half]), max(steady[half:] or steady[-1:])
    return {"first": round(first, 2), "last": round(last, 2), "slack": slack_mb,
            "growth": round((last - first) / first, 4) if first else 0.0}


def stop(proc: subprocess.Popen[bytes], grace_s: float = 60.0) -> int:
    """SIGTERM (the launcher stops its children), SIGKILL of the group after grace_s."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait()


def summarize(samples: list[dict[str, Any]], steady_from_s: float, max_growth: float) -> dict[str, Any]:
    names = sorted({s["name"] for s in samples})
    report: dict[str, Any] = {}
    problems = []
    for name in names:
        rows = [s for s in samples if s["name"] == name and s["t_s"] >= steady_from_s]
        if not rows:
            problems.append(f"{name}: no sample after the warm-up")
            continue
        if name == "run_dir":  # shards and checkpoints come and go: judge the peaks
            report[name] = {"data_mb": peak_growth([r["data_mb"] for r in rows])}
        else:
            report[name] = {f: growth([r[f] for r in rows]) for f in FIGURES}
        for f, g in report[name].items():
            if g["growth"] > max_growth and g["last"] - g["first"] > g.get("slack", 0.0):
                problems.append(f"{name} {f} grew {g['growth']:.1%} ({g['first']:g} -> {g['last']:g})")
    return {"processes": report, "problems": problems}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=60.0, help="how long to train")
    ap.add_argument("--interval", type=float, default=5.0, help="seconds between samples")
    ap.add_argument("--warmup", type=float, default=0.33,
                    help="share of the training time (from the first iteration on) taken as warm-up")
    ap.add_argument("--max-growth", type=float, default=0.05, help="largest allowed growth after warm-up")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="extra config override")
    ap.add_argument("--dir", type=Path, default=None, help="work dir (default: a new temporary one)")
    ap.add_argument("--skurl", default=str(Path(sys.executable).with_name("skurl")))
    args = ap.parse_args(argv)
    root = args.dir or Path(tempfile.mkdtemp(prefix="skurl-soak-"))
    root.mkdir(parents=True, exist_ok=True)
    run = root / "run"
    redis = Redis(root)
    redis.start()
    settings = [a for s in [*SETTINGS, f"sync.redis_url={redis.url}", *args.overrides] for a in ("--set", s)]
    log = (root / "train.log").open("wb")
    proc = subprocess.Popen([args.skurl, "train", "--run-dir", str(run), "--mode", "decoupled", *settings],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    samples: list[dict[str, Any]] = []
    began = time.monotonic()
    trained_from_s = None  # the first iteration's record: start-up (imports, numba) is over
    try:
        while time.monotonic() - began < args.minutes * 60 and proc.poll() is None:
            t = round(time.monotonic() - began, 1)
            if trained_from_s is None and (run / "metrics.jsonl").exists():
                trained_from_s = t
            for name, pid in processes(run, proc.pid, redis).items():
                figures = proc_figures(pid)
                if figures is not None:
                    samples.append({"t_s": t, "name": name, "pid": pid, **figures})
            samples.append({"t_s": t, "name": "run_dir", **dir_mb(run)})
            time.sleep(args.interval)
        ended_early = proc.poll() is not None
    finally:
        code = stop(proc) if proc.poll() is None else proc.returncode
        redis.kill()
    iterations = len((run / "metrics.jsonl").read_text().splitlines()) if (run / "metrics.jsonl").exists() else 0
    with (root / "samples.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["t_s", "name", "pid", "rss_mb", "fds", "data_mb", "logs_mb"])
        w.writeheader()
        w.writerows(samples)
    end_s = time.monotonic() - began
    first_s = end_s if trained_from_s is None else trained_from_s
    out = summarize(samples, first_s + args.warmup * (end_s - first_s), args.max_growth)
    if ended_early:
        out["problems"].append(f"the run ended early (exit {code}; log {root / 'train.log'})")
    if iterations < 2:
        out["problems"].append(f"only {iterations} iterations trained")
    logs = [s["logs_mb"] for s in samples if s["name"] == "run_dir"]
    log_kb = 1024 * (logs[-1] - logs[0]) / max(iterations, 1) if logs else 0.0
    print(json.dumps({"minutes": args.minutes, "iterations": iterations, "samples": len(samples),
                      "log_kb_per_iteration": round(log_kb, 2),
                      "stop_exit": code, "ok": not out["problems"], **out, "dir": str(root)}))
    return 0 if not out["problems"] else 1


if __name__ == "__main__":
    sys.exit(main())
