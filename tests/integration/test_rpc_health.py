"""grpc.health.v1 on every skurl server, read by `probe` (the supervisor's check) over
loopback: SERVING while up, NOT_SERVING on shutdown, False for a server that is gone or
does not answer; a skurl server answers even while its handler threads are all stuck
(health runs on its own pool, issue 42 defect 5)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from skurl.catalog import load_catalog
from skurl.config import RpcConfig, load_config
from skurl.errors import ConfigError
from skurl.modes.decoupled.collector_server import CollectorServer, CollectorServicer
from skurl.rpc.env_server import serve_env
from skurl.rpc.health import NOT_SERVING, SERVING, Liveness, probe, service_name
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


class _PlainServer:
    """A bare grpc.server with the stock health servicer on its only handler thread: what
    a server without skurl's own health pool does (stands in for a frozen process)."""

    def __init__(self, add: Callable[[grpc.Server], None]) -> None:
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
        add(self._server)
        servicer = health.HealthServicer()
        servicer.set("", SERVING)
        health_pb2_grpc.add_HealthServicer_to_server(servicer, self._server)
        self.address = f"127.0.0.1:{self._server.add_insecure_port('127.0.0.1:0')}"
        self._server.start()

    def stop(self, grace: float) -> None:
        self._server.stop(grace).wait()


class HangingServer:
    """A server with one handler thread; `stuck()` holds that thread in a call until the
    block ends. `skurl=True`: a GrpcServer, whose health Check has its own pool; else a
    bare server where nothing else (a health Check included) is served meanwhile."""

    def __init__(self, skurl: bool = False) -> None:
        self._started, self._release = threading.Event(), threading.Event()

        def hang(request: bytes, context: grpc.ServicerContext) -> bytes:
            self._started.set()
            self._release.wait(30)
            return b""

        handler = grpc.method_handlers_generic_handler(
            "test.Hang", {"Wait": grpc.unary_unary_rpc_method_handler(hang)})
        add = lambda s: s.add_generic_rpc_handlers((handler,))  # noqa: E731
        self.server = GrpcServer(add, RPC, max_workers=1) if skurl else _PlainServer(add)
        self.address = self.server.address

    @contextmanager
    def stuck(self) -> Iterator[None]:
        self._started.clear()
        self._release.clear()
        with grpc.insecure_channel(self.address) as channel:
            call = channel.unary_unary("/test.Hang/Wait").future(b"", timeout=30.0)
            try:
                assert self._started.wait(10)
                yield
            finally:
                self._release.set()
            call.result()

    def stop(self) -> None:
        self._release.set()
        self.server.stop(0)


@pytest.fixture
def hanging() -> Iterator[HangingServer]:
    server = HangingServer()
    yield server
    server.stop()


def test_a_server_that_does_not_answer_fails_the_probe(hanging: HangingServer) -> None:
    assert probe(hanging.address, 10.0)
    with hanging.stuck():
        assert not probe(hanging.address, 1.0)  # the Check waits for a thread: timeout
    assert probe(hanging.address, 10.0)  # free again: serving


def test_a_skurl_server_answers_health_while_its_handler_threads_are_stuck() -> None:
    server = HangingServer(skurl=True)
    try:
        with server.stuck():
            assert probe(server.address, 5.0)  # health has threads of its own
    finally:
        server.stop()


def test_nothing_listening_is_false_not_an_error() -> None:
    server = WeightSyncServer(RPC)
    address = server.address
    server.stop(0)
    start = time.monotonic()
    assert probe(address, 5.0) is False
    assert time.monotonic() - start < 30  # refused, not a hang to the deadline


def test_liveness_flags_a_hung_server_after_consecutive_misses_only(hanging: HangingServer) -> None:
    live = Liveness(timeout_s=0.5, failures=2, interval_s=0.0)
    assert not live.stopped_answering("s", hanging.address)  # serving
    with hanging.stuck():
        assert not live.stopped_answering("s", hanging.address)  # one miss: not yet
        assert live.stopped_answering("s", hanging.address)  # two in a row: restart it
        assert not live.stopped_answering("s", hanging.address)  # counting afresh
    assert not live.stopped_answering("s", hanging.address)
    assert not live.stopped_answering("s", hanging.address)  # answering again: no misses


def test_liveness_leaves_a_restarted_process_alone_while_it_starts() -> None:
    server = WeightSyncServer(RPC)
    address = server.address
    server.stop(0)  # nothing listens there now
    live = Liveness(timeout_s=0.5, failures=1, interval_s=0.0)
    live.restarted("c0", hold_s=60.0)
    assert not live.stopped_answering("c0", address)  # held: not probed
    live.restarted("c0", hold_s=0.0)
    assert live.stopped_answering("c0", address)


@pytest.mark.parametrize("setting", ["deploy.health_interval_s=nan", "deploy.health_interval_s=0.01",
                                     "deploy.health_timeout_s=0", "deploy.health_failures=0"])
def test_bad_health_settings_name_the_key(setting: str) -> None:
    with pytest.raises(ConfigError, match=setting.split("=")[0]):
        load_config(None, [setting])
