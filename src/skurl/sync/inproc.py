"""In-process weight sync: one VersionedSlot of encoded weights.

The co-located loop uses it so that collectors take weights exactly as they would from
Redis or gRPC (encoded, checksummed, versioned), only without a network.
"""

from __future__ import annotations

from skurl.sync.api import Tensors, WeightSyncTimeout
from skurl.sync.codec import WeightBlob, decode_weights, encode_checked
from skurl.sync.slot import VersionedSlot


class InProcWeights:
    """Both a WeightPublisher and a WeightSubscriber for one model key."""

    def __init__(self, model_key: str = "policy") -> None:
        self.model_key = model_key
        self._slot: VersionedSlot[WeightBlob] = VersionedSlot()

    def publish(self, version: int, tensors: Tensors) -> None:
        if not self._slot.offer(version, encode_checked(tensors, version, self.model_key)):
            raise ValueError(f"publish: version {version} is not newer than {self._slot.version}")

    def latest_blob(self) -> WeightBlob | None:
        held = self._slot.held()
        return None if held is None else held[1]

    def latest_version(self) -> int | None:
        return self._slot.version

    def latest(self) -> tuple[int, Tensors] | None:
        blob = self.latest_blob()
        return None if blob is None else (blob.version, decode_weights(blob))

    def wait_for(self, version: int, timeout: float | None = None) -> tuple[int, Tensors]:
        held = self._slot.wait_for(version, timeout)
        if held is None:
            raise WeightSyncTimeout(f"weights '{self.model_key}': version {version} not published "
                                    f"within {timeout}s (latest {self._slot.version})")
        return held[0], decode_weights(held[1])
