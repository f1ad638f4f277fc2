"""StageTimer: totals, nesting (inclusive vs exclusive), histogram, reset, threads."""

from __future__ import annotations

import threading

import pytest
from prometheus_client import CollectorRegistry

from skurl.telemetry import stages
from skurl.telemetry.metrics import SkurlMetrics
from skurl.telemetry.stages import StageTimer


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(stages.time, "perf_counter", fake)
    return fake


def test_accumulates_and_observes_histogram(clock: FakeClock) -> None:
    metrics = SkurlMetrics(CollectorRegistry())
    timer = StageTimer(metrics=metrics)
    for seconds in (2.0, 3.0):
        with timer.stage("simulate"):
            clock.now += seconds
    assert timer.totals() == {"simulate": 5.0}
    assert timer.counts() == {"simulate": 2}
    assert timer.as_scalars() == {"time_simulate": 5.0}
    reg = metrics.registry
    assert reg.get_sample_value("skurl_stage_seconds_count", {"stage": "simulate"}) == 2
    assert reg.get_sample_value("skurl_stage_seconds_sum", {"stage": "simulate"}) == 5.0


def test_nested_inclusive_and_exclusive(clock: FakeClock) -> None:
    timer = StageTimer(prometheus=False)
    with timer.stage("iteration"):
        clock.now += 1.0
        with timer.stage("simulate"):
            clock.now += 3.0
        with timer.stage("learn"):
            clock.now += 4.0
        clock.now += 2.0
    assert timer.totals() == {"simulate": 3.0, "learn": 4.0, "iteration": 10.0}
    exclusive = timer.totals(exclusive=True)
    assert exclusive == {"simulate": 3.0, "learn": 4.0, "iteration": 3.0}
    assert sum(exclusive.values()) == 10.0  # exclusive totals add up to the wall time


def test_stage_counts_when_body_raises(clock: FakeClock) -> None:
    timer = StageTimer(prometheus=False)
    with pytest.raises(RuntimeError), timer.stage("learn"):
        clock.now += 1.5
        raise RuntimeError("boom")
    assert timer.totals() == {"learn": 1.5}
    with timer.stage("next"):  # the nesting stack was unwound
        clock.now += 1.0
    assert timer.totals(exclusive=True)["next"] == 1.0


def test_reset_clears_totals(clock: FakeClock) -> None:
    timer = StageTimer(prometheus=False)
    with timer.stage("sync"):
        clock.now += 1.0
    timer.reset()
    assert timer.totals() == {} and timer.counts() == {}
    with timer.stage("sync"):
        clock.now += 0.5
    assert timer.totals() == {"sync": 0.5}


def test_empty_name_rejected() -> None:
    with pytest.raises(ValueError), StageTimer(prometheus=False).stage(""):
        pass


def test_threads_nest_independently() -> None:
    timer = StageTimer(prometheus=False)
    barrier = threading.Barrier(4)

    def work() -> None:
        with timer.stage("outer"):
            barrier.wait()  # all threads inside "outer" at once
            for _ in range(50):
                with timer.stage("inner"):
                    pass

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert timer.counts() == {"outer": 4, "inner": 200}
    inclusive, exclusive = timer.totals(), timer.totals(exclusive=True)
    assert exclusive["inner"] == pytest.approx(inclusive["inner"])
    assert 0.0 <= exclusive["outer"] <= inclusive["outer"]
