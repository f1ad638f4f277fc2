"""Named stage timers: `with timer.stage("simulate"): ...`.

Each stage accumulates wall seconds (time.perf_counter) in the timer and observes the
Prometheus histogram `skurl_stage_seconds{stage=...}`, so the same numbers feed the
run log (`as_scalars()` -> time_simulate, ...) and the live dashboards.

Nesting: stages may nest (`iteration` around `simulate` and `learn`). Each stage is
reported under its own name; `totals()` is *inclusive* (an outer stage's seconds include
its inner stages', so the values of nested stages do not add up to wall time), and
`totals(exclusive=True)` subtracts the time spent in directly nested stages, so the
exclusive totals of all stages add up to the wall time covered by the outermost ones.
A stage nested in itself (recursion) is counted once per level."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from skurl.telemetry.metrics import SkurlMetrics, get_metrics


class _Frame:
    __slots__ = ("child_seconds", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self.child_seconds = 0.0


class StageTimer:
    """Accumulates wall seconds per named stage; safe to share between threads.

    `prometheus=False` keeps the timer local (no histogram); `metrics` records into a
    given SkurlMetrics instead of `get_metrics()` at the time each stage ends.
    """

    def __init__(self, *, prometheus: bool = True, metrics: SkurlMetrics | None = None) -> None:
        self._prometheus = prometheus
        self._metrics = metrics
        self._lock = threading.Lock()
        self._local = threading.local()  # nesting is per thread
        self._inclusive: dict[str, float] = {}
        self._exclusive: dict[str, float] = {}
        self._counts: dict[str, int] = {}

    def _stack(self) -> list[_Frame]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the body as stage `name` (counted also when the body raises)."""
        if not name:
            raise ValueError("stage name must be a non-empty string")
        stack = self._stack()
        frame = _Frame(name)
        stack.append(frame)
        start = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            stack.pop()
            if stack:
                stack[-1].child_seconds += elapsed
            self._add(name, elapsed, max(elapsed - frame.child_seconds, 0.0))

    def _add(self, name: str, inclusive: float, exclusive: float) -> None:
        with self._lock:
            self._inclusive[name] = self._inclusive.get(name, 0.0) + inclusive
            self._exclusive[name] = self._exclusive.get(name, 0.0) + exclusive
            self._counts[name] = self._counts.get(name, 0) + 1
        if self._prometheus:
            metrics = self._metrics if self._metrics is not None else get_metrics()
            metrics.stage_seconds.labels(stage=name).observe(inclusive)

    def totals(self, exclusive: bool = False) -> dict[str, float]:
        """Seconds per stage since the last reset (inclusive of nested stages by default)."""
        with self._lock:
            return dict(self._exclusive if exclusive else self._inclusive)

    def counts(self) -> dict[str, int]:
        """How many times each stage was entered since the last reset."""
        with self._lock:
            return dict(self._counts)

    def as_scalars(self, prefix: str = "time_", exclusive: bool = False) -> dict[str, float]:
        """Totals keyed for the run log: {"time_simulate": s, ...}."""
        return {f"{prefix}{name}": s for name, s in self.totals(exclusive).items()}

    def reset(self) -> None:
        """Forget the totals (e.g. per iteration). Histograms stay cumulative, as
        Prometheus expects. A stage open across a reset is counted after it."""
        with self._lock:
            self._inclusive.clear()
            self._exclusive.clear()
            self._counts.clear()
