"""Flood soak, the CI version (issue 42): the hostile-client suite's malformed calls, and
floods of sessions and streams, sent for 40 seconds from this process to a sim server, a
weight server and a collector running as their own processes; every server keeps
answering, a valid Collect keeps its rollout, and no server's memory grows by more than
5% after the warm-up (its first 40% here: start-up allocations; scripts/flood_soak.py; `--minutes 30` is the full soak, run by hand)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.integration]


def test_a_flood_of_malformed_calls_leaves_every_server_serving_and_flat(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "flood_soak.py"), "--minutes", "0.67",
                           "--interval", "2", "--warmup", "0.4", "--dir", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["problems"] == [] and out["unexpected_codes"] == 0, out
    assert set(out["servers"]) == {"sim", "weights", "collector"}
    assert all(s["samples"] >= 5 for s in out["servers"].values()), out
    assert out["calls"] > 1000 and out["slowest_call_s"] < 15, out
