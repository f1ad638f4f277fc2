"""Chaos (issue 25): a decoupled run with seeded SIGKILLs of sim servers, collectors and
redis-server at random moments completes, counts every restart, and ends bit-identical
to an undisturbed run (scripts/chaos.py; the 60-minute version is its --kills/--set);
also with mutual TLS, a token and Redis AUTH on (--secure)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.integration]


@pytest.mark.skipif(not __import__("shutil").which("redis-server"), reason="needs redis-server on PATH")
@pytest.mark.parametrize("secure", [False, True], ids=["plain", "tls-token-redis-auth"])
def test_chaos_run_loses_nothing_and_counts_every_restart(tmp_path: Path, secure: bool) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "chaos.py"), "--dir", str(tmp_path),
                           "--kills", "3", "--seed", "11", "--gap-iterations", "0.5", "1.5", "--reference-mode", "colocated",
                           "--set", "train.iterations=10", "--skurl", str(Path(sys.executable).with_name("skurl")),
                           *(["--secure"] if secure else [])],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["same_result"] and out["secure"] == secure, out
    if secure:  # the chaos run really was secured, and kept no secret in its run dir
        text = (tmp_path / "chaos" / "config.yaml").read_text()
        assert "require_tls: true" in text and "redis://skurl@" in text
        password = (tmp_path / "redis-pw").read_text().strip()
        token = (tmp_path / "token").read_text().strip()
        for path in (tmp_path / "chaos").rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                assert password.encode() not in data and token.encode() not in data, path
    kinds = {k["target"] for k in out["kills"]}
    assert kinds == {"sim", "collector", "redis"}, out  # each kind is drawn once first
    assert out["restarts_counted"] >= out["children_killed"] >= 2, out
    metrics = (tmp_path / "chaos" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["iteration"] for x in metrics] == list(range(10))
