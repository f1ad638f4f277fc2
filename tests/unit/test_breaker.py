"""The circuit breaker (collect/breaker.py): pauses collectors past collect.max_lag, one line
per trip and per resume, trips and paused seconds counted; no threads: the clock, the sleep
and the version sources are injected (the sleep is where the fake learner gets work done)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from prometheus_client import CollectorRegistry

from skurl.buffer.rollout import Rollout
from skurl.collect.breaker import (
    BreakerCollectors,
    CircuitBreaker,
    max_lag_of,
    queued_versions,
    version_lag,
)
from skurl.collect.collectors import Collected, SampleIndex
from skurl.collect.staleness import FixedStaleness
from skurl.store.api import ShardManifest
from skurl.store.shard_queue import Ledger, MemoryShardQueue, MemoryStream
from skurl.sync.history import WeightHistory
from skurl.sync.inproc import InProcWeights
from skurl.telemetry.metrics import SkurlMetrics, use_registry

WEIGHTS = {"w": torch.zeros(2)}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def metrics() -> Iterator[SkurlMetrics]:
    with use_registry(CollectorRegistry(), "collector") as m:
        yield m


def counted(m: SkurlMetrics, name: str) -> float:
    return m.registry.get_sample_value(name) or 0.0


def breaker_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "skurl.collect.breaker"]


def test_trips_past_max_lag_not_at_it(metrics: SkurlMetrics) -> None:
    breaker = CircuitBreaker(2, clock=Clock())
    assert [breaker.update(lag) for lag in (0, 2, 2)] == [False, False, False]
    assert breaker.update(3) is True and breaker.trips == 1
    assert breaker.update(None) is True  # unknown lag: stays paused
    assert breaker.update(2) is False
    assert counted(metrics, "collector_breaker_trips_total") == 1


def test_one_line_per_trip_and_per_resume(metrics: SkurlMetrics, caplog: pytest.LogCaptureFixture) -> None:
    breaker = CircuitBreaker(1, clock=Clock())
    with caplog.at_level(logging.WARNING, "skurl.collect.breaker"):
        for lag in (0, 2, 3, 5, 2, 1, 0, 4, 4, 1):
            breaker.update(lag)
    lines = breaker_lines(caplog)
    assert len(lines) == 4 and breaker.trips == 2
    assert lines[0] == "circuit breaker: collectors paused: lag 2 versions > collect.max_lag 1"
    assert lines[1].startswith("circuit breaker: collectors resumed after ") and lines[1].endswith(
        ": lag 1 versions <= collect.max_lag 1")
    assert "paused: lag 4 versions" in lines[2]


def test_wait_pauses_until_the_lag_falls_and_counts_the_idle_seconds(metrics: SkurlMetrics) -> None:
    clock = Clock()
    lags = iter([5, 5, 4, 3, 2, 7])

    def sleep(seconds: float) -> None:
        clock.now += seconds

    breaker = CircuitBreaker(3, clock=clock, sleep=sleep, poll_s=0.5)
    assert breaker.wait(lambda: 0) == 0.0  # not paused: returns at once, no time counted
    paused = breaker.wait(lambda: next(lags))
    assert paused == pytest.approx(1.5) and breaker.open is False  # polls at 0, 0.5, 1.0, closed at 1.5
    assert counted(metrics, "collector_idle_seconds_total") == pytest.approx(1.5)
    assert next(lags) == 2  # the first reading at <= max_lag ended the wait
    assert counted(metrics, "collector_breaker_trips_total") == 1


def test_max_lag_zero_means_the_staleness() -> None:
    assert max_lag_of(SimpleNamespace(max_lag=0, staleness=2)) == 2
    assert max_lag_of(SimpleNamespace(max_lag=5, staleness=2)) == 5
    with pytest.raises(ValueError, match="max_lag -1"):
        CircuitBreaker(-1)


class ShardWriter:
    """A collector's work: a tiny rollout of the version asked, announced on the queue."""

    def __init__(self, queue: MemoryShardQueue) -> None:
        self.queue, self.collected = queue, []

    def collect(self, iteration: int, seed: int, version: int, sample: SampleIndex) -> Collected:
        rollout = Rollout.allocate(2, np.arange(3), 4)
        rollout.rewards[:] = 0.0
        rollout.policy_version = version
        self.queue.put(ShardManifest(iteration, "c0", version, 0, 3, 6, (), "0" * 64, 1, 1, 0.0))
        self.collected.append((iteration, version))
        return Collected(rollout, {})

    def close(self) -> None:
        pass


