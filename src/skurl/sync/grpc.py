"""sync.backend=grpc: the WeightSyncService (rpc/weights_server.py, the transport) hosted by
the learner (HostedGrpcWeights), a remote publisher and the collectors' subscriber.

The subscriber keeps one Subscribe stream open in a background thread: each pushed
version is verified (sha256, safetensors) and becomes `latest()` without the collector
asking, so the barrier `wait_for(v)` usually returns at once. Bad bytes are logged and
dropped, keeping the previous version. A lost server is retried with backoff; the
stream resumes after the version already held.
"""

from __future__ import annotations

import logging
import threading
import time

import grpc

from skurl.config import RpcConfig
from skurl.rpc.env_client import DEFAULT_CONNECT_TIMEOUT_S, connect
from skurl.rpc.errors import WEIGHTS, ServerUnavailableError, VersionNotNewerError, from_rpc_error
from skurl.rpc.gen import skurl_pb2 as pb
from skurl.rpc.gen import skurl_pb2_grpc as pb_grpc
from skurl.rpc.weights_server import WeightSyncServer, from_message, to_message
from skurl.sync.api import Tensors, WeightSyncTimeout
from skurl.weights.codec import (
    WeightBlob,
    WeightIntegrityError,
    check_weights,
    decode_weights,
    encode_checked,
    note_rejected,
    spec_of,
)
from skurl.weights.slot import VersionedSlot

log = logging.getLogger(__name__)
_BACKOFF_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0)


class GrpcWeightPublisher:
    """Publishes to the WeightSyncService at `address` (a WeightBackend)."""

    def __init__(self, address: str, cfg: RpcConfig | None = None, model_key: str = "policy",
                 connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S) -> None:
        self.address, self.model_key = address, model_key
        self._cfg = cfg or RpcConfig()
        self._channel = connect(address, self._cfg, connect_timeout_s, WEIGHTS)
        self._stub = pb_grpc.WeightSyncServiceStub(self._channel)

    def publish(self, version: int, tensors: Tensors) -> None:
        self.publish_blob(encode_checked(tensors, version, self.model_key))

    def publish_blob(self, blob: WeightBlob) -> None:
        try:
            self._stub.SetWeights(to_message(blob), timeout=self._cfg.timeout_s)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc, self.address, f"SetWeights '{blob.model_key}' "
                                 f"v{blob.version}", {grpc.StatusCode.FAILED_PRECONDITION:
                                                     VersionNotNewerError}, server=WEIGHTS) from None

    def published_version(self) -> int | None:
        """The server's newest version (one small call, no weights), None before any."""
        return _version_at(self._stub, self.address, self.model_key, self._cfg.timeout_s)

    def close(self) -> None:
        self._channel.close()


class HostedGrpcWeights:
    """The learner's WeightBackend under sync.backend=grpc: a WeightSyncService in its own
    process. Publishing puts the encoded weights straight into the servicer (the same checks
    as SetWeights); its first publish makes the server refuse weights unlike that model."""

    def __init__(self, cfg: RpcConfig, model_key: str, host: str = "127.0.0.1", port: int = 0) -> None:
        self._server = WeightSyncServer(cfg, host, port)
        self.model_key = model_key
        self._expecting = False
        self.address: str = self._server.address

    def publish(self, version: int, tensors: Tensors) -> None:
        held = self.published_version()
        if held is not None and version <= held:  # a ValueError, as every backend's
            raise ValueError(f"publish: version {version} is not newer than {held}")
        if not self._expecting:  # SetWeights from anyone else must fit the learner's model
            self._server.servicer.expect(self.model_key, spec_of(tensors))
            self._expecting = True
        self._server.servicer.put(to_message(encode_checked(tensors, version, self.model_key)))

    def published_version(self) -> int | None:
        held = self._server.servicer.held(self.model_key)
        return None if held is None else int(held.version)

    def close(self) -> None:
        self._server.stop()


