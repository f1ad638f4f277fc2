"""WeightSyncService: the newest weights per model key, pushed to subscribers as a stream.

`payload` is skurl.weights.codec's safetensors blob (never pickle), decoded once on SetWeights
and refused (INVALID_ARGUMENT, weights_rejected_total{path="publish"}) when its sha256,
header, key or version disagree, a tensor is not finite, or its names, shapes and dtypes
differ from the model's (`expect`, which a learner hosting the server calls with its
state_dict): nothing malformed is fanned out; versions per key only grow (else FAILED_PRECONDITION).

Subscribe streams the held version at once when it is newer than the client's, then
every newer one as it is set; at most `max_subscribers` streams at once (each holds a
handler thread), more are RESOURCE_EXHAUSTED. Read-only calls keep no state for keys
never published, and keys are capped at MAX_KEYS."""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections.abc import Iterator

import grpc

from skurl.config import RpcConfig
from skurl.rpc.errors import CapacityError, NotFoundError, WireError
from skurl.rpc.gen import skurl_pb2 as pb
from skurl.rpc.gen import skurl_pb2_grpc as pb_grpc
from skurl.rpc.health import service_name
from skurl.rpc.servicer_base import GrpcServer, rpc_method
from skurl.sim.api import EnvStateError
from skurl.weights.codec import (
    Spec,
    WeightBlob,
    WeightIntegrityError,
    check_weights,
    decode_weights,
    note_rejected,
)
from skurl.weights.slot import VersionedSlot

_KEY = re.compile(r"[A-Za-z0-9_.-]{1,128}")  # as sync.key
# How often a waiting stream wakes to notice a cancelled client or a stopping server.
_POLL_S = 0.25
MAX_KEYS = 1024  # model keys one server holds (each keeps its newest weights in memory)


def to_message(blob: WeightBlob) -> pb.Weights:
    return pb.Weights(key=blob.model_key, version=blob.version, sha256=blob.sha256, payload=blob.payload)


def from_message(msg: pb.Weights) -> WeightBlob:
    return WeightBlob(model_key=msg.key, version=int(msg.version), payload=msg.payload, sha256=msg.sha256)


class NotNewerError(EnvStateError):
    """SetWeights with a version not newer than the held one (FAILED_PRECONDITION)."""


def _check_key(key: str) -> str:
    if not _KEY.fullmatch(key):
        raise WireError(f"model key {key[:40]!r} is not valid (expected 1-128 letters, digits, "
                        "'_', '-', '.')")
    return key


