"""modes/decoupled/lag_watch.py alone: collectors that answer at once are never read; one that waits
with old weights while the learner is ahead trips its own breaker and resumes when it
answers; the lag is learner + queued ahead - held, through the wire map."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future

import pytest

from skurl.modes.decoupled.lag_watch import CollectorLagWatch, held_wire_of


def done_future() -> Future:
    f: Future = Future()
    f.set_result({})
    return f


def test_lag_is_learner_plus_queued_minus_held_through_the_wire_map() -> None:
    wire_to_learner = {10: 3, 11: 4}
    watch = CollectorLagWatch(2, lambda: 6, lambda: 1, wire_to_learner.get)
    assert watch.lag(10) == 6 + 1 - 3
    assert watch.lag(11) == 3
    assert watch.lag(99) is None and watch.lag(None) is None  # not this run's wire version; no answer
    assert CollectorLagWatch(2, lambda: None, lambda: 0, wire_to_learner.get).lag(10) is None


def test_collectors_that_answer_at_once_are_never_read() -> None:
    reads: list[str] = []
    watch = CollectorLagWatch(1, lambda: 9, lambda: 0, {0: 0}.get, poll_s=0.01)
    watch.wait({"c0": done_future(), "c1": done_future()}, lambda cid: reads.append(cid) or 0)
    assert reads == [] and watch.take_figures() == {"collector_breaker_trips": 0.0, "collector_lag_max": 0.0}


def test_a_waiting_collector_with_old_weights_trips_and_resumes(caplog: pytest.LogCaptureFixture) -> None:
    held = {"c0": 5, "c1": 3}  # wire versions; the learner is at 7 with one update queued
    slow: Future = Future()
    reads: list[str] = []

    def held_wire(cid: str) -> int:
        reads.append(cid)
        if len(reads) == 3:  # its feed is back: it receives the newest weights and collects
            held[cid] = 7
            threading.Timer(0.02, slow.set_result, ({},)).start()
        return held[cid]

    watch = CollectorLagWatch(1, lambda: 7, lambda: 1, {v: v for v in range(10)}.get, poll_s=0.01)
    with caplog.at_level(logging.WARNING):
        watch.wait({"c0": done_future(), "c1": slow}, held_wire)
    assert set(reads) == {"c1"}  # only the one still waiting
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "circuit breaker: collector c1 paused: lag 5 versions > collect.max_lag 1"
    assert lines[-1].startswith("circuit breaker: collector c1 resumed after") and len(lines) == 2
    assert watch.take_figures() == {"collector_breaker_trips": 1.0, "collector_lag_max": 5.0}
    assert watch.take_figures()["collector_lag_max"] == 0.0  # since the last call


def test_a_collector_that_does_not_answer_stats_is_an_unknown_lag() -> None:
    class Down:
        def stats(self, timeout: float | None = None) -> dict:
            raise ConnectionError("gone")

    class Up:
        def stats(self, timeout: float | None = None) -> dict:
            return {"policy_version": 4, "pending_version": 6.0}

    held = held_wire_of({"down": Down(), "up": Up()}, timeout_s=0.1)
    assert held("down") is None and held("up") == 6  # the newest received, not yet loaded
