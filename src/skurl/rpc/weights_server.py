"""WeightSyncService: the newest weights per model key, pushed to subscribers as a stream.

The server stores bytes, it never unpickles or even parses them: `payload` is
skurl.sync.codec's safetensors blob, checked here only against its sha256 so a corrupted
upload is refused (INVALID_ARGUMENT) instead of being fanned out to every collector.
Versions per key only grow: an older or equal version is FAILED_PRECONDITION.

Subscribe streams the held version at once when it is newer than the client's, then
every newer one as it is set. A subscriber that falls behind skips to the newest (a
collector wants the latest policy, not the history).
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Iterator

import grpc

from skurl.config import RpcConfig
from skurl.rpc.errors import NotFoundError, WireError
from skurl.rpc.gen import skurl_pb2 as pb
from skurl.rpc.gen import skurl_pb2_grpc as pb_grpc
from skurl.rpc.health import service_name
from skurl.rpc.servicer_base import GrpcServer, rpc_method
from skurl.sim.api import EnvStateError
from skurl.sync.slot import VersionedSlot

_KEY = re.compile(r"[A-Za-z0-9_.-]{1,128}")  # as sync.key
# How often a waiting stream wakes to notice a cancelled client or a stopping server.
_POLL_S = 0.25


class NotNewerError(EnvStateError):
    """SetWeights with a version not newer than the held one (FAILED_PRECONDITION)."""


def _check_key(key: str) -> str:
    if not _KEY.fullmatch(key):
        raise WireError(f"model key {key[:40]!r} is not valid (expected 1-128 letters, digits, "
                        "'_', '-', '.')")
    return key


class WeightSyncServicer(pb_grpc.WeightSyncServiceServicer):
    def __init__(self) -> None:
        self._slots: dict[str, VersionedSlot[pb.Weights]] = {}  # one per model key
        self._lock = threading.Lock()
        self._closing = False

    def _slot(self, key: str) -> VersionedSlot[pb.Weights]:
        with self._lock:
            slot = self._slots.get(key)
            if slot is None:
                slot = self._slots[key] = VersionedSlot()
                if self._closing:
                    slot.close()
            return slot

    # ---------------------------------------------------------------- in-process use
    def put(self, weights: pb.Weights) -> int:
        """Hold `weights` as the newest of its key (what SetWeights does); the version."""
        _check_key(weights.key)
        if weights.version < 0:
            raise WireError(f"weights '{weights.key}': version {weights.version}, expected >= 0")
        digest = hashlib.sha256(weights.payload).hexdigest()
        if digest != weights.sha256:
            raise WireError(f"weights '{weights.key}' version {weights.version}: payload sha256 "
                            f"{digest[:12]}... does not match the declared {weights.sha256[:12]}...")
        slot = self._slot(weights.key)
        if not slot.offer(int(weights.version), weights):
            raise NotNewerError(f"weights '{weights.key}': version {weights.version} is not "
                                f"newer than the held version {slot.version}")
        return int(weights.version)

    def held(self, key: str) -> pb.Weights | None:
        held = self._slot(key).held()
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
        except WireError as exc:
            context.abort(exc.grpc_code, str(exc))
        sent, slot = request.after_version, self._slot(request.key)
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
        self.servicer = WeightSyncServicer()
        # Each open Subscribe stream holds a worker thread; leave room for unary calls.
        super().__init__(
            lambda s: pb_grpc.add_WeightSyncServiceServicer_to_server(self.servicer, s), cfg,
            host, port, max_workers=max_subscribers + 8,
            services=[service_name("WeightSyncService")])

    def stop(self, grace_s: float = 2.0) -> None:
        self.servicer.close()
        super().stop(grace_s)
