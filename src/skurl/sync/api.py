"""Weight publishing and subscribing: the seam between a learner and its collectors.

What travels is a `WeightBlob` (sync/codec.py): safetensors bytes of the model's
state_dict, the policy version, a model key and the sha256 of the bytes. The in-process
backend (sync/inproc.py) and network backends (Redis, gRPC) implement these Protocols,
and one contract test suite runs against all of them. Versions only grow.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

Tensors = dict[str, torch.Tensor]


class WeightSyncTimeout(TimeoutError):
    """wait_for(version) did not see that version within its timeout."""


@runtime_checkable
class WeightPublisher(Protocol):
    def publish(self, version: int, tensors: Tensors) -> object:
        """Make `tensors` the latest weights, as `version` (greater than any before). What
        it returns is the backend's (WirePublisher: the wire version); callers ignore it."""
        ...


@runtime_checkable
class WeightSubscriber(Protocol):
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
