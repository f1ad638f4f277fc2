"""In-process weight sync: one versioned slot guarded by a condition variable.

The co-located loop uses it so that collectors take weights exactly as they would from
Redis or gRPC (encoded, checksummed, versioned), only without a network.
"""

from __future__ import annotations

import threading
import time

from skurl.sync.api import Tensors, WeightSyncTimeout
from skurl.sync.codec import WeightBlob, decode_weights, encode_weights


class InProcWeights:
    """Both a WeightPublisher and a WeightSubscriber for one model key."""

    def __init__(self, model_key: str = "policy") -> None:
        self.model_key = model_key
        self._blob: WeightBlob | None = None
        self._cond = threading.Condition()

    def publish(self, version: int, tensors: Tensors) -> None:
        blob = encode_weights(tensors, version, self.model_key)
        with self._cond:
            if self._blob is not None and version <= self._blob.version:
                raise ValueError(f"publish: version {version} is not newer than {self._blob.version}")
            self._blob = blob
            self._cond.notify_all()

    def latest_blob(self) -> WeightBlob | None:
        with self._cond:
            return self._blob

    def latest_version(self) -> int | None:
        blob = self.latest_blob()
        return None if blob is None else blob.version

    def latest(self) -> tuple[int, Tensors] | None:
        blob = self.latest_blob()
        return None if blob is None else (blob.version, decode_weights(blob))

    def wait_for(self, version: int, timeout: float | None = None) -> tuple[int, Tensors]:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._blob is None or self._blob.version < version:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    have = None if self._blob is None else self._blob.version
                    raise WeightSyncTimeout(f"weights '{self.model_key}': version {version} not published "
                                            f"within {timeout}s (latest {have})")
                self._cond.wait(left)
            blob = self._blob
        return blob.version, decode_weights(blob)
