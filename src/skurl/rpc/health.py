"""The standard gRPC health service (grpc.health.v1) on every skurl server, and its probe.

Every GrpcServer serves `grpc.health.v1.Health` next to its own service: SERVING for the
whole server ("") and for each service it hosts while it is up, NOT_SERVING from the
moment it starts to shut down. Check and Watch run on thread pools of their own (gRPC's
per-handler `experimental_thread_pool`), so a flood of calls or streams that holds every
handler thread of the server does not stop it from answering; a process that is gone
or frozen does not, and `probe` then says False. Standard tools (grpc_health_probe,
Kubernetes' grpc liveness probes) read the same service.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent import futures
from typing import TYPE_CHECKING, Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from skurl.rpc.gen import skurl_pb2 as pb

if TYPE_CHECKING:
    from skurl.config import RpcConfig

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
OVERALL = ""  # the service name that stands for the whole server


def service_name(short: str) -> str:
    """The full name a health check asks about, e.g. EnvService -> skurl.v1.EnvService."""
    return pb.DESCRIPTOR.services_by_name[short].full_name


HEALTH_SERVICE = "grpc.health.v1.Health"
CHECK_THREADS = 4  # Check calls answered at once (each returns at once)
WATCH_THREADS = 4  # Watch streams open at once (each holds a thread while it lasts)


def _on_pool(handler: Callable[..., Any], pool: futures.ThreadPoolExecutor) -> Callable[..., Any]:
    """`handler`, run by gRPC on `pool` instead of the server's pool."""

    def run(request: Any, context: grpc.ServicerContext) -> Any:
        return handler(request, context)

    run.experimental_thread_pool = pool  # type: ignore[attr-defined]
    return run


def add_health(server: grpc.Server, services: Iterable[str] = ()) -> health.HealthServicer:
    """Add the health service to `server` (before it starts), on its own thread pools;
    SERVING for "" and `services`."""
    servicer = health.HealthServicer()
    check_pool = futures.ThreadPoolExecutor(CHECK_THREADS, thread_name_prefix="health-check")
    watch_pool = futures.ThreadPoolExecutor(WATCH_THREADS, thread_name_prefix="health-watch")
    request = health_pb2.HealthCheckRequest.FromString
    reply = health_pb2.HealthCheckResponse.SerializeToString
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(HEALTH_SERVICE, {
        "Check": grpc.unary_unary_rpc_method_handler(
            _on_pool(servicer.Check, check_pool), request_deserializer=request,
            response_serializer=reply),
        "Watch": grpc.unary_stream_rpc_method_handler(
            _on_pool(servicer.Watch, watch_pool), request_deserializer=request,
            response_serializer=reply),
    }),))
    for name in (OVERALL, *services):
        servicer.set(name, SERVING)
    servicer.pools = (check_pool, watch_pool)  # type: ignore[attr-defined]  # shut down on stop
    return servicer


def probe(address: str, timeout_s: float, service: str = OVERALL, cfg: RpcConfig | None = None) -> bool:
    """One Check call to the server at host:port: True only if it answers SERVING within
    `timeout_s` (False when it refuses the connection, is shutting down, or hangs).
    `cfg` (RpcConfig): its rpc.tls for a server that requires TLS."""
    from skurl.rpc.security import open_channel

    channel = open_channel(address, cfg) if cfg is not None else grpc.insecure_channel(address)
    with channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout_s)
        except grpc.RpcError:
            return False
    return reply.status == SERVING


class Liveness:
    """A supervisor's view of its children: `stopped_answering(name, address)` probes each
    at most every `interval_s` and says True once `failures` probes in a row failed (then
    starts counting afresh); `restarted(name, hold_s)` leaves a new process alone while it
    starts. Probes block the caller up to `timeout_s` each."""

    def __init__(self, timeout_s: float, failures: int, interval_s: float, rpc: RpcConfig | None = None) -> None:
        self.timeout_s, self.failures, self.interval_s = timeout_s, failures, interval_s
        self.rpc = rpc  # RpcConfig of the probes (TLS), None: plain channels
        self._misses: dict[str, int] = {}
        self._next: dict[str, float] = {}

    def stopped_answering(self, name: str, address: str) -> bool:
        now = time.monotonic()
        if now < self._next.get(name, 0.0):
            return False
        self._next[name] = now + self.interval_s
        if probe(address, self.timeout_s, cfg=self.rpc):
            self._misses[name] = 0
            return False
        self._misses[name] = self._misses.get(name, 0) + 1
        if self._misses[name] < self.failures:
            return False
        self._misses[name] = 0
        return True

    def restarted(self, name: str, hold_s: float) -> None:
        """No probe of `name` for `hold_s` seconds (its start-up), and no misses carried over."""
        self._misses[name] = 0
        self._next[name] = time.monotonic() + hold_s