class WeightSyncServicer(pb_grpc.WeightSyncServiceServicer):
    def __init__(self, max_subscribers: int = 64) -> None:
        self._slots: dict[str, VersionedSlot[pb.Weights]] = {}  # one per published model key
        self._specs: dict[str, Spec] = {}  # names, dtypes and shapes a key must have (`expect`)
        self._lock = threading.Lock()
        self._closing = False
        self._subscribers = threading.BoundedSemaphore(max_subscribers)
        self.max_subscribers = max_subscribers

    def _slot(self, key: str, create: bool = True) -> VersionedSlot[pb.Weights] | None:
        """The key's slot; a new one only when `create` (SetWeights, Subscribe)."""
        with self._lock:
            slot = self._slots.get(key)
            if slot is None and create:
                if len(self._slots) >= MAX_KEYS:
                    raise CapacityError(f"weights '{key}': this server already holds "
                                        f"{MAX_KEYS} model keys")
                slot = self._slots[key] = VersionedSlot()
                if self._closing:
                    slot.close()
            return slot

    def _check_payload(self, weights: pb.Weights) -> None:
        """Decode once (safetensors, never pickle): header, finiteness, the key's spec."""
        blob = from_message(weights)
        try:
            tensors = decode_weights(blob)
            check_weights(blob, tensors, weights.key, self._specs.get(weights.key))
        except WeightIntegrityError as exc:
            note_rejected("publish")
            raise WireError(str(exc)) from None

    def expect(self, key: str, like: Spec) -> None:
        """Refuse weights for `key` unlike `like` from now on (the learner's model)."""
        with self._lock:
            self._specs[_check_key(key)] = dict(like)

    # ---------------------------------------------------------------- in-process use
    def put(self, weights: pb.Weights) -> int:
        """Hold `weights` as the newest of its key (what SetWeights does); the version."""
        _check_key(weights.key)
        if weights.version < 0:
            raise WireError(f"weights '{weights.key}': version {weights.version}, expected >= 0")
        digest = hashlib.sha256(weights.payload).hexdigest()
        if digest != weights.sha256:
            note_rejected("publish")
            raise WireError(f"weights '{weights.key}' version {weights.version}: payload sha256 "
                            f"{digest[:12]}... does not match the declared {weights.sha256[:12]}...")
        held = self._slot(weights.key, create=False)
        if held is not None and held.version is not None and weights.version <= held.version:
            raise NotNewerError(f"weights '{weights.key}': version {weights.version} is not "
                                f"newer than the held version {held.version}")
        self._check_payload(weights)
        slot = self._slot(weights.key)
        assert slot is not None
        if not slot.offer(int(weights.version), weights):
            raise NotNewerError(f"weights '{weights.key}': version {weights.version} is not "
                                f"newer than the held version {slot.version}")
        return int(weights.version)

    def held(self, key: str) -> pb.Weights | None:
        slot = self._slot(key, create=False)  # a read never makes state for a new key
        held = None if slot is None else slot.held()
        return None if held is None else held[1]

    def close(self) -> None:
        """End every open Subscribe stream (called when the server stops)."""
        with self._lock:
            self._closing = True
            slots = list(self._slots.values())
        for slot in slots:
            slot.close()

    # ---------------------------------------------------------------- RPCs
    @rpc_method
    def SetWeights(self, request: pb.Weights, context: grpc.ServicerContext) -> pb.WeightsAck:
        version = self.put(request)
        return pb.WeightsAck(key=request.key, version=version, accepted=True)

    @rpc_method
    def GetWeights(self, request: pb.GetWeightsRequest,
                   context: grpc.ServicerContext) -> pb.Weights:
        held = self.held(_check_key(request.key))
        if held is None or held.version < request.min_version:
            have = "nothing" if held is None else f"version {held.version}"
            raise NotFoundError(f"weights '{request.key}': holding {have}, asked for version "
                                f">= {request.min_version}")
        return held

    @rpc_method
    def GetVersion(self, request: pb.VersionRequest,
                   context: grpc.ServicerContext) -> pb.VersionReply:
        held = self.held(_check_key(request.key))
        return pb.VersionReply(key=request.key, version=-1 if held is None else held.version)

    def Subscribe(self, request: pb.SubscribeRequest,
                  context: grpc.ServicerContext) -> Iterator[pb.Weights]:
        try:
            _check_key(request.key)
            if not self._subscribers.acquire(blocking=False):
                raise CapacityError(f"weights '{request.key}': {self.max_subscribers} Subscribe "
                                    "streams are open, the most this server serves")
        except (WireError, CapacityError) as exc:
            context.abort(exc.grpc_code, str(exc))
        # Released once the call ends, however it ends (even before the stream started).
        if not context.add_callback(self._subscribers.release):
            self._subscribers.release()
        return self._stream(request.key, request.after_version, context)

    def _stream(self, key: str, sent: int, context: grpc.ServicerContext) -> Iterator[pb.Weights]:
        slot = self._slot(key, create=False)
        while slot is None:  # a key not yet published: no state for it, look again shortly
            if self._closing or not context.is_active():
                return
            time.sleep(_POLL_S)
            slot = self._slot(key, create=False)
        while context.is_active():
            held = slot.wait_for(sent + 1, alive=context.is_active, poll_s=_POLL_S)
            if held is None:  # the client left or the server stops
                return
            sent = held[0]
            yield held[1]


class WeightSyncServer(GrpcServer):
    """A running WeightSyncService; a learner may host it and `servicer.put` directly."""

    def __init__(self, cfg: RpcConfig, host: str = "127.0.0.1", port: int = 0,
                 max_subscribers: int = 64) -> None:
        self.servicer = WeightSyncServicer(max_subscribers)
        # Each open Subscribe stream holds a worker thread; leave room for unary calls.
        super().__init__(
            lambda s: pb_grpc.add_WeightSyncServiceServicer_to_server(self.servicer, s), cfg,
            host, port, max_workers=max_subscribers + 8,
            services=[service_name("WeightSyncService")])

    def stop(self, grace_s: float = 2.0) -> None:
        self.servicer.close()
        super().stop(grace_s)
