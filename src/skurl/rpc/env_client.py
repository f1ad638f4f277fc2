"""RemoteEnv: the Env protocol (sim/api.py) over gRPC, one shard on one sim server.

A collector cannot tell it from VectorEnv: same reset/step/info/close, same schema, same
Obs/StepResult with the env's own dtypes, arrays reused every step. With lean=True it
asks for lean replies (env_wire.py): only what a collector reads, about 1/13 of the bytes;
the raw state but today's forecast reads as zeros (unless raw=True: then it is whole, owed
too on supply networks), the per-SKU metrics as NaN, and `metric_sums` holds the shard's
sums of the last step. Failures surface as
skurl errors naming the server: a dead or unreachable server is ServerUnavailableError,
a rejected request RequestRejectedError carrying the server's one-line reason.
"""

from __future__ import annotations

import contextlib
import json
import threading
import uuid
from typing import Any

import grpc
import numpy as np

from skurl.config import RpcConfig
from skurl.rpc.codec import decode_batch, encode_into
from skurl.rpc.env_wire import ORDER_DTYPES, LeanReplyDecoder, ReplyDecoder, schema_from_wire
from skurl.rpc.errors import (
    SIM_SERVER,
    RequestRejectedError,
    RpcError,
    ServerUnavailableError,
    from_rpc_error,
)
from skurl.rpc.gen import skurl_pb2 as pb
from skurl.rpc.gen import skurl_pb2_grpc as pb_grpc
from skurl.rpc.security import open_channel
from skurl.sim.api import ActionError, EnvStateError, Obs, ObsSchema, StepResult


class RemoteActionError(RequestRejectedError, ActionError):
    """The server rejected the orders (INVALID_ARGUMENT): caught like VectorEnv's ActionError."""


class RemoteEnvStateError(RequestRejectedError, EnvStateError):
    """Step before Reset or after the episode (FAILED_PRECONDITION), as VectorEnv raises it."""


# Status -> error class per call, matching what VectorEnv raises for the same mistake
# (it raises EnvStateError for a negative seed, ActionError for bad orders).
_REJECTED: dict[str, dict[grpc.StatusCode, type[RpcError]]] = {
    "Step": {grpc.StatusCode.INVALID_ARGUMENT: RemoteActionError,
             grpc.StatusCode.FAILED_PRECONDITION: RemoteEnvStateError},
    "Reset": {grpc.StatusCode.INVALID_ARGUMENT: RemoteEnvStateError,
              grpc.StatusCode.FAILED_PRECONDITION: RemoteEnvStateError},
}

# How long a new client waits for its server to come up (servers compile kernels first).
DEFAULT_CONNECT_TIMEOUT_S = 30.0


def connect(address: str, cfg: RpcConfig, timeout_s: float, server: str = SIM_SERVER) -> grpc.Channel:
    """A channel to `address` that is ready, or ServerUnavailableError naming it and
    `server`, what should be serving there."""
    channel = open_channel(address, cfg)  # TLS and token per rpc.tls / rpc.token_file
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout_s)
    except grpc.FutureTimeoutError:
        channel.close()
        raise ServerUnavailableError(
            f"no skurl server answers at {address} within {timeout_s:g} s; "
            f"is {server} running there?", address, grpc.StatusCode.UNAVAILABLE,
        ) from None
    return channel


