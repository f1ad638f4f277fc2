"""In-process weight sync: one VersionedSlot of detached tensor copies, never encoded.

The co-located loop (and the in-process publisher under collect.staleness) hands tensors
over in memory; what a network backend adds (safetensors, sha256) guards bytes on a wire.
Copies keep what subscribers got apart from the learner's tensors, and NaN or infinite
weights are refused as every backend refuses them (the contract suite keeps them in step).
"""

from __future__ import annotations

import torch

from skurl.sync.api import Tensors, WeightSyncTimeout
from skurl.weights.codec import check_finite
from skurl.weights.slot import VersionedSlot


class InProcWeights:
    """A WeightBackend and a WeightSubscriber for one model key."""

    def __init__(self, model_key: str = "policy") -> None:
        self.model_key = model_key
        self._slot: VersionedSlot[Tensors] = VersionedSlot()

    def publish(self, version: int, tensors: Tensors) -> None:
        check_finite(tensors, version, self.model_key)
        held = self._slot.version
        if held is not None and version <= held:  # refused before the copy is paid for
            raise ValueError(f"publish: version {version} is not newer than {held}")
        copies = {k: v.detach().to("cpu", memory_format=torch.contiguous_format, copy=True) for k, v in tensors.items()}
        if not self._slot.offer(version, copies):
            raise ValueError(f"publish: version {version} is not newer than {self._slot.version}")

    def published_version(self) -> int | None:
        return self._slot.version

    def latest_version(self) -> int | None:
        return self._slot.version

    def latest(self) -> tuple[int, Tensors] | None:
        held = self._slot.held()
        return None if held is None else (held[0], dict(held[1]))

    def wait_for(self, version: int, timeout: float | None = None) -> tuple[int, Tensors]:
        held = self._slot.wait_for(version, timeout)
        if held is None:
            why = "the backend is closed" if self._slot.closed else f"not published within {timeout}s"
            raise WeightSyncTimeout(f"weights '{self.model_key}': version {version} {why} "
                                    f"(latest {self._slot.version})")
        return held[0], dict(held[1])

    def close(self) -> None:
        """Wake every waiter for good (their wait_for raises WeightSyncTimeout)."""
        self._slot.close()
