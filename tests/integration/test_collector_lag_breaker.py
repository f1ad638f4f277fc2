"""The circuit breaker with remote collectors (modes/decoupled/lag_watch.py): decoupled bounded
staleness, weights from the learner's WeightSyncService through a TCP proxy that stops
carrying bytes for a few seconds (a partition between the collectors and the learner's
weights). The collectors keep collecting with what they hold until asked for newer
weights they cannot get; the learner trains what it has and goes on. Their lag passes
collect.max_lag: each stalled collector is named in one line, pauses, and resumes with its
own line once its feed is back (which of them stall depends on timing); the run ends
within the staleness bound."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pytest
from tcp_proxy import PausableProxy
from test_decoupled import tiny
from test_staleness_modes import assert_bounded

from skurl.modes.decoupled.supervisor import InProcessRoles
from skurl.modes.decoupled.wiring import run_with_collectors
from skurl.sync.grpc import HostedGrpcWeights
from skurl.telemetry.logger import read_metrics

pytestmark = pytest.mark.integration
STALL_S = 4.0  # several of the watch's 0.5 s readings, well under sync.timeout_s


class StallAt:
    """Around the run's collectors: when the learner takes the rollout of iteration `at`
    (it then trains it), the proxy stops carrying weights for STALL_S seconds."""

    def __init__(self, inner: Any, proxy: PausableProxy, at: int, timers: list[threading.Timer]) -> None:
        self.inner, self.proxy, self.at, self.timers = inner, proxy, at, timers

    def collect(self, iteration: int, seed: int, version: int, sample: Any) -> Any:
        batch = self.inner.collect(iteration, seed, version, sample)
        if iteration == self.at:
            self.proxy.pause()
            self.timers.append(threading.Timer(STALL_S, self.proxy.resume))
            self.timers[-1].start()
        return batch

    def close(self) -> None:
        self.inner.close()


def test_collectors_whose_weights_stall_trip_the_breaker_and_resume(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    iterations = 6
    cfg = tiny("sync.backend=grpc", "collect.staleness=1", "collect.staleness_mode=bounded", "collect.max_lag=1",
               f"train.iterations={iterations}", "sync.timeout_s=60")
    weights = HostedGrpcWeights(cfg.rpc, cfg.sync.key, port=cfg.deploy.weights_port)
    assert weights.address is not None
    host, port = weights.address.rsplit(":", 1)
    proxy = PausableProxy(host, int(port))
    roles = InProcessRoles(cfg, weights_address=proxy.address)  # collectors follow the proxy
    timers: list[threading.Timer] = []
    try:
        with caplog.at_level(logging.WARNING, logger="skurl"):
            run_with_collectors(roles.cfg, tmp_path / "run", roles.collector_addresses, weights=weights,
                                baseline=False, wrap=lambda inner, trainer: StallAt(inner, proxy, 2, timers))
    finally:
        for t in timers:
            t.cancel()
        proxy.resume()
        roles.close()
        proxy.close()
        weights.close()
    assert len(timers) == 1
    lines = [r.getMessage() for r in caplog.records if "circuit breaker: collector" in r.getMessage()]
    paused = {line.split()[3] for line in lines if "paused" in line}
    resumed = {line.split()[3] for line in lines if "resumed" in line}
    # Which collectors were waiting for weights when the feed stopped depends on timing (under
    # load one may already hold the newest): each one that paused is named once each way.
    assert paused and paused == resumed and paused <= {"c0", "c1"} and len(lines) == 2 * len(paused), lines
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert records[-1]["collector_breaker_trips"] == len(paused)
    assert max(r["collector_lag_max"] for r in records) > 1  # past collect.max_lag
    assert_bounded(tmp_path / "run", 1, iterations)  # and nothing older was trained