class GrpcWeightSubscriber:
    """Follows the WeightSyncService at `address` for `model_key` (a WeightSubscriber)."""

    def __init__(self, address: str, cfg: RpcConfig | None = None, model_key: str = "policy",
                 connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S, *,
                 like: Tensors | None = None) -> None:
        """`like` (the model's state_dict) makes weights of other names/shapes/dtypes
        rejected, as bad bytes are; without it any valid safetensors is taken."""
        self.address, self.model_key = address, model_key
        self._cfg = cfg or RpcConfig()
        self._like = None if like is None else spec_of(like)
        self._channel = connect(address, self._cfg, connect_timeout_s, WEIGHTS)
        self._stub = pb_grpc.WeightSyncServiceStub(self._channel)
        self._slot: VersionedSlot[Tensors] = VersionedSlot()  # the newest accepted weights
        self._lock = threading.Lock()  # guards _call against close()
        self._call: grpc.Future | None = None
        self.rejected = 0  # versions dropped for bad bytes
        self.aged_out = 0  # streams the server closed at rpc.max_connection_age_s (reopened)
        self._thread = threading.Thread(target=self._follow, name=f"weights-{model_key}",
                                        daemon=True)
        self._thread.start()

    # ---------------------------------------------------------------- WeightSubscriber
    def latest(self) -> tuple[int, Tensors] | None:
        return self._slot.held()

    def latest_version(self) -> int | None:
        """The server's newest version (one small call, no weights), None before any."""
        return _version_at(self._stub, self.address, self.model_key, self._cfg.timeout_s)

    def wait_for(self, version: int, timeout: float | None = None) -> tuple[int, Tensors]:
        held = self._slot.wait_for(version, timeout)
        if held is None:
            why = "subscriber closed" if self._slot.closed else f"not within {timeout}s"
            raise WeightSyncTimeout(f"weights '{self.model_key}' from {self.address}: "
                                    f"version {version} {why} (holding {self._slot.version})")
        return held

    def close(self) -> None:
        with self._lock:
            self._slot.close()
            call = self._call
        if call is not None:
            call.cancel()
        self._thread.join(timeout=5.0)
        self._channel.close()

    def __enter__(self) -> GrpcWeightSubscriber:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- the stream
    def _follow(self) -> None:
        failures = 0
        # A long deadline bounds how long a silently dead connection can stall us;
        # the stream is simply reopened when it passes.
        stream_s = max(self._cfg.timeout_s, 60.0)
        while True:
            with self._lock:
                if self._slot.closed:
                    return
                after = self._slot.version
                after = -1 if after is None else after
                call = self._call = self._stub.Subscribe(
                    pb.SubscribeRequest(key=self.model_key, after_version=after), timeout=stream_s)
            try:
                for msg in call:
                    failures = 0
                    self._accept(msg)
            except grpc.RpcError as exc:
                if self._slot.closed:
                    return
                if _aged_out(exc):  # expected every max_connection_age_s: reopen at once
                    self.aged_out += 1
                elif exc.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                    failures += 1
                    if failures == 1:
                        log.warning("%s", from_rpc_error(exc, self.address, "Subscribe", server=WEIGHTS))
                    time.sleep(_BACKOFF_S[min(failures, len(_BACKOFF_S)) - 1])

    def _accept(self, msg: pb.Weights) -> None:
        blob = from_message(msg)
        try:
            tensors = decode_weights(blob)
            check_weights(blob, tensors, self.model_key, self._like)
        except WeightIntegrityError as exc:
            self.rejected += 1
            note_rejected("subscribe")
            log.error("dropping weights v%d from %s: %s", blob.version, self.address, exc)
            return
        self._slot.offer(blob.version, tensors)


def _version_at(stub: pb_grpc.WeightSyncServiceStub, address: str, key: str, timeout_s: float) -> int | None:
    try:
        reply = stub.GetVersion(pb.VersionRequest(key=key), timeout=timeout_s)
    except grpc.RpcError as exc:
        raise from_rpc_error(exc, address, f"GetVersion '{key}'", server=WEIGHTS) from None
    return None if reply.version < 0 else int(reply.version)


def _aged_out(exc: grpc.RpcError) -> bool:
    """The server closed the connection at its max age (gRPC core's own detail text)."""
    return exc.code() == grpc.StatusCode.UNAVAILABLE and "max connection age" in (exc.details() or "")


__all__ = ["GrpcWeightPublisher", "GrpcWeightSubscriber", "HostedGrpcWeights", "ServerUnavailableError",
           "VersionNotNewerError"]
