"""The standard gRPC health service (grpc.health.v1) on every skurl server, and its probe.

Every GrpcServer serves `grpc.health.v1.Health` next to its own service: SERVING for the
whole server ("") and for each service it hosts while it is up, NOT_SERVING from the
moment it starts to shut down. The Check handler runs on the server's own thread pool,
so a server whose handlers are all stuck does not answer it: `probe` then times out and
says False, the same as for a server that is gone. Standard tools (grpc_health_probe,
Kubernetes' grpc liveness probes) read the same service.
"""

from __future__ import annotations

from collections.abc import Iterable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from skurl.rpc.gen import skurl_pb2 as pb

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
OVERALL = ""  # the service name that stands for the whole server


def service_name(short: str) -> str:
    """The full name a health check asks about, e.g. EnvService -> skurl.v1.EnvService."""
    return pb.DESCRIPTOR.services_by_name[short].full_name


def add_health(server: grpc.Server, services: Iterable[str] = ()) -> health.HealthServicer:
    """Add the health service to `server` (before it starts); SERVING for "" and `services`."""
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    for name in (OVERALL, *services):
        servicer.set(name, SERVING)
    return servicer


def probe(address: str, timeout_s: float, service: str = OVERALL) -> bool:
    """One Check call to the server at host:port: True only if it answers SERVING within
    `timeout_s` (False when it refuses the connection, is shutting down, or hangs)."""
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout_s)
        except grpc.RpcError:
            return False
    return reply.status == SERVING
