"""The seam between a learner and its collectors: one WeightBackend protocol for the
learner's side of every backend (sync/inproc.py, redis.py, grpc.py, ray.py, wire.py) and a
WeightSubscriber for the collectors' side. Network backends carry a `WeightBlob`
(weights/codec.py); the in-process one hands over tensor copies. One contract suite
(tests/contracts/test_weights_contract.py) runs over all of them. Versions only grow.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

Tensors = dict[str, torch.Tensor]


class WeightSyncTimeout(TimeoutError):
    """wait_for(version) did not see that version within its timeout."""


@runtime_checkable
class WeightBackend(Protocol):
    """The learner's side of a backend."""

    def publish(self, version: int, tensors: Tensors) -> object:
        """Make `tensors` the latest weights, as `version` (greater than any before). What
        it returns is the backend's (WirePublisher: the wire version); callers ignore it."""
        ...

    def published_version(self) -> int | None:
        """The version the backend holds now (None before any publish)."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class WeightSubscriber(Protocol):
    """A collector's side of a backend."""

    def latest(self) -> tuple[int, Tensors] | None:
        """The newest (version, tensors), or None before the first publish."""
        ...

    def latest_version(self) -> int | None:
        """The newest version without transferring weights (None before any publish)."""
        ...

    def wait_for(self, version: int, timeout: float | None = None) -> tuple[int, Tensors]:
        """Block until a version >= `version` is published; return the newest.
        Raises WeightSyncTimeout after `timeout` seconds (None waits for ever)."""
        ...

    def close(self) -> None: ...