class RemoteEnv:
    """One shard of SKUs simulated by the EnvService at `address` (host:port)."""

    def __init__(self, address: str, cfg: RpcConfig | None = None, *, env_id: str | None = None,
                 connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S, lean: bool = False,
                 schema: ObsSchema | None = None, raw: bool = False) -> None:
        """`schema` (lean only): show the features in this schema, the server's fields at
        least as wide (the catalog's, when the shard's own is narrower). `raw` (lean only):
        the lean replies carry the raw state too (the cover action grid reads it)."""
        if (schema is not None or raw) and not lean:
            raise ValueError("RemoteEnv: a schema to show and raw replies need lean=True")
        self.address = address
        self.lean = lean
        self.raw = raw
        self.env_id = env_id or f"env-{uuid.uuid4().hex[:12]}"
        self._cfg = cfg or RpcConfig()
        self._channel: grpc.Channel | None = connect(address, self._cfg, connect_timeout_s)
        self._stub = pb_grpc.EnvServiceStub(self._channel)
        # Reset/Step replies stay bytes and are read by wire_fast (views, no extra copies).
        self._raw = {name: self._channel.unary_unary(
            f"/skurl.v1.EnvService/{name}", request_serializer=cls.SerializeToString,
            response_deserializer=None) for name, cls in (("Reset", pb.ResetRequest),
                                                          ("Step", pb.StepRequest))}
        info = self._call("GetInfo", pb.InfoRequest(env_id=self.env_id, open=True))
        self._num_skus = int(info.num_skus)
        self._schema = schema_from_wire(list(info.schema))
        rows = decode_batch(info.rows, what="GetInfo reply")
        # sku_ids: what collectors key per-SKU random draws on (same ids in every mode).
        self.sku_ids = np.array(rows["sku_id"], dtype=np.int64)
        self.catalog_rows = np.array(rows["catalog_row"], dtype=np.int64)
        self.shard = (int(info.shard_index), int(info.shard_count))
        self.days = int(info.days)
        self._decoder: ReplyDecoder | LeanReplyDecoder
        if lean:
            self._decoder = LeanReplyDecoder(self._num_skus, self._schema, schema, raw)
            self._schema = self._decoder.schema
        else:
            self._decoder = ReplyDecoder(self._num_skus, self._schema)
        # An Attach stream tells the server this client is alive: when the process dies
        # and its channel closes, the server frees the session (env_server.py).
        self._attach_stop = threading.Event()
        self._attach_call: Any = None
        threading.Thread(target=self._hold, name=f"attach-{self.env_id}", daemon=True).start()

    def _hold(self) -> None:
        while not self._attach_stop.is_set():
            try:
                self._attach_call = self._stub.Attach(pb.AttachRequest(env_id=self.env_id))
                for _ in self._attach_call:
                    pass
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                    return  # an older server: its sessions expire on idleness only
            except ValueError:
                return  # the channel was closed under us
            self._attach_stop.wait(1.0)  # closed by age, or the session lapsed: re-attach

    # ---------------------------------------------------------------- Env protocol
    @property
    def num_skus(self) -> int:
        return self._num_skus

    @property
    def schema(self) -> ObsSchema:
        return self._schema

    @property
    def metric_sums(self) -> dict[str, float] | None:
        """Lean: each DayMetrics field of the last step summed over the shard (else None)."""
        return self._decoder.sums if isinstance(self._decoder, LeanReplyDecoder) else None

    def reset(self, seed: int, episode: int = 0) -> Obs:
        reply = self._call("Reset", pb.ResetRequest(env_id=self.env_id, seed=int(seed),
                                                    episode=int(episode), lean=self.lean,
                                                    raw=self.raw, owed=True))
        return self._decoder.reset_reply(reply)

    def step(self, orders: np.ndarray) -> StepResult:
        arr = np.asarray(orders)
        if arr.dtype.kind not in "iuf":  # as VectorEnv: no bools, strings, objects
            raise ActionError(f"orders: dtype {arr.dtype}, expected a numeric (int or float) "
                              "array")
        if arr.dtype.name not in ORDER_DTYPES:
            arr = arr.astype(np.float64)  # float16, uint64: the server checks the values
        request = pb.StepRequest(env_id=self.env_id, lean=self.lean)
        encode_into(request.orders, {"orders": arr})
        return self._decoder.step_reply(self._call("Step", request))

    def info(self) -> dict[str, Any]:
        reply = self._call("GetInfo", pb.InfoRequest(env_id=self.env_id))
        out: dict[str, Any] = json.loads(reply.info_json or "{}")
        out["remote"] = {"address": self.address, "env_id": self.env_id,
                         "shard": list(self.shard), "sessions": list(reply.env_ids)}
        return out

    def close(self) -> None:
        """Free the session on the server (best effort) and the channel; idempotent."""
        if self._channel is None:
            return
        self._attach_stop.set()
        if self._attach_call is not None:
            self._attach_call.cancel()
        # The server may be gone or busy; its sessions die with it.
        with contextlib.suppress(grpc.RpcError):
            self._stub.Close(pb.CloseRequest(env_id=self.env_id),
                             timeout=min(self._cfg.timeout_s, 5.0))
        self._channel.close()
        self._channel = None

    def __enter__(self) -> RemoteEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, request: Any) -> Any:
        if self._channel is None:
            raise ServerUnavailableError(f"RemoteEnv for {self.address} is closed", self.address,
                                         None)
        try:
            call = self._raw.get(method) or getattr(self._stub, method)
            return call(request, timeout=self._cfg.timeout_s)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc, self.address, f"{method} (env {self.env_id})",
                                 _REJECTED.get(method)) from None
