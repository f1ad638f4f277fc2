"""Bounded staleness around the Collectors seam (collect.staleness = N, staleness_mode=bounded).

A collection thread runs ahead of the learner: it always collects with the newest weights
the learner has published and queues the rollouts; the learner trains the oldest queued
rollout that lags at most N versions and refuses older ones (counted, one line each). The
queue is bounded by the lag its next rollout would have when trained (queued + the one in
training): the thread waits while that would pass N, so at steady state it collects
update k + 1 while the learner trains k. Versions follow timing, so runs are not
bit-reproducible; collect.staleness_mode=fixed is (collect/staleness.py). The circuit
breaker (collect/breaker.py) pauses the thread while the weights it can get lag the
learner by more than collect.max_lag (a stalled weight sync), with one line each way.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from skurl.collect.breaker import CircuitBreaker, max_lag_of
from skurl.collect.collectors import (
    Collected,
    Collectors,
    KeepWeights,
    KeptWeights,
    NewestWeights,
    SampleIndex,
    WeightSource,
)
from skurl.collect.staleness import LagFigures
from skurl.config import CollectConfig
from skurl.telemetry.metrics import get_metrics

_log = logging.getLogger(__name__)


def _all_skus(n: int) -> None:
    """Collected ahead of the update that trains it, a rollout keeps every SKU's
    observations (the learner draws its SKU sample at the update)."""
    return None


class BoundedStaleness:
    """Collectors whose rollouts come from a thread that runs ahead of the learner.

    `inner` reads the weights from `history`, into which the thread puts the newest ones on
    `latest` (the learner's publisher: `latest()`, `latest_version()`) before each
    collection; `learner_version()` is the learner's newest version (the breaker's
    reference; by default the newest published one). Episodes are numbered on from the
    first call's iteration, one per collection (refused ones included)."""

    def __init__(self, inner: Collectors, latest: NewestWeights, history: KeptWeights, staleness: int,
                 breaker: CircuitBreaker, learner_version: Callable[[], int | None] | None = None) -> None:
        self.inner, self.latest, self.history, self.staleness = inner, latest, history, staleness
        self.breaker = breaker
        self.learner_version = learner_version or latest.latest_version
        self._queue: deque[Collected] = deque()
        self._cond = threading.Condition()
        self._training = False  # the learner holds a rollout (between two collect calls)
        self._error: BaseException | None = None
        self._stop = False
        self._thread: threading.Thread | None = None
        self._seed = 0
        self._episode = 0
        self._collector_idle = 0.0  # since the last call
        self.lag_figures, self.refused = LagFigures(), 0
        # A durable queue's hooks (modes/decoupled/shard_stream.py): what a restart hands back first
        # (rollouts and the next episode number), and each rollout trained or refused.
        self.recover: Callable[[int], tuple[list[Collected], int]] = lambda iteration: ([], iteration)
        self.on_take: list[Callable[[Collected], None]] = []
        self.on_refuse: list[Callable[[Collected], None]] = []

    # ------------------------------------------------------------------ learner side
    def collect(self, iteration: int, seed: int, version: int, sample: SampleIndex) -> Collected:
        """The oldest queued rollout at most `staleness` versions behind `version`."""
        called = time.perf_counter()
        with self._cond:
            self._training = False
            self._cond.notify_all()
            if self._thread is None:
                self._start(iteration, seed)
            while True:
                batch = self._next()
                lag = version - batch.rollout.policy_version
                if 0 <= lag <= self.staleness:
                    break
                self._refuse(batch, version, lag)
            for hook in self.on_take:
                hook(batch)
            self._training = True
            self._cond.notify_all()
            idle = {"learner_idle_seconds": time.perf_counter() - called, "collector_idle_seconds": self._collector_idle}
            self._collector_idle = 0.0
        return self._with_lag(batch, lag, idle)

    def _start(self, iteration: int, seed: int) -> None:
        recovered, self._episode = self.recover(iteration)
        self._seed = seed
        self._queue.extend(recovered)
        self._thread = threading.Thread(target=self._produce, name="collect-bounded", daemon=True)
        self._thread.start()

    def _next(self) -> Collected:
        """Wait (holding the condition) for a queued rollout; re-raise the thread's error."""
        while not self._queue:
            if self._error is not None:
                raise self._error
            self._cond.wait(1.0)
        return self._queue.popleft()

    def _refuse(self, batch: Collected, version: int, lag: int) -> None:
        self.refused += 1
        get_metrics().stale_shards_refused_total.inc()
        if lag < 0:  # read back after a restart: its weights were lost with the crashed learner
            _log.warning("collect.staleness_mode=bounded: refused a rollout of policy version %d: newer than "
                         "the learner's %d (weights it no longer has)", batch.rollout.policy_version, version)
        else:
            _log.warning("collect.staleness_mode=bounded: refused a rollout of policy version %d: %d versions "
                         "behind the learner's %d > collect.staleness %d", batch.rollout.policy_version, lag,
                         version, self.staleness)
        for hook in self.on_refuse:
            hook(batch)

    def _with_lag(self, batch: Collected, lag: int, idle: dict[str, float]) -> Collected:
        out = self.lag_figures.add(batch, lag, batch.rollout.policy_version, idle)
        out.scalars.update(behaviour_episode=float(getattr(batch.rollout, "episode", -1)),
                           stale_rollouts_refused=float(self.refused))
        return out

    # ------------------------------------------------------------------ collection thread
    def ahead(self) -> int:
        """Updates the next rollout would wait for when trained: those queued, and the
        one the learner trains now."""
        return len(self._queue) + int(self._training)

    def _produce(self) -> None:
        try:
            while self._wait_for_room():
                paused = self.breaker.wait(self._weights_lag)
                got = self.latest.latest()
                assert got is not None, "the learner publishes its weights before the first collection"
                self.history.put(*got)
                batch = self.inner.collect(self._episode, self._seed, got[0], _all_skus)
                with self._cond:
                    self._collector_idle += paused
                    self._queue.append(batch)
                    self._episode += 1
                    self._cond.notify_all()
        except BaseException as exc:  # raised in the learner's thread by collect()
            with self._cond:
                self._error = exc
                self._cond.notify_all()

    def _wait_for_room(self) -> bool:
        """Wait while a rollout collected now would lag more than `staleness` when trained;
        False once closed."""
        began = time.perf_counter()
        with self._cond:
            while not self._stop and self.ahead() > self.staleness:
                self._cond.wait(1.0)
            self._collector_idle += time.perf_counter() - began
            return not self._stop

    def _weights_lag(self) -> int | None:
        """Versions the newest weights the collectors can get lag the learner's."""
        learner, newest = self.learner_version(), self.latest.latest_version()
        return None if learner is None or newest is None else learner - newest

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
        self.inner.close()


def bounded(collect: CollectConfig, latest: NewestWeights, local: Callable[[WeightSource], Collectors],
            keep: KeepWeights) -> BoundedStaleness:
    """BoundedStaleness over `local(history)`, the newest weights from `latest` (the
    learner's in-process publisher), `history` two versions in memory (`keep`)."""
    history = keep(2, None, 0)
    breaker = CircuitBreaker(max_lag_of(collect), who="collection thread")
    return BoundedStaleness(local(history), latest, history, collect.staleness, breaker)
