"""EnvService: one server simulates one shard of the catalog for several sessions.

Each session (env id, e.g. one per collector) owns an env over the shard: Reset opens it,
Step needs a Reset first (FAILED_PRECONDITION) and a known id (INVALID_ARGUMENT), Close
frees it; GetInfo with `open` is the client's handshake (size, schema, row ids). Reset with
lean=true makes replies lean until the next Reset (env_wire.py: features as a delta).
A session without a call for rpc.session_idle_s is closed, and so is one whose Attach
streams (its client's channel) ended; malformed requests are INVALID_ARGUMENT and never
change a session. More: docs/internals.md (rpc/env_server.py)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import grpc
import numpy as np

from skurl.buffer.obs_delta import FeatureDeltaEncoder
from skurl.config import RpcConfig, SimConfig
from skurl.errors import UserError
from skurl.rpc.codec import decode_batch, encode_into
from skurl.rpc.env_wire import (
    check_orders,
    encode_lean_reset_reply,
    encode_lean_step_reply,
    encode_reset_reply,
    encode_step_reply,
    orders_spec,
    schema_to_wire,
)
from skurl.rpc.errors import CapacityError, WireError
from skurl.rpc.feature_delta import warm_up as warm_up_delta
from skurl.rpc.gen import skurl_pb2 as pb
from skurl.rpc.gen import skurl_pb2_grpc as pb_grpc
from skurl.rpc.health import service_name
from skurl.rpc.servicer_base import GrpcServer, check_reply_size, rpc_method, to_json
from skurl.sim.api import Env, EnvStateError

if TYPE_CHECKING:
    from prometheus_client import Histogram

    from skurl.catalog.partition import Method
    from skurl.catalog.schema import Catalog

_ENV_ID = re.compile(r"[A-Za-z0-9_.:@-]{1,128}")
# A session whose client's Attach streams all ended is closed after this long without a
# call or a new Attach (a live client re-attaches within about a second).
DETACH_GRACE_S = 5.0
_ATTACH_POLL_S = 0.5
MAX_ATTACH = 2  # Attach streams per session (each holds a handler thread)


@dataclass(frozen=True)
class ShardInfo:
    """Which rows of the catalog a server simulates: shard `index` of `count`."""

    index: int
    count: int
    sku_id: np.ndarray  # int64 [N]
    catalog_rows: np.ndarray  # int64 [N], row of each SKU in the full catalog
    days: int


@dataclass
class _Session:
    env: Env
    lock: threading.Lock = field(default_factory=threading.Lock)
    state: str = "new"  # new (needs Reset) | running | done (episode over, needs Reset)
    day: int = 0
    lean: bool = False  # the episode's replies are lean (its Reset asked)
    raw: bool = False  # lean replies also carry the raw state (its Reset asked)
    owed: bool = False  # replies carry owed where the env has one (its Reset asked)
    delta: FeatureDeltaEncoder | None = None  # lean: the features last sent
    used: float = field(default_factory=time.monotonic)  # last call (monotonic seconds)
    attached: int = 0  # Attach streams open
    detached: float | None = None  # when the last Attach stream ended (None: never attached)
    closed: bool = False

    def touch(self) -> None:
        self.used = time.monotonic()

    def expired(self, now: float, idle_s: float) -> bool:
        """Idle too long, or its client's channel gone (no Attach since DETACH_GRACE_S)."""
        if self.lock.locked():
            return False  # a call is running on it
        if idle_s > 0 and now - self.used > idle_s:
            return True
        return (self.attached == 0 and self.detached is not None
                and now - max(self.detached, self.used) > DETACH_GRACE_S)

    def reset_delta(self, rows: int, dim: int) -> FeatureDeltaEncoder:
        if self.delta is None or self.delta.shape != (rows, dim):
            self.delta = FeatureDeltaEncoder(rows, dim)
        self.delta.reset()
        return self.delta


def _step_histogram() -> Histogram | None:
    """sim_step_duration_seconds when telemetry is installed (imported lazily: optional)."""
    try:
        from skurl.telemetry.metrics import get_metrics
    except ImportError:
        return None
    return get_metrics().sim_step_duration_seconds


