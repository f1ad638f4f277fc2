"""The circuit breaker for remote collectors (collect.max_lag, decoupled bounded staleness).

A collector asked for the newest weights (the Collect request's min_version) waits until
its weight feed brings them. While it waits, the lag of the shard it would collect with
what it holds is the learner's version, plus the updates queued ahead of that shard, minus
the held version. The watch reads each waiting collector's held version (GetStats, the
newest weights it has received) every poll_s, and feeds that lag to one CircuitBreaker per
collector: a collector whose feed stalls while the learner goes on is named in one line
when it passes max_lag, and again when it has caught up. Collectors that answer within
poll_s are never read, so a normal weight hand-over costs no RPC and trips nothing.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

from skurl.collect.breaker import CircuitBreaker

log = logging.getLogger("skurl.modes")


class CollectorLagWatch:
    """Per-collector breakers over the collectors' held versions while a collection waits.

    `learner_version()`: the learner's newest version (None: unknown); `ahead()`: updates
    the learner trains before the shard being collected; `learner_of_wire(wire)`: the
    learner version a wire version carries (None: not one this run published)."""

    def __init__(self, max_lag: int, learner_version: Callable[[], int | None], ahead: Callable[[], int],
                 learner_of_wire: Callable[[int], int | None], *, poll_s: float = 0.5) -> None:
        self.max_lag, self.learner_version, self.ahead = max_lag, learner_version, ahead
        self.learner_of_wire, self.poll_s = learner_of_wire, poll_s
        self.breakers: dict[str, CircuitBreaker] = {}
        self.max_seen = 0  # the largest lag read since the last take_figures()

    def wait(self, futures: Mapping[str, Future], held_wire: Callable[[str], int | None]) -> None:
        """Return when every future is done, reading the held version of those still
        waiting every poll_s; then close the breakers of collectors that answered."""
        pending = dict(futures)
        while pending:
            done, _ = cf.wait(pending.values(), timeout=self.poll_s)
            pending = {cid: f for cid, f in pending.items() if f not in done}
            for cid in pending:
                self._read(cid, held_wire)
        for cid in futures:
            breaker = self.breakers.get(cid)
            if breaker is not None and breaker.open:  # it answered: it held the version asked for
                self._read(cid, held_wire)

    def _read(self, cid: str, held_wire: Callable[[str], int | None]) -> None:
        lag = self.lag(held_wire(cid))
        if lag is not None:
            self.max_seen = max(self.max_seen, lag)
        breaker = self.breakers.get(cid)
        if breaker is None:
            breaker = self.breakers[cid] = CircuitBreaker(self.max_lag, poll_s=self.poll_s, who=f"collector {cid}")
        breaker.update(lag)

    def lag(self, wire: int | None) -> int | None:
        """Versions a shard collected now with weights `wire` would lag when trained."""
        learner = self.learner_version()
        held = None if wire is None else self.learner_of_wire(wire)
        return None if learner is None or held is None else learner + self.ahead() - held

    def take_figures(self) -> dict[str, float]:
        """Trips so far (all collectors) and the largest lag read since the last call."""
        out = {"collector_breaker_trips": float(sum(b.trips for b in self.breakers.values())),
               "collector_lag_max": float(self.max_seen)}
        self.max_seen = 0
        return out


def held_wire_of(clients: Mapping[str, Any], timeout_s: float) -> Callable[[str], int | None]:
    """The newest wire version collector `cid` holds or has received (GetStats); None
    when it does not answer (it may be down: the collection's own rules judge that)."""

    def held(cid: str) -> int | None:
        try:
            stats = clients[cid].stats(timeout=timeout_s)
        except Exception as exc:  # a reading, not a verdict
            log.debug("collector %s: no stats (%s)", cid, exc)
            return None
        return newest_wire(stats)

    return held


def newest_wire(stats: Mapping[str, Any]) -> int:
    """A collector's newest wire version from its GetStats: loaded, or received and not yet
    loaded (-1: none)."""
    return max(int(stats["policy_version"]), int(stats.get("pending_version", -1)))
