"""`skurl train` killed (SIGKILL) at random moments and restarted until it finishes gives
the result of a run never killed: scripts/kill_resume_soak.py, a few kills per mode."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _soak(tmp_path: Path, *args: str) -> dict:
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "kill_resume_soak.py"), "--dir", str(tmp_path),
                           "--skurl", str(Path(sys.executable).with_name("skurl")), *args],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_colocated_training_survives_random_kills(tmp_path: Path) -> None:
    """Under fixed staleness 2 (collect/staleness.py): the resumed run reads the weight
    versions its restored iteration collects with back from RUN_DIR/stale_weights."""
    out = _soak(tmp_path, "--kills", "2", "--seed", "4", "--set", "train.iterations=12", "--set", "collect.staleness=2")
    assert out["same_result"] and out["kills"] >= 1, out


@pytest.mark.slow
def test_decoupled_training_survives_random_kills(tmp_path: Path, redis_url: str) -> None:
    """Simulator servers, collectors and learner are killed together (one process group);
    weights through a real Redis, shards in the run's local rollout store; fixed staleness 1
    (the behaviour versions published to Redis from the weight history)."""
    out = _soak(tmp_path, "--mode", "decoupled", "--kills", "2", "--seed", "7", "--set", "train.iterations=12",
                "--set", "sync.backend=redis", "--set", f"sync.redis_url={redis_url}", "--set", "collect.staleness=1")
    assert out["same_result"] and out["kills"] >= 1, out