class EnvServicer(pb_grpc.EnvServiceServicer):
    def __init__(self, make_env: Callable[[], Env], shard: ShardInfo, cfg: RpcConfig,
                 max_sessions: int = 8) -> None:
        self._stopping = False
        self._make_env = make_env
        self._shard = shard
        self._cfg = cfg
        self._max_sessions = max_sessions
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()
        # One simulator call at a time across sessions: each already uses every core, and
        # numba's workqueue threading layer (the fallback without OpenMP/TBB) aborts the
        # process when two threads launch parallel kernels at once.
        self._sim_lock = threading.Lock()
        # Built and stepped once now, so a bad catalog fails at start-up and the kernels
        # are compiled before the first client waits; handed to the first session.
        self._spare: Env | None = make_env()
        self._spare.reset(0, 0)
        self._spare.step(np.zeros(self._spare.num_skus))
        warm_up_delta()
        self.num_skus = self._spare.num_skus
        self.schema = self._spare.schema
        self._orders_spec = orders_spec(self.num_skus)

    # ---------------------------------------------------------------- sessions
    def _open(self, env_id: str) -> _Session:
        _check_env_id(env_id)
        self._expire()
        with self._lock:
            session = self._sessions.get(env_id)
            if session is not None:
                session.touch()
                return session
            if len(self._sessions) >= self._max_sessions:
                raise CapacityError(f"shard {self._where()} already holds {self._max_sessions} "
                                    f"sessions; close one (Close) before opening '{env_id}'")
            if self._spare is not None:
                env, self._spare = self._spare, None
            else:
                env = self._make_env()
            session = self._sessions[env_id] = _Session(env)
            return session

    def _get(self, env_id: str) -> _Session:
        _check_env_id(env_id)
        with self._lock:
            session = self._sessions.get(env_id)
        if session is None:
            raise WireError(f"unknown env id '{env_id}' on shard {self._where()} "
                            f"(open sessions: {', '.join(sorted(self._sessions)) or 'none'}); "
                            "call Reset or GetInfo(open=true) first")
        session.touch()
        return session

    def _expire(self) -> None:
        """Close the sessions of clients that left (idle, or their channel closed)."""
        now, idle_s = time.monotonic(), self._cfg.session_idle_s
        with self._lock:
            gone = [k for k, s in self._sessions.items() if s.expired(now, idle_s)]
            sessions = [self._sessions.pop(k) for k in gone]
        for s in sessions:
            self._release(s)

    @staticmethod
    def _release(session: _Session) -> None:
        with session.lock:
            session.closed = True
            session.env.close()

    def _where(self) -> str:
        return f"{self._shard.index}/{self._shard.count}"

    def close_all(self) -> None:
        with self._lock:
            sessions, self._sessions = list(self._sessions.values()), {}
            spare, self._spare = self._spare, None
        self._stopping = True
        for s in sessions:
            self._release(s)
        if spare is not None:
            spare.close()

    # ---------------------------------------------------------------- RPCs
    @rpc_method
    def GetInfo(self, request: pb.InfoRequest, context: grpc.ServicerContext) -> pb.InfoReply:
        info_json = "{}"
        if request.env_id:
            session = self._open(request.env_id) if request.open else self._get(request.env_id)
            with session.lock:
                info_json = to_json(session.env.info())
        shard = self._shard
        self._expire()
        with self._lock:
            env_ids = sorted(self._sessions)
        reply = pb.InfoReply(num_skus=self.num_skus, schema=schema_to_wire(self.schema),
                             shard_index=shard.index, shard_count=shard.count,
                             info_json=info_json, env_ids=env_ids, days=shard.days)
        encode_into(reply.rows, {"sku_id": shard.sku_id, "catalog_row": shard.catalog_rows})
        return reply

    # Reset and Step return their reply already serialized (wire_fast.py): a ResetReply /
    # StepReply in protobuf wire format, written without the runtime's extra copies.
    @rpc_method
    def Reset(self, request: pb.ResetRequest, context: grpc.ServicerContext) -> bytes:
        if request.seed < 0 or request.episode < 0:
            raise WireError(f"Reset request: seed {request.seed}, episode {request.episode}; "
                            "expected integers >= 0")
        session = self._open(request.env_id)
        with session.lock:
            _check_open(session, request.env_id)
            session.state = "new"  # stays so if reset fails
            with self._sim_lock:
                obs = session.env.reset(int(request.seed), int(request.episode))
            session.state, session.day, session.lean = "running", int(obs.raw.day), request.lean
            session.raw, session.owed = request.raw, request.owed
            if request.lean:
                reply = encode_lean_reset_reply(obs, session.reset_delta(*obs.features.shape), request.raw,
                                                request.owed)
            else:
                reply = encode_reset_reply(obs, request.owed)
        check_reply_size(reply, self._cfg, "Reset")
        return reply

    @rpc_method
    def Step(self, request: pb.StepRequest, context: grpc.ServicerContext) -> bytes:
        session = self._get(request.env_id)
        orders = decode_batch(request.orders, self._orders_spec, what="Step request")["orders"]
        check_orders(orders, self.num_skus)
        with session.lock:
            _check_open(session, request.env_id)
            if session.state != "running":
                why = "has not been reset" if session.state == "new" else (
                    f"has finished its episode ({session.day} days)")
                raise EnvStateError(f"env '{request.env_id}' on shard {self._where()} {why}; "
                                    "call Reset before Step")
            if request.lean != session.lean:
                raise EnvStateError(f"env '{request.env_id}' on shard {self._where()}: Step with "
                                    f"lean={request.lean} in an episode reset with "
                                    f"lean={session.lean}; ask as the Reset did")
            start = time.perf_counter()
            try:
                with self._sim_lock:
                    result = session.env.step(orders)
            except UserError:
                raise  # the env refused the orders before simulating: state unchanged
            except Exception:
                session.state = "new"  # state unknown after a crash midway: needs a Reset
                raise
            seconds = time.perf_counter() - start
            session.day = int(result.obs.raw.day)
            session.state = "done" if result.done else "running"
            if session.lean:
                assert session.delta is not None
                reply = encode_lean_step_reply(result, session.delta, session.raw, session.owed)
            else:
                reply = encode_step_reply(result, session.owed)
        histogram = _step_histogram()
        if histogram is not None:
            histogram.observe(seconds)
        check_reply_size(reply, self._cfg, "Step")
        return reply

    @rpc_method
    def Close(self, request: pb.CloseRequest, context: grpc.ServicerContext) -> pb.CloseReply:
        _check_env_id(request.env_id)
        with self._lock:
            session = self._sessions.pop(request.env_id, None)
        if session is None:
            return pb.CloseReply(closed=False)
        self._release(session)
        return pb.CloseReply(closed=True)

    def Attach(self, request: pb.AttachRequest, context: grpc.ServicerContext) -> Iterator[pb.AttachReply]:
        """Hold the session while the stream lasts (its end marks the client gone)."""
        try:
            session = self._get(request.env_id)
        except WireError as exc:
            context.abort(exc.grpc_code, str(exc))
        with self._lock:
            if session.attached >= MAX_ATTACH:
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                              f"env '{request.env_id}' already has {MAX_ATTACH} Attach streams")
            session.attached += 1

        def detach() -> None:
            with self._lock:
                session.attached -= 1
                session.detached = time.monotonic()

        if not context.add_callback(detach):
            detach()
        return self._held(session, context)

    def _held(self, session: _Session, context: grpc.ServicerContext) -> Iterator[pb.AttachReply]:
        while context.is_active() and not session.closed and not self._stopping:
            time.sleep(_ATTACH_POLL_S)
        return
        yield  # a stream that sends nothing


