"""Fixed staleness around the Collectors seam (collect.staleness = N, staleness_mode=fixed).

Iteration k of the PPO loop is collected with exactly policy version v_0 + max(0, k - N)
(v_0: the version the loop started from, the warm start's clone or the initial weights),
whatever the timing, so runs stay bit-identical across resumes. WeightHistory holds the
last N + 1 published weight sets (sync/history.py) and mirrors them to RUN_DIR/stale_weights,
from where a resumed run reads the versions its restored iteration needs (checkpoints hold
only the newest). N = 0 returns the inner collectors untouched: today's sync barrier.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from skurl.collect.collectors import Collected, Collectors, KeptWeights, SampleIndex, WeightSource
from skurl.config import CollectConfig
from skurl.errors import UserError
from skurl.telemetry.metrics import get_metrics

_log = logging.getLogger(__name__)
HISTORY_DIR = "stale_weights"
Tensors = dict[str, torch.Tensor]
SampleAt = Callable[[int, int], "np.ndarray | None"]  # (N SKUs, iteration) -> that update's SKU sample


def refuse_unbuilt(collect: CollectConfig, mode: str) -> None:
    """collect.staleness > 0 runs where it is built (fixed and bounded: colocated, decoupled,
    ray): one line elsewhere."""
    if collect.staleness == 0:
        return
    if mode not in ("colocated", "decoupled", "ray"):
        raise UserError(f"collect.staleness = {collect.staleness}: near-on-policy training is not built for "
                        f"{mode} yet; expected collect.staleness=0")


class FixedStaleness:
    """Collectors that gather iteration k with version v_k - min(k, N), v_k the learner's.

    `latest` is the learner's publisher (its wait_for gives the newest weights); `inner` the
    collectors that read weights from `history`. With `ahead`, once iteration k's rollout
    is handed over a background thread collects k + 1 with v_k + 1 - min(k + 1, N), a
    version already held (N >= 1), while the learner trains on k; the next call takes it
    if it asks for that very job, else collects anew. Each call records the lag, the time
    the learner waited for the rollout (learner_idle) and the collectors for work."""

    def __init__(self, inner: Collectors, latest: WeightSource, history: KeptWeights, staleness: int,
                 ahead: bool = False, iterations: int | None = None, sample_at: SampleAt | None = None) -> None:
        self.inner, self.latest, self.history, self.staleness = inner, latest, history, staleness
        self.sample_at = sample_at  # the learner's SKU sample of (N SKUs, a later iteration)
        self.iterations = iterations  # none is collected ahead past the run's last
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="collect-ahead") if ahead else None
        # the job collected ahead, its rollout, and the SKU samples it drew (to check at take)
        self._pending: tuple[tuple[int, int, int], Future[Collected], list[Any]] | None = None
        self._finished: float | None = None  # when the last collection ended
        self._collector_idle = 0.0  # since the last call
        self.lag_figures = LagFigures()
        self._first = True

    def behaviour_version(self, iteration: int, version: int) -> int:
        """The version iteration `iteration` is collected with when the learner holds `version`."""
        return version - min(iteration, self.staleness)

    def collect(self, iteration: int, seed: int, version: int, sample: SampleIndex) -> Collected:
        called = time.perf_counter()
        if self._first and iteration == 0:
            self.history.clear_directory()
        self._first = False
        self.history.put(*self.latest.wait_for(version, timeout=60.0))
        job = (iteration, seed, self.behaviour_version(iteration, version))
        batch = self._take(job, sample)
        if batch is None:
            batch = self._run(job, sample)
        returned = time.perf_counter()
        if self._pool is not None and (self.iterations is None or iteration + 1 < self.iterations):
            self._start_ahead((iteration + 1, seed, self.behaviour_version(iteration + 1, version + 1)), sample)
        idle = {"learner_idle_seconds": returned - called, "collector_idle_seconds": self._collector_idle}
        self._collector_idle = 0.0
        return self._with_lag(batch, version, job[2], idle)

    def _take(self, job: tuple[int, int, int], sample: SampleIndex) -> Collected | None:
        """The background collection's rollout when it is `job`'s and kept the SKU sample the
        learner draws now (None otherwise). Without `sample_at` a sample drawn ahead is the
        learner's current iteration's, which differs under ppo.sample_skus: then stop
        collecting ahead."""
        if self._pending is None:
            return None
        (ahead, future, drawn), self._pending = self._pending, None
        batch = future.result()  # waits; re-raises the collection's error here
        same_sample = all(_same_index(index, sample(n)) for n, index in drawn)
        if not same_sample and self._pool is not None:
            _log.warning("collect.ahead: the learner's SKU sample of an iteration is drawn when it "
                         "trains it (ppo.sample_skus); collecting in the loop from here on")
            self._pool.shutdown(wait=False)
            self._pool = None
        return batch if ahead == job and same_sample else None

    def _start_ahead(self, job: tuple[int, int, int], sample: SampleIndex) -> None:
        assert self._pool is not None
        drawn: list[tuple[int, np.ndarray | None]] = []

        def recorded(n: int) -> np.ndarray | None:
            drawn.append((n, sample(n) if self.sample_at is None else self.sample_at(n, job[0])))
            return drawn[-1][1]

        self._pending = (job, self._pool.submit(self._run, job, recorded), drawn)

    def _run(self, job: tuple[int, int, int], sample: SampleIndex) -> Collected:
        began = time.perf_counter()
        if self._finished is not None:
            self._collector_idle += began - self._finished
        try:
            return self.inner.collect(job[0], job[1], job[2], sample)
        finally:
            self._finished = time.perf_counter()

    def _with_lag(self, batch: Collected, version: int, behaviour: int, idle: dict[str, float]) -> Collected:
        return self.lag_figures.add(batch, version - batch.rollout.policy_version, behaviour, idle)

    def close(self) -> None:
        if self._pool is not None:
            if self._pending is not None:
                self._pending[1].cancel()
            self._pool.shutdown(wait=True)
        self.inner.close()


def _same_index(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and np.array_equal(a, b))


class LagFigures:
    """The lag figures of each trained rollout (both staleness modes): the record's scalars
    and Prometheus, with this process's share of fresh transitions so far."""

    def __init__(self) -> None:
        self.fresh, self.transitions = 0, 0

    def add(self, batch: Collected, lag: int, behaviour: int, idle: dict[str, float]) -> Collected:
        self.transitions += batch.rollout.rewards.size
        self.fresh += batch.rollout.rewards.size if lag == 0 else 0
        record_lag(lag, self.fresh / self.transitions, **idle)
        return Collected(batch.rollout, {**batch.scalars, **idle, "behaviour_version": float(behaviour),
                                         "policy_lag_versions": float(lag), "sample_freshness": float(lag == 0)})


def record_lag(lag: int, freshness: float, *, learner_idle_seconds: float, collector_idle_seconds: float) -> None:
    """Prometheus: the rollout's policy lag, the run's share of fresh transitions, idle times."""
    m = get_metrics()
    m.policy_lag_versions.observe(lag)
    m.sample_freshness.set(freshness)
    m.learner_idle_seconds_total.inc(learner_idle_seconds)
    m.collector_idle_seconds_total.inc(collector_idle_seconds)
