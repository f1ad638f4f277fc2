"""grpc.health.v1 on every skurl server, read by `probe` (the supervisor's check) over
loopback: SERVING while up, NOT_SERVING on shutdown, False for a server that is gone or
whose handler threads are all stuck."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from skurl.catalog import load_catalog
from skurl.config import RpcConfig, load_config
from skurl.rpc.collector_server import CollectorServer, CollectorServicer
from skurl.rpc.env_server import serve_env
from skurl.rpc.health import NOT_SERVING, SERVING, probe, service_name
from skurl.rpc.servicer_base import GrpcServer
from skurl.rpc.weights_server import WeightSyncServer

RPC = RpcConfig(timeout_s=30.0)


def _env_server() -> GrpcServer:
    cfg = load_config(None, ["catalog.skus=20", "catalog.seed=1", "sim.days=3", "sim.threads=1"])
    return serve_env(load_catalog(cfg.catalog), cfg.sim, RPC)


SERVERS: dict[str, Callable[[], GrpcServer]] = {
    "EnvService": _env_server,
    "CollectorService": lambda: CollectorServer(CollectorServicer("c0", None, RPC), RPC),
    "WeightSyncService": lambda: WeightSyncServer(RPC),
}


@pytest.mark.parametrize("service", sorted(SERVERS))
def test_every_server_answers_serving_then_not_once_stopped(service: str) -> None:
    server = SERVERS[service]()
    try:
        assert probe(server.address, 10.0)
        assert probe(server.address, 10.0, service_name(service))
        assert not probe(server.address, 10.0, "skurl.v1.NoSuchService")  # NOT_FOUND
    finally:
        server.stop(0)
    assert not probe(server.address, 2.0)


def test_a_watcher_sees_not_serving_when_shutdown_begins() -> None:
    server = WeightSyncServer(RPC)
    with grpc.insecure_channel(server.address) as channel:
        watch = health_pb2_grpc.HealthStub(channel).Watch(
            health_pb2.HealthCheckRequest(service=""), timeout=20.0)
        assert next(watch).status == SERVING
        stopper = threading.Thread(target=server.stop, args=(1.0,))
        stopper.start()
        assert next(watch).status == NOT_SERVING
        stopper.join(timeout=20)


def _hanging_server(started: threading.Event, release: threading.Event) -> GrpcServer:
    """A server with one handler thread and a method that holds it until `release`."""

    def hang(request: bytes, context: grpc.ServicerContext) -> bytes:
        started.set()
        release.wait(30)
        return b""

    handler = grpc.method_handlers_generic_handler(
        "test.Hang", {"Wait": grpc.unary_unary_rpc_method_handler(hang)})
    return GrpcServer(lambda s: s.add_generic_rpc_handlers((handler,)), RPC, max_workers=1)


def test_a_server_whose_handler_threads_are_stuck_fails_the_probe() -> None:
    started, release = threading.Event(), threading.Event()
    server = _hanging_server(started, release)
    try:
        assert probe(server.address, 10.0)
        with grpc.insecure_channel(server.address) as channel:
            call = channel.unary_unary("/test.Hang/Wait").future(b"", timeout=30.0)
            assert started.wait(10)
            assert not probe(server.address, 1.0)  # the Check waits for a thread: timeout
            release.set()
            call.result()
        assert probe(server.address, 10.0)  # free again: serving
    finally:
        release.set()
        server.stop(0)


def test_nothing_listening_is_false_not_an_error() -> None:
    server = WeightSyncServer(RPC)
    address = server.address
    server.stop(0)
    start = time.monotonic()
    assert probe(address, 5.0) is False
    assert time.monotonic() - start < 30  # refused, not a hang to the deadline