def _check_open(session: _Session, env_id: str) -> None:
    if session.closed:  # closed (expired) while this call waited for it
        raise WireError(f"env '{env_id}' was closed; open it again (Reset or GetInfo(open=true))")


def _check_env_id(env_id: str) -> None:
    if not _ENV_ID.fullmatch(env_id):
        shown = env_id[:40] + ("..." if len(env_id) > 40 else "")
        raise WireError(f"env id {shown!r} is not valid (expected 1-128 characters of letters, "
                        "digits and _ . : @ -)")


def _raw(reply: bytes) -> bytes:
    return reply


def env_service_handler(servicer: EnvServicer) -> grpc.GenericRpcHandler:
    """The generated registration, except that Reset/Step replies are already bytes."""
    unary = grpc.unary_unary_rpc_method_handler
    return grpc.method_handlers_generic_handler("skurl.v1.EnvService", {
        "GetInfo": unary(servicer.GetInfo, request_deserializer=pb.InfoRequest.FromString,
                         response_serializer=pb.InfoReply.SerializeToString),
        "Reset": unary(servicer.Reset, request_deserializer=pb.ResetRequest.FromString,
                       response_serializer=_raw),
        "Step": unary(servicer.Step, request_deserializer=pb.StepRequest.FromString,
                      response_serializer=_raw),
        "Close": unary(servicer.Close, request_deserializer=pb.CloseRequest.FromString,
                       response_serializer=pb.CloseReply.SerializeToString),
        "Attach": grpc.unary_stream_rpc_method_handler(
            servicer.Attach, request_deserializer=pb.AttachRequest.FromString,
            response_serializer=pb.AttachReply.SerializeToString),
    })