class SlowLearner:
    """Trains one queued iteration per call (each call: one poll of the paused collectors)."""

    def __init__(self, stream: MemoryStream, weights: InProcWeights) -> None:
        self.queue, self.weights = MemoryShardQueue(stream, "learner"), weights
        self.ledger, self.iteration = Ledger(self.queue), 0
        self.weights.publish(0, WEIGHTS)

    def step(self) -> None:
        self.ledger.add(self.queue.read())
        if self.ledger.ready(self.iteration):
            self.ledger.take(self.iteration)
            self.iteration += 1
            self.ledger.committed(self.iteration)  # checkpointed every iteration here
            self.weights.publish(self.iteration, WEIGHTS)


def test_collectors_ahead_of_a_lagging_learner_trip_and_resume(metrics: SkurlMetrics,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    """Bounded-style collection: newest weights held, shards queued faster than the learner
    trains them; the backlog in versions passes max_lag 2, they pause while it trains."""
    stream, weights, clock = MemoryStream(), InProcWeights(), Clock()
    learner = SlowLearner(stream, weights)
    producer = MemoryShardQueue(stream, "producer")

    def sleep(seconds: float) -> None:
        clock.now += seconds
        learner.step()

    held = weights.latest_version
    lag = version_lag(weights.latest_version, held, queued_versions(producer.backlog, shards_per_version=1))
    breaker = CircuitBreaker(2, clock=clock, sleep=sleep, poll_s=1.0)
    collectors = BreakerCollectors(ShardWriter(producer), breaker, lag_of=lambda version: lag())
    with caplog.at_level(logging.WARNING, "skurl.collect.breaker"):
        scalars = [collectors.collect(k, 0, held() or 0, lambda n: None).scalars for k in range(6)]
    # 3 queued > 2 before the 4th collection; from there each waits for one update (the
    # learner trains only while they pause here): one trip, one line each way, per collection
    assert [s["breaker_trips"] for s in scalars] == [0, 0, 0, 1, 1, 1]
    assert [s["breaker_paused_seconds"] for s in scalars] == [0, 0, 0, 1.0, 1.0, 1.0]
    assert breaker.trips == 3 and len(breaker_lines(caplog)) == 6 and learner.iteration == 3
    assert counted(metrics, "collector_idle_seconds_total") == 3.0
    assert counted(metrics, "collector_breaker_trips_total") == 3
    assert producer.backlog() == 3  # iterations 3..5 queued, none lost


def test_a_collector_stuck_on_old_weights_trips_while_the_learner_publishes(metrics: SkurlMetrics) -> None:
    clock, weights = Clock(), InProcWeights()
    held = {"version": 0}
    weights.publish(0, WEIGHTS)

    def sleep(seconds: float) -> None:  # the subscriber receives the newest weights while paused
        clock.now += seconds
        held["version"] = weights.latest_version() or 0

    breaker = CircuitBreaker(1, clock=clock, sleep=sleep)
    lag = version_lag(weights.latest_version, lambda: held["version"])
    for v in (1, 2):
        weights.publish(v, WEIGHTS)
    assert breaker.wait(lag) == 0.5 and held["version"] == 2 and breaker.trips == 1


def test_inside_fixed_staleness_it_never_trips_at_max_lag_equal_n(metrics: SkurlMetrics) -> None:
    """Fixed staleness collects iteration k with version k - min(k, N): its lag is at most N,
    so the breaker at collect.max_lag = N (its default) stays closed however long the run."""
    n, weights = 2, InProcWeights()
    writer = ShardWriter(MemoryShardQueue(MemoryStream(), "producer"))
    breaker = CircuitBreaker(n, clock=Clock(), sleep=lambda s: pytest.fail("paused"))
    lag = version_lag(weights.latest_version, lambda: None)
    history = WeightHistory(n + 1, None, keep_back=0)
    inner = BreakerCollectors(writer, breaker, lag_of=lambda version: (weights.latest_version() or 0) - version)
    fixed = FixedStaleness(inner, weights, history, n)
    for k in range(6):
        weights.publish(k, WEIGHTS)
        fixed.collect(k, 0, k, lambda m: None)
    assert writer.collected == [(k, k - min(k, n)) for k in range(6)] and breaker.trips == 0
    assert lag() is None  # an unknown held version is no reading
