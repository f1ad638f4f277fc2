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
from prometheus_client import CollectorRegistry
from test_decoupled import Delegating, assert_same_training, tiny

from skurl.modes import colocated
from skurl.modes.decoupled import wiring as decoupled
from skurl.modes.decoupled.collector_client import CollectorClient
from skurl.telemetry.logger import read_metrics
from skurl.telemetry.metrics import use_registry
from skurl.train import run as training


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("colocated") / "run"
    training.start(colocated.mode, tiny(), run_dir, baseline=False)
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
    training.start(decoupled.launched, tiny("sync.backend=grpc"), run_dir, baseline=False, wrap=Killing)
    assert Killing.killed == ["c1", "sim-0"]
    logs = read_metrics(run_dir / "metrics.jsonl")
    assert [r["sim_replays"] for r in logs] == [0, 0, 1]  # c0 drives sim-0: one rebuild
    for name in ("c1", "sim-0"):  # each came back once, announced on its own log
        lines = (run_dir / "decoupled" / f"{name}.log").read_text().splitlines()
        ready = [x for x in lines if x.startswith(("serving shard", "skurl-ready"))]
        assert len(ready) == 2 and ready[0] == ready[1], lines  # same address after the restart
    assert_same_training(reference, run_dir)


class KillingC1(Delegating):
    """Kills collector c1 before iteration 1's collection; before iteration 2's waits until
    the supervisor's restart of it answers again."""

    def collect(self, it: int, *args: Any) -> Any:
        if it in (1, 2):
            cluster = json.loads((self.run.run_dir / "decoupled" / "cluster.json").read_text())
            (child,) = [c for c in cluster["collectors"] if c["name"] == "c1"]
            if it == 1:
                kill(child["pid"])
            else:
                CollectorClient(child["address"], connect_timeout_s=120).close()  # waits for it to serve
        return self.inner.collect(it, *args)


def test_a_lost_share_within_max_lost_share_is_trained_without_and_counted(tmp_path: Path) -> None:
    """The collector-loss rule of every mode (collect/lost_share.py), here decoupled: c1's
    SKUs (half of them) are within deploy.max_lost_share=0.6, so iteration 1 trains on c0's
    alone; the supervisor restarts c1, which collects iteration 2 whole again."""
    with use_registry(CollectorRegistry()) as metrics:
        training.start(decoupled.launched, tiny("sync.backend=grpc", "deploy.max_lost_share=0.6"), tmp_path / "run",
                        baseline=False, wrap=KillingC1)
    logs = read_metrics(tmp_path / "run" / "metrics.jsonl")
    skus, days = tiny().catalog.skus, tiny().sim.days
    lost = logs[1]
    assert lost["lost_collectors"] == 1 and lost["lost_recollected"] == 0
    assert 0 < lost["lost_skus"] < skus and lost["lost_share"] == lost["lost_skus"] / skus
    assert lost["transitions"] == days * (skus - lost["lost_skus"])  # only c0's columns
    for r in (logs[0], logs[2]):
        assert r["lost_collectors"] == 0 and r["transitions"] == days * skus
    assert metrics.registry.get_sample_value("collector_shares_lost_total") == 1
    assert metrics.registry.get_sample_value("collector_lost_skus_total") == lost["lost_skus"]


def test_a_hung_sim_server_is_killed_and_restarted_by_its_health_checks(tmp_path: Path) -> None:
    """SIGSTOP leaves the process alive but deaf: the supervisor's grpc.health.v1 probes
    miss deploy.health_failures times, it kills the process and starts it on its port."""
    from skurl.modes.decoupled.supervisor import LocalCluster
    from skurl.rpc.health import probe
    from skurl.sync.grpc import HostedGrpcWeights

    cfg = tiny("sync.backend=grpc", "deploy.collectors=1", "deploy.health_interval_s=0.5",
               "deploy.health_timeout_s=1", "deploy.health_failures=2")
    weights = HostedGrpcWeights(cfg.rpc, cfg.sync.key, port=cfg.deploy.weights_port)
    cluster = LocalCluster(cfg, tmp_path / "run", weights_address=weights.address)
    try:
        cluster.start()
        sim = cluster.sims[0]
        assert sim.proc is not None and probe(sim.info["address"], 10)
        stopped = sim.proc
        os.kill(stopped.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 120
        while sim.restarts == 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert sim.restarts == 1 and stopped.poll() is not None  # killed, then started anew
        while not probe(sim.info["address"], 2) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert probe(sim.info["address"], 10)  # the new process serves on the same address
    finally:
        cluster.stop()
        weights.close()
