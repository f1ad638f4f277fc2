"""`skurl train --metrics-port` (colocated): the process serves its own metric families on
/metrics while it trains, and says where."""

from __future__ import annotations

import socket
import threading
import urllib.request
from pathlib import Path

import pytest
from test_train import TINY, sets

from skurl.cli import main


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_colocated_training_serves_its_metrics(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    port, scrapes, done = free_port(), [], threading.Event()

    def scrape() -> None:
        while not done.wait(0.05):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    text = r.read().decode()
            except OSError:
                continue
            if "learner_updates_total" in text:
                scrapes.append(text)

    thread = threading.Thread(target=scrape, daemon=True)
    thread.start()
    try:
        assert main(["train", "--run-dir", str(tmp_path / "run"), "--iterations", "6", "--no-baseline",
                     "--metrics-port", str(port), *sets(TINY)]) == 0
    finally:
        done.set()
        thread.join(timeout=10)
    assert f"metrics on http://127.0.0.1:{port}/metrics" in capsys.readouterr().err
    assert scrapes, "no scrape saw the run's updates"
    text = scrapes[-1]
    assert "skurl_stage_seconds_bucket" in text and "collector_reward_out_of_range_total" in text
    # Defect 12 of issue 42: one process that learns and collects serves both roles' families
    # (the Grafana panels of the learner, the collectors and the business figures).
    for family in ("collector_episodes_total", "collector_steps_per_second",
                   "learner_training_step_duration_seconds_bucket", "business_fill_rate{"):
        assert family in text, family
    assert "sim_step_duration_seconds" not in text  # a sim server's family, not this one's


def test_a_busy_metrics_port_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        code = main(["train", "--run-dir", str(tmp_path / "run"), "--iterations", "1", "--metrics-port",
                     str(port), *sets(TINY)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "metrics port" in err[0], err
    assert not (tmp_path / "run" / "checkpoints").exists()
