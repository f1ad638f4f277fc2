"""Bounded staleness (collect/bounded.py): a collection thread runs ahead with the newest
weights, the learner trains rollouts at most N versions old and refuses older ones, the
breaker pauses the thread while the weights it can get lag past collect.max_lag; and the
colocated loop trains and resumes with it."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from prometheus_client import CollectorRegistry
from test_staleness import tiny

from skurl.collect.bounded import BoundedStaleness
from skurl.collect.breaker import CircuitBreaker
from skurl.collect.collectors import Collected, SampleIndex
from skurl.modes.colocated import mode as colocated_mode
from skurl.sync.history import WeightHistory
from skurl.sync.inproc import InProcWeights
from skurl.telemetry.metrics import SkurlMetrics, use_registry
from skurl.train import run as training

WEIGHTS = {"w": torch.zeros(2)}

train = partial(training.start, colocated_mode)
resume = partial(training.resume, colocated_mode)


@pytest.fixture
def metrics() -> Iterator[SkurlMetrics]:
    with use_registry(CollectorRegistry(), "learner") as m:
        yield m


class Recording:
    """Inner collectors: a rollout labelled with the version it was collected with (minus
    `stale_first` for the first ones), each call recorded (episode, version, learner busy)."""

    def __init__(self, history: WeightHistory, stale_first: int = 0, fail_at: int | None = None) -> None:
        self.history, self.stale_first, self.fail_at = history, stale_first, fail_at
        self.calls: list[tuple[int, int]] = []
        self.closed = False

    def collect(self, iteration: int, seed: int, version: int, sample: SampleIndex) -> Collected:
        held, _ = self.history.wait_for(version)
        assert held == version and sample(10) is None
        if self.fail_at is not None and len(self.calls) == self.fail_at:
            raise RuntimeError("collector died")
        label = version - (self.stale_first if len(self.calls) == 0 else 0)
        self.calls.append((iteration, version))
        return Collected(SimpleNamespace(policy_version=label, rewards=np.zeros((3, 4))), {"transitions": 12.0})

    def close(self) -> None:
        self.closed = True


def bounded(n: int, weights: InProcWeights, inner: Any = None, breaker: CircuitBreaker | None = None,
            learner_version: Any = None) -> tuple[BoundedStaleness, Recording]:
    history = WeightHistory(2, None, keep_back=0)
    inner = inner or Recording(history)
    inner.history = history
    return BoundedStaleness(inner, weights, history, n, breaker or CircuitBreaker(n, poll_s=0.01),
                            learner_version), inner


def learn(collectors: BoundedStaleness, weights: InProcWeights, updates: int, start: int = 0,
          pause_s: float = 0.0) -> list[tuple[int, Collected]]:
    """A fake learner: each update takes a rollout, 'trains' for `pause_s`, publishes."""
    out, version = [], start
    for k in range(updates):
        batch = collectors.collect(k, 7, version, lambda n: None)
        out.append((version, batch))
        time.sleep(pause_s)
        version += 1
        weights.publish(version, WEIGHTS)
    return out


@pytest.mark.parametrize("n", [1, 2, 3])
def test_rollouts_lag_at_most_n_and_the_thread_runs_ahead(metrics: SkurlMetrics, n: int) -> None:
    weights = InProcWeights()
    weights.publish(0, WEIGHTS)
    collectors, inner = bounded(n, weights)
    got = learn(collectors, weights, 8, pause_s=0.05)
    collectors.close()
    lags = [v - b.rollout.policy_version for v, b in got]
    assert all(0 <= lag <= n for lag in lags), lags
    assert max(lags) == n  # a learner slower than collection trains rollouts exactly n behind
    assert [b.scalars["policy_lag_versions"] for _, b in got] == lags
    episodes = [e for e, _ in inner.calls]
    assert episodes == list(range(len(episodes))) and len(episodes) <= 8 + n  # at most n ahead
    assert inner.closed and collectors.refused == 0
    assert metrics.registry.get_sample_value("policy_lag_versions_count") == 8
    assert metrics.registry.get_sample_value("stale_shards_refused_total") == 0


def test_a_rollout_older_than_n_is_refused_counted_and_logged(metrics: SkurlMetrics,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    weights = InProcWeights()
    weights.publish(4, WEIGHTS)
    history = WeightHistory(2, None, keep_back=0)
    collectors, _ = bounded(1, weights, Recording(history, stale_first=3))
    with caplog.at_level(logging.WARNING, logger="skurl.collect.bounded"):
        got = learn(collectors, weights, 2, start=4)
    collectors.close()
    assert got[0][1].rollout.policy_version == 4  # the version-1 rollout is not trained
    assert all(v - b.rollout.policy_version <= 1 for v, b in got)
    assert collectors.refused == 1 and got[-1][1].scalars["stale_rollouts_refused"] == 1.0
    assert metrics.registry.get_sample_value("stale_shards_refused_total") == 1
    line, = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert "policy version 1: 3 versions behind the learner's 4 > collect.staleness 1" in line


def test_the_breaker_pauses_the_thread_while_its_weights_lag_past_max_lag(
        metrics: SkurlMetrics, caplog: pytest.LogCaptureFixture) -> None:
    """The learner is at version 5 but the weights the thread can get are version 1 (a
    stalled sync): it pauses with one line, and resumes once the weights catch up."""
    weights = InProcWeights()
    weights.publish(1, WEIGHTS)
    learner = {"version": 5}
    breaker = CircuitBreaker(2, poll_s=0.01)
    collectors, inner = bounded(2, weights, breaker=breaker, learner_version=lambda: learner["version"])
    with caplog.at_level(logging.WARNING, logger="skurl.collect.breaker"):
        got: list[Collected] = []
        taker = threading.Thread(target=lambda: got.append(collectors.collect(0, 7, 5, lambda n: None)))
        taker.start()
        time.sleep(0.3)
        assert inner.calls == [] and breaker.open  # paused: nothing collected with version 1
        weights.publish(4, WEIGHTS)  # lag 5 - 4 = 1 <= 2: resumes
        taker.join(10)
    collectors.close()
    assert got and got[0].rollout.policy_version == 4 and breaker.trips == 1
    lines = [r.getMessage() for r in caplog.records if r.name == "skurl.collect.breaker"]
    assert len(lines) == 2 and "paused: lag 4 versions > collect.max_lag 2" in lines[0] and "resumed" in lines[1]
    assert got[0].scalars["collector_idle_seconds"] >= 0.2  # the pause counts as collector idle time


def test_a_collection_error_is_raised_in_the_learner(metrics: SkurlMetrics) -> None:
    weights = InProcWeights()
    weights.publish(0, WEIGHTS)
    history = WeightHistory(2, None, keep_back=0)
    collectors, _ = bounded(1, weights, Recording(history, fail_at=1))
    collectors.collect(0, 7, 0, lambda n: None)
    with pytest.raises(RuntimeError, match="collector died"):
        for k in range(1, 4):
            weights.publish(k, WEIGHTS)
            collectors.collect(k, 7, k, lambda n: None)
    collectors.close()


def records(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_colocated_bounded_trains_and_resumes(tmp_path: Path) -> None:
    """The colocated loop with a bounded collection thread: every update's rollout lags at
    most N, an interrupted run resumes from its checkpoint and finishes."""
    cfg = tiny("collect.staleness=2", "collect.staleness_mode=bounded", "train.eval_every=2")
    run = tmp_path / "run"
    train(cfg, run, baseline=False, stop_after=3)
    out = resume(run, baseline=False)
    assert out.iterations == 5
    lags = [r["policy_lag_versions"] for r in records(run)]
    assert len(lags) == 5 and all(0 <= lag <= 2 for lag in lags), lags
    assert all(r["behaviour_version"] == r["policy_version"] - 1 - r["policy_lag_versions"] for r in records(run))
