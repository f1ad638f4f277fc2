"""What every skurl servicer shares: exceptions -> status codes, and a server handle.

A handler raises skurl errors; `rpc_method` turns them into a gRPC status with a one-line
detail and the server goes on serving: WireError and other UserErrors ->
INVALID_ARGUMENT, sim's EnvStateError -> FAILED_PRECONDITION, CapacityError ->
RESOURCE_EXHAUSTED, NotFoundError -> NOT_FOUND, anything else -> INTERNAL (logged with its
traceback here, never sent). Handlers raise rather than call context.abort: abort raises
an exception of its own, which this wrapper would turn into INTERNAL.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Sequence
from concurrent import futures
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
import numpy as np

from skurl.config import RpcConfig
from skurl.errors import UserError
from skurl.rpc.errors import CapacityError
from skurl.rpc.health import add_health
from skurl.rpc.options import max_message_bytes, server_options
from skurl.rpc.security import check_listen, server_credentials, server_interceptors
from skurl.sim.api import EnvStateError

if TYPE_CHECKING:
    from google.protobuf.message import Message

log = logging.getLogger("skurl.rpc")
F = TypeVar("F", bound=Callable[..., Any])


def status_for(exc: BaseException) -> grpc.StatusCode:
    code = getattr(exc, "grpc_code", None)  # WireError, CapacityError, NotFoundError
    if isinstance(code, grpc.StatusCode):
        return code
    if isinstance(exc, EnvStateError):
        return grpc.StatusCode.FAILED_PRECONDITION
    if isinstance(exc, UserError):
        return grpc.StatusCode.INVALID_ARGUMENT
    return grpc.StatusCode.INTERNAL


def rpc_method(method: F) -> F:
    """Wrap a servicer method so no exception escapes as anything but a clean status."""

    @functools.wraps(method)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return method(self, request, context)
        except Exception as exc:  # every failure becomes a status; the server keeps serving
            code = status_for(exc)
            if code == grpc.StatusCode.INTERNAL:
                log.exception("%s failed", method.__name__)
                detail = f"{method.__name__}: internal error {type(exc).__name__}: {exc}"
            else:
                detail = str(exc)
            context.abort(code, " ".join(detail.split())[:2000])

    return wrapper  # type: ignore[return-value]


def check_reply_size(reply: bytes | Message, cfg: RpcConfig, what: str) -> None:
    """A clear RESOURCE_EXHAUSTED before gRPC drops an over-limit reply with a terse one."""
    size = len(reply) if isinstance(reply, bytes) else reply.ByteSize()
    limit = max_message_bytes(cfg)
    if size > limit:
        raise CapacityError(f"{what} reply is {size / 2**20:.1f} MiB, over rpc.max_message_mb="
                            f"{cfg.max_message_mb}; raise it on both sides or use more shards")


def to_json(obj: object) -> str:
    """JSON of an info() dict that may hold numpy scalars and arrays."""

    def default(value: object) -> object:
        if isinstance(value, np.generic):
            return value.item()
        if isinstance(value, np.ndarray):
            return value.tolist()
        if isinstance(value, (set, frozenset, tuple)):
            return list(value)
        return str(value)

    return json.dumps(obj, default=default)


class GrpcServer:
    """A started grpc.server with its bound address; `stop()` is graceful and idempotent.

    It also serves grpc.health.v1 (rpc/health.py): SERVING for "" and `services` (full
    names, e.g. skurl.v1.EnvService) until `stop()` begins."""

    def __init__(self, add_servicers: Callable[[grpc.Server], None], cfg: RpcConfig,
                 host: str = "127.0.0.1", port: int = 0, max_workers: int = 16,
                 services: Sequence[str] = ()) -> None:
        check_listen(host, cfg)
        creds = server_credentials(cfg)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers),
                                   options=server_options(cfg), interceptors=server_interceptors(cfg))
        add_servicers(self._server)
        self.health = add_health(self._server, services)
        target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            bound = (self._server.add_secure_port(target, creds) if creds is not None
                     else self._server.add_insecure_port(target))
        except RuntimeError:
            bound = 0
        if not bound:
            raise UserError(f"cannot listen on {target} (port in use or address not local)")
        self.host = host
        self.port = bound
        self.address = f"[{host}]:{bound}" if ":" in host else f"{host}:{bound}"
        self._server.start()
        self._stopped = False

    def stop(self, grace_s: float = 2.0) -> None:
        if not self._stopped:
            self._stopped = True
            self.health.enter_graceful_shutdown()  # NOT_SERVING while calls drain
            self._server.stop(grace_s).wait()
            for pool in getattr(self.health, "pools", ()):
                pool.shutdown(wait=False)

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until the server stops (True) or `timeout_s` passes (False)."""
        timed_out = self._server.wait_for_termination(timeout_s)
        return not timed_out

    def __enter__(self) -> GrpcServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
