"""Fixed staleness around the Collectors seam (train.staleness = N, staleness_mode=fixed).

Iteration k of the PPO loop is collected with exactly policy version v_0 + max(0, k - N)
(v_0: the version the loop started from, the warm start's clone or the initial weights),
whatever the timing, so runs stay bit-identical across resumes. WeightHistory holds the
last N + 1 published weight sets and mirrors them to RUN_DIR/stale_weights, from where a
resumed run reads the versions its restored iteration needs (checkpoints hold only the
newest). N = 0 returns the inner collectors untouched: today's sync barrier.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load, save

from skurl import atomic
from skurl.collect.collectors import Collected, Collectors, SampleIndex
from skurl.errors import UserError
from skurl.telemetry.metrics import get_metrics

HISTORY_DIR = "stale_weights"
_FILE = re.compile(r"v(\d{9})\.safetensors")
Tensors = dict[str, torch.Tensor]


def refuse_unbuilt(train: Any, mode: str) -> None:
    """train.staleness > 0 runs only where it is built (colocated, fixed): one line elsewhere."""
    if train.staleness == 0:
        return
    if mode != "colocated":
        raise UserError(f"train.staleness = {train.staleness}: near-on-policy training is built for "
                        f"--mode colocated only so far; expected train.staleness=0 with --mode {mode}")
    if train.staleness_mode != "fixed":
        raise UserError(f"train.staleness_mode = {train.staleness_mode!r}: not built in --mode colocated yet; "
                        "expected fixed")


class WeightHistory:
    """Weights by exact version: `wait_for(v)` returns version v itself (a WeightSubscriber
    for LocalCollectors), from memory (the last `keep`) or from `directory`, where every
    version put is written (atomically) and kept while a resume may need it."""

    def __init__(self, keep: int, directory: Path | None, keep_back: int) -> None:
        self.keep, self.directory, self.keep_back = keep, directory, keep_back
        self._held: dict[int, Tensors] = {}

    def clear_directory(self) -> None:
        """A fresh start: files a crashed attempt left behind belong to another run."""
        for path in self._files():
            path.unlink(missing_ok=True)

    def put(self, version: int, tensors: Tensors) -> None:
        if version in self._held:
            return
        self._held[version] = tensors
        for old in sorted(self._held)[:-self.keep]:
            del self._held[old]
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
            atomic.write_bytes(self.directory / f"v{version:09d}.safetensors", save(tensors, {"version": str(version)}))
            self._prune(version - self.keep_back)

    def _files(self) -> list[Path]:
        if self.directory is None or not self.directory.is_dir():
            return []
        return sorted(p for p in self.directory.iterdir() if _FILE.fullmatch(p.name))

    def _prune(self, floor: int) -> None:
        for path in self._files():
            match = _FILE.fullmatch(path.name)
            if match is not None and int(match.group(1)) < floor:
                path.unlink(missing_ok=True)

    def wait_for(self, version: int, timeout: float | None = None) -> tuple[int, Tensors]:
        """Exactly `version` (nothing to wait for: it was put before any collection asks)."""
        if version not in self._held:
            path = None if self.directory is None else self.directory / f"v{version:09d}.safetensors"
            if path is None or not path.is_file():
                raise UserError(f"train.staleness: the weights of policy version {version} are not kept "
                                f"(expected {path or 'them in memory'}); resume from a later checkpoint "
                                "or with train.staleness=0")
            self._held[version] = load(path.read_bytes())
        return version, self._held[version]


class FixedStaleness:
    """Collectors that gather iteration k with version v_k - min(k, N), v_k the learner's.

    `latest` is the learner's publisher (its wait_for gives the newest weights); `inner` the
    collectors that read weights from `history`. Each call records the lag and the time
    the learner waited for the rollout (learner_idle) and the collectors for the learner."""

    def __init__(self, inner: Collectors, latest: Any, history: WeightHistory, staleness: int) -> None:
        self.inner, self.latest, self.history, self.staleness = inner, latest, history, staleness
        self._returned: float | None = None  # when the previous rollout was handed over
        self._fresh, self._transitions = 0, 0  # this process's, for sample_freshness

    def behaviour_version(self, iteration: int, version: int) -> int:
        """The version iteration `iteration` is collected with when the learner holds `version`."""
        return version - min(iteration, self.staleness)

    def collect(self, iteration: int, seed: int, version: int, sample: SampleIndex) -> Collected:
        called = time.perf_counter()
        if self._returned is None and iteration == 0:
            self.history.clear_directory()
        self.history.put(*self.latest.wait_for(version, timeout=60.0))
        behaviour = self.behaviour_version(iteration, version)
        batch = self.inner.collect(iteration, seed, behaviour, sample)
        lag = version - batch.rollout.policy_version
        returned = time.perf_counter()
        idle = {"learner_idle_seconds": returned - called,  # sync: the learner waits for the whole collection
                "collector_idle_seconds": 0.0 if self._returned is None else called - self._returned}
        self._returned = returned
        self._transitions += batch.rollout.rewards.size
        self._fresh += batch.rollout.rewards.size if lag == 0 else 0
        record_lag(lag, self._fresh / self._transitions, **idle)
        return Collected(batch.rollout, {**batch.scalars, **idle, "behaviour_version": float(behaviour),
                                         "policy_lag_versions": float(lag), "sample_freshness": float(lag == 0)})

    def close(self) -> None:
        self.inner.close()


def record_lag(lag: int, freshness: float, *, learner_idle_seconds: float, collector_idle_seconds: float) -> None:
    """Prometheus: the rollout's policy lag, the run's share of fresh transitions, idle times."""
    m = get_metrics()
    m.policy_lag_versions.observe(lag)
    m.sample_freshness.set(freshness)
    m.learner_idle_seconds_total.inc(learner_idle_seconds)
    m.collector_idle_seconds_total.inc(collector_idle_seconds)


def with_staleness(train: Any, latest: Any, run_dir: Path, local: Callable[[Any], Collectors]) -> Collectors:
    """The run's collectors: `local(latest)` at train.staleness 0 (the sync barrier), else
    FixedStaleness over `local(history)`."""
    n = train.staleness
    if n == 0:
        return local(latest)
    history = WeightHistory(n + 1, run_dir / HISTORY_DIR, keep_back=n + train.keep_checkpoints * train.checkpoint_every)
    return FixedStaleness(local(history), latest, history, n)
