"""The circuit breaker of near-on-policy training (collect.max_lag): collectors pause while
the data they would collect now would lag the learner by more than max_lag versions, so no
collector keeps producing shards the learner must refuse or weight down to nothing.

The lag is read, not pushed: `wait(lag)` polls a callable (the learner's published version
against the collector's held one, plus the versions still queued ahead of it) and sleeps
between polls through an injected clock and sleep, so tests need no threads. One line when
it trips, one when it resumes; trips and paused seconds are Prometheus counters.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

from skurl.collect.collectors import Collected, Collectors, SampleIndex
from skurl.config import CollectConfig
from skurl.telemetry.metrics import get_metrics

log = logging.getLogger(__name__)
Lag = Callable[[], "int | None"]  # versions the next collection would lag; None: unknown now


def max_lag_of(collect: CollectConfig) -> int:
    """collect.max_lag, whose 0 means collect.staleness."""
    return int(collect.max_lag or collect.staleness)


class CircuitBreaker:
    """Open (collectors paused) while the lag exceeds `max_lag`; closed again at <= max_lag.
    An unknown lag (None: the learner's version cannot be read) keeps the current state."""

    def __init__(self, max_lag: int, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep, poll_s: float = 0.5, who: str = "collectors") -> None:
        if max_lag < 0:
            raise ValueError(f"max_lag {max_lag}: expected an integer >= 0")
        self.max_lag, self.clock, self.sleep, self.poll_s, self.who = max_lag, clock, sleep, poll_s, who
        self.open = False
        self.trips = 0
        self.paused_s = 0.0  # in total
        self._opened_at = 0.0
        self._counted_to = 0.0  # paused time already added to collector_idle_seconds_total

    def update(self, lag: int | None) -> bool:
        """Take one reading; returns whether collectors must pause now."""
        now = self.clock()
        if self.open:
            self._count_idle(now)
        if lag is None:
            return self.open
        if not self.open and lag > self.max_lag:
            self.open, self._opened_at, self._counted_to = True, now, now
            self.trips += 1
            get_metrics().collector_breaker_trips_total.inc()
            log.warning("circuit breaker: %s paused: lag %d versions > collect.max_lag %d", self.who, lag,
                        self.max_lag)
        elif self.open and lag <= self.max_lag:
            self.open = False
            log.warning("circuit breaker: %s resumed after %.1f s: lag %d versions <= collect.max_lag %d",
                        self.who, now - self._opened_at, lag, self.max_lag)
        return self.open

    def _count_idle(self, now: float) -> None:
        idle = now - self._counted_to
        self._counted_to = now
        self.paused_s += idle
        get_metrics().collector_idle_seconds_total.inc(idle)

    def wait(self, lag: Lag) -> float:
        """Return once the lag is at most max_lag (at once when it is); the seconds paused."""
        began = self.paused_s
        while self.update(lag()):
            self.sleep(self.poll_s)
        return self.paused_s - began


def version_lag(learner_version: Callable[[], int | None], held_version: Callable[[], int | None],
                queued_versions: Callable[[], int] = lambda: 0) -> Lag:
    """Lag of the next collection: the learner's newest version minus the collector's held
    one, plus the updates still queued ahead of its shard (the learner trains them first)."""

    def lag() -> int | None:
        learner, held = learner_version(), held_version()
        return None if learner is None or held is None else learner - held + queued_versions()

    return lag


def queued_versions(backlog: Callable[[], int], shards_per_version: int) -> Callable[[], int]:
    """Updates queued: unacknowledged queue entries over the shards one update trains."""
    return lambda: math.ceil(backlog() / max(1, shards_per_version))


class BreakerCollectors:
    """Collectors that wait at `breaker` before each collection (composition, like
    FixedStaleness): `lag_of(version)` is the lag of collecting with weights `version`."""

    def __init__(self, inner: Collectors, breaker: CircuitBreaker,
                 lag_of: Callable[[int], int | None]) -> None:
        self.inner, self.breaker, self.lag_of = inner, breaker, lag_of

    def collect(self, iteration: int, seed: int, version: int, sample: SampleIndex) -> Collected:
        trips = self.breaker.trips
        paused = self.breaker.wait(lambda: self.lag_of(version))
        batch = self.inner.collect(iteration, seed, version, sample)
        return Collected(batch.rollout, {**batch.scalars, "breaker_paused_seconds": paused,
                                         "breaker_trips": float(self.breaker.trips - trips)})

    def close(self) -> None:
        self.inner.close()
