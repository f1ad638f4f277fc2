"""Processes of a running `--mode decoupled` job die (SIGKILL): the supervisor restarts
them on their ports, the learner retries its Collect on a lost collector, the collector
rebuilds a lost sim server's shard by replaying the episode, and training goes on exactly
as `--mode colocated` trains."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any, ClassVar

import pytest
from test_decoupled import Delegating, assert_same_training, tiny

from skurl.deploy import colocated, decoupled
from skurl.telemetry.logger import read_metrics


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("colocated") / "run"
    colocated.train(tiny(), run_dir, baseline=False)
    return run_dir


def kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # reaped by the launcher's supervisor
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


class Killing(Delegating):
    """Before iteration 1's collection kills collector c1, before iteration 2's sim-0."""

    killed: ClassVar[list[str]] = []

    def collect(self, it: int, *args: Any) -> Any:
        victim = {1: ("collectors", "c1"), 2: ("sims", "sim-0")}.get(it)
        if victim and victim[1] not in Killing.killed:
            cluster = json.loads((self.run.run_dir / "decoupled" / "cluster.json").read_text())
            (child,) = [c for c in cluster[victim[0]] if c["name"] == victim[1]]
            kill(child["pid"])
            Killing.killed.append(victim[1])
        return self.inner.collect(it, *args)


def test_killed_collector_and_sim_server_are_restarted_and_training_is_unchanged(
        tmp_path: Path, reference: Path) -> None:
    run_dir = tmp_path / "decoupled"
    decoupled.train(tiny("sync.backend=grpc"), run_dir, baseline=False, wrap=Killing)
    assert Killing.killed == ["c1", "sim-0"]
    logs = read_metrics(run_dir / "metrics.jsonl")
    assert [r["sim_replays"] for r in logs] == [0, 0, 1]  # c0 drives sim-0: one rebuild
    for name in ("c1", "sim-0"):  # each came back once, announced on its own log
        lines = (run_dir / "decoupled" / f"{name}.log").read_text().splitlines()
        ready = [x for x in lines if x.startswith(("serving shard", "skurl-ready"))]
        assert len(ready) == 2 and ready[0] == ready[1], lines  # same address after the restart
    assert_same_training(reference, run_dir)