class EnvServer(GrpcServer):
    """A running EnvService; `servicer` holds the sessions."""

    def __init__(self, servicer: EnvServicer, cfg: RpcConfig, host: str = "127.0.0.1",
                 port: int = 0) -> None:
        self.servicer = servicer
        super().__init__(lambda s: s.add_generic_rpc_handlers((env_service_handler(servicer),)),
                         # a call and MAX_ATTACH streams per session, and room to refuse more
                         cfg, host, port, max_workers=(1 + MAX_ATTACH) * servicer._max_sessions + 4,
                         services=[service_name("EnvService")])

    def stop(self, grace_s: float = 2.0) -> None:
        super().stop(grace_s)
        self.servicer.close_all()


def serve_env(catalog: Catalog, sim_cfg: SimConfig, rpc_cfg: RpcConfig, *,
              shard: tuple[int, int] = (0, 1), catalog_rows: np.ndarray | None = None,
              host: str = "127.0.0.1", port: int = 0, max_sessions: int = 8,
              min_widths: tuple[int, int] = (0, 0)) -> EnvServer:
    """Start an EnvService over `catalog` (already the shard's rows) with VectorEnvs at
    least `min_widths` wide: the whole catalog's (sim/layout.catalog_widths), so every
    shard shows the catalog's schema (a shard's own maxima can be narrower)."""
    from skurl.sim.env import VectorEnv

    n = len(catalog)
    rows = np.arange(n, dtype=np.int64) if catalog_rows is None else np.asarray(catalog_rows,
                                                                              np.int64)
    info = ShardInfo(index=shard[0], count=shard[1], sku_id=np.asarray(catalog.sku_id, np.int64),
                     catalog_rows=rows, days=sim_cfg.days)
    servicer = EnvServicer(lambda: VectorEnv(catalog, sim_cfg, min_widths), info, rpc_cfg, max_sessions)
    return EnvServer(servicer, rpc_cfg, host, port)


def serve_shards(catalog: Catalog, sim_cfg: SimConfig, rpc_cfg: RpcConfig, count: int,
                 method: Method = "round_robin_cost", *, host: str = "127.0.0.1",
                 base_port: int = 0, max_sessions: int = 8) -> list[EnvServer]:
    """`count` EnvServers in this process, one per shard of `catalog` (groups kept
    together); ports base_port + i, or free ports when base_port is 0. For tests and
    single-machine decoupled runs; across machines run `skurl serve-sim` on each."""
    from skurl.catalog.partition import partition
    from skurl.sim.layout import catalog_widths

    servers: list[EnvServer] = []
    try:
        for i, rows in enumerate(partition(catalog, count, method)):
            port = base_port + i if base_port else 0
            servers.append(serve_env(catalog.subset(rows), sim_cfg, rpc_cfg, shard=(i, count),
                                     catalog_rows=rows, host=host, port=port,
                                     max_sessions=max_sessions, min_widths=catalog_widths(catalog)))
    except BaseException:
        for s in servers:
            s.stop(0)
        raise
    return servers
