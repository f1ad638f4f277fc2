"""Soak, the CI version (issue 25): two minutes of decoupled training; after the warm-up
no process's resident memory or open descriptors, nor the run directory, grow by more
than 5% (scripts/soak.py; `--minutes 60` is the full soak, run by hand)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.integration]


@pytest.mark.skipif(not shutil.which("redis-server"), reason="needs redis-server on PATH")
def test_two_minute_soak_keeps_memory_descriptors_and_disk_flat(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "soak.py"), "--minutes", "2", "--interval", "2",
                           "--dir", str(tmp_path), "--skurl", str(Path(sys.executable).with_name("skurl"))],
                          capture_output=True, text=True, timeout=600)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == 0 and out["ok"], out
    names = set(out["processes"])
    assert {"learner", "redis", "sim-0", "sim-1", "c0", "c1", "run_dir"} <= names, names
    assert out["iterations"] >= 5 and out["stop_exit"] == 143, out  # SIGTERM: a clean stop
    leftovers = subprocess.run(["pgrep", "-f", str(tmp_path / "run")], capture_output=True, text=True)
    assert leftovers.stdout.strip() == "", "processes of the run outlived its SIGTERM"
