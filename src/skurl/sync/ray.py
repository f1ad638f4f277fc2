"""Weight sync over a Ray actor (`--mode ray`): a WeightBackend and WeightSubscriber
(sync/api.py) over a threaded actor, so that waiters do not block the publisher.

The actor keeps encoded blobs (safetensors + sha256, weights/codec.py) in a VersionedSlot and
refuses one whose bytes do not match its checksum, as the gRPC service does; subscribers
check what the checksum cannot (bytes that are not safetensors, tensors unlike the
model) and keep their last good version. Every ray.get has a deadline.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayTaskError

from skurl.errors import UserError
from skurl.sync.api import Tensors, WeightSyncTimeout
from skurl.weights.codec import (
    WeightBlob,
    WeightIntegrityError,
    check_sha256,
    decode_weights,
    encode_checked,
    note_rejected,
    spec_mismatch,
    spec_of,
)
from skurl.weights.slot import VersionedSlot

log = logging.getLogger(__name__)


class RayTimeoutError(UserError):
    """A Ray actor did not answer within ray.get_timeout_s."""


def ray_get(ref: Any, timeout_s: float, what: str) -> Any:
    """ray.get with a deadline; a timeout becomes one line naming the call and the key."""
    try:
        return ray.get(ref, timeout=timeout_s)
    except GetTimeoutError:
        raise RayTimeoutError(f"{what}: no answer within {timeout_s:g} s (ray.get_timeout_s)") from None


class WeightSlot:
    """The newest WeightBlob (a Ray actor class: start_weight_slot)."""

    def __init__(self) -> None:
        self._slot: VersionedSlot[WeightBlob] = VersionedSlot()

    def publish(self, blob: WeightBlob) -> int:
        check_sha256(blob)  # damaged on the way: never fanned out
        if not self._slot.offer(blob.version, blob):
            raise ValueError(f"publish: version {blob.version} is not newer than {self._slot.version}")
        return blob.version

    def latest(self) -> WeightBlob | None:
        held = self._slot.held()
        return None if held is None else held[1]

    def latest_version(self) -> int | None:
        return self._slot.version

    def wait_for(self, version: int, timeout_s: float) -> WeightBlob | None:
        held = self._slot.wait_for(version, timeout_s)
        return None if held is None else held[1]


def start_weight_slot() -> Any:
    """The slot on the driver's (the learner's) node: it lives as long as the run, whichever
    other node is lost."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=False)
    return ray.remote(WeightSlot).options(num_cpus=0, max_concurrency=64, scheduling_strategy=here).remote()


class RayWeights:
    """A WeightBackend and WeightSubscriber over a WeightSlot actor; `like` (the model's
    tensors) makes the subscriber refuse weights of another shape."""

    def __init__(self, slot: Any, model_key: str, timeout_s: float, *, like: Tensors | None = None) -> None:
        self.slot, self.model_key, self.timeout_s = slot, model_key, timeout_s
        self._spec = None if like is None else spec_of(like)
        self._good: tuple[int, Tensors] | None = None
        self._rejected: set[int] = set()
        self._closed = False

    def publish(self, version: int, tensors: Tensors) -> None:
        blob = encode_checked(tensors, version, self.model_key)
        self.publish_blob(blob)

    def publish_blob(self, blob: WeightBlob) -> None:
        """An encoded blob as it is (a ValueError names a version not newer than the held
        one, a WeightIntegrityError bytes that do not match their sha256)."""
        try:
            ray_get(self.slot.publish.remote(blob), self.timeout_s, f"weights '{self.model_key}': publish")
        except RayTaskError as exc:  # the actor's refusal, as its own type
            raise exc.as_instanceof_cause() from None

    def latest_version(self) -> int | None:
        return ray_get(self.slot.latest_version.remote(), self.timeout_s, "weights: latest_version")

    def published_version(self) -> int | None:
        return self.latest_version()

    def close(self) -> None:
        """Stop waiting (wait_for raises at once); the slot actor belongs to the run's RayCluster."""
        self._closed = True

    def latest(self) -> tuple[int, Tensors] | None:
        blob = ray_get(self.slot.latest.remote(), self.timeout_s, "weights: latest")
        if blob is not None:
            self._install(blob)
        return self._good

    def wait_for(self, version: int, timeout: float | None = None) -> tuple[int, Tensors]:
        wait = self.timeout_s if timeout is None else timeout
        deadline = time.monotonic() + wait
        want = version
        while not self._closed and (left := deadline - time.monotonic()) > 0:
            blob = ray_get(self.slot.wait_for.remote(want, left), left + self.timeout_s, "weights: wait_for")
            if blob is None:
                break
            good = self._install(blob)
            if good is not None and good[0] >= version:
                return good
            want = blob.version + 1  # rejected: only a newer version can be good
        raise WeightSyncTimeout(f"weights '{self.model_key}': version {version} not published within {wait:g}s "
                                f"(latest good {None if self._good is None else self._good[0]})")

    def _install(self, blob: WeightBlob) -> tuple[int, Tensors] | None:
        """The newest good (version, tensors), after checking `blob` when it is newer."""
        if (self._good is not None and blob.version <= self._good[0]) or blob.version in self._rejected:
            return self._good
        try:
            tensors = decode_weights(blob)
            wrong = None if self._spec is None else spec_mismatch(spec_of(tensors), self._spec)
            if wrong is not None:
                raise WeightIntegrityError(f"weights '{self.model_key}' version {blob.version}: tensors {wrong}")
        except WeightIntegrityError as exc:
            note_rejected("subscribe")
            self._rejected.add(blob.version)
            log.error("weights '%s': rejected version %s, keeping version %s: %s", self.model_key, blob.version,
                      None if self._good is None else self._good[0], exc)
            return self._good
        self._good = (blob.version, tensors)
        return self._good
