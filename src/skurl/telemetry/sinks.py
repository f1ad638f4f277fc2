"""Extra destinations of the per-iteration scalars RunLogger writes (an MLflow run, ...).

The training loop builds its RunLogger itself; whoever wraps a training (the `skurl train`
command) makes a sink active for its duration, and every RunLogger opened meanwhile sends it
the scalars it sends TensorBoard, under the same tags."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Protocol


class MetricSink(Protocol):
    def log_scalars(self, iteration: int, scalars: Mapping[str, float]) -> None:
        """Finite scalars of one iteration, keyed by their TensorBoard tag."""
        ...


_ACTIVE: list[MetricSink] = []


@contextmanager
def metric_sink(sink: MetricSink) -> Iterator[MetricSink]:
    """Make `sink` receive the scalars of every RunLogger opened inside the block."""
    _ACTIVE.append(sink)
    try:
        yield sink
    finally:
        _ACTIVE.remove(sink)


def active_sinks() -> tuple[MetricSink, ...]:
    return tuple(_ACTIVE)
