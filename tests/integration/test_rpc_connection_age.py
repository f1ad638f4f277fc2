"""rpc.max_connection_age_s: servers close aged connections and clients carry on over new
ones (so long-running collectors rebalance), calls in flight finish within the grace, and
a weights Subscribe stream cut at max age resubscribes."""

from __future__ import annotations

import time

import grpc
import numpy as np
import pytest
import torch

from skurl.catalog import load_catalog
from skurl.config import RpcConfig, load_config
from skurl.errors import ConfigError
from skurl.rpc.env_client import RemoteEnv
from skurl.rpc.env_server import serve_env
from skurl.rpc.options import channel_options, server_options
from skurl.rpc.servicer_base import GrpcServer
from skurl.rpc.weights_server import WeightSyncServer
from skurl.sim.env import VectorEnv
from skurl.sync.grpc import GrpcWeightPublisher, GrpcWeightSubscriber

AGED = RpcConfig(timeout_s=3.0, max_connection_age_s=0.5, max_connection_age_grace_s=5.0)


def test_age_and_grace_are_server_options_from_config() -> None:
    opts = dict(server_options(AGED))
    assert opts["grpc.max_connection_age_ms"] == 500
    assert opts["grpc.max_connection_age_grace_ms"] == 5000
    assert "grpc.max_connection_age_ms" not in dict(channel_options(AGED))
    assert "grpc.max_connection_age_ms" not in dict(server_options(RpcConfig(max_connection_age_s=0)))
    # a call inside its deadline is never cut: the grace is at least rpc.timeout_s
    short = RpcConfig(timeout_s=90.0, max_connection_age_s=60.0, max_connection_age_grace_s=1.0)
    assert dict(server_options(short))["grpc.max_connection_age_grace_ms"] == 90_000


@pytest.mark.parametrize("setting", ["rpc.max_connection_age_s=nan", "rpc.max_connection_age_s=-1",
                                     "rpc.max_connection_age_grace_s=inf"])
def test_bad_age_settings_name_the_key(setting: str) -> None:
    with pytest.raises(ConfigError, match=setting.split("=")[0]):
        load_config(None, [setting])


class PeerServer:
    """Answers each call with the client's address as the server sees it (its port changes
    when the client opens a new connection); `sleep` holds a call that long first."""

    def __init__(self, cfg: RpcConfig) -> None:
        def peer(request: bytes, context: grpc.ServicerContext) -> bytes:
            time.sleep(float(request.decode() or 0))
            return context.peer().encode()

        handler = grpc.method_handlers_generic_handler(
            "test.Peer", {"Get": grpc.unary_unary_rpc_method_handler(peer)})
        self.server = GrpcServer(lambda s: s.add_generic_rpc_handlers((handler,)), cfg)

    def call(self, channel: grpc.Channel, sleep_s: float = 0.0) -> str:
        return channel.unary_unary("/test.Peer/Get")(str(sleep_s).encode(), timeout=30.0).decode()


def test_client_calls_go_on_over_new_connections_after_max_age() -> None:
    peer = PeerServer(AGED)
    try:
        with grpc.insecure_channel(peer.server.address, options=channel_options(AGED)) as ch:
            seen = []
            deadline = time.monotonic() + 30.0
            while len(set(seen)) < 3 and time.monotonic() < deadline:
                seen.append(peer.call(ch))  # raises if a call is lost to a closing connection
                time.sleep(0.05)
        assert len(set(seen)) >= 3, f"one connection for {len(seen)} calls: {set(seen)}"
    finally:
        peer.server.stop(0)


def test_a_call_in_flight_at_max_age_finishes_within_the_grace() -> None:
    peer = PeerServer(AGED)
    try:
        with grpc.insecure_channel(peer.server.address, options=channel_options(AGED)) as ch:
            first = peer.call(ch, sleep_s=2.0)  # outlives the 0.5 s age, within the 5 s grace
            assert first.startswith("ipv4:127.0.0.1:")
    finally:
        peer.server.stop(0)


def test_a_subscribe_stream_cut_at_max_age_resubscribes(caplog: pytest.LogCaptureFixture) -> None:
    # the server cuts a stream 0.3 s + 0.3 s after its connection opened
    server = WeightSyncServer(RpcConfig(timeout_s=0.3, max_connection_age_s=0.3,
                                        max_connection_age_grace_s=0.3))
    clients = RpcConfig(timeout_s=30.0)
    publisher = GrpcWeightPublisher(server.address, clients)
    subscriber = GrpcWeightSubscriber(server.address, clients)
    try:
        publisher.publish(1, {"w": torch.zeros(4)})
        assert subscriber.wait_for(1, 30.0)[0] == 1
        deadline = time.monotonic() + 30.0
        while subscriber.aged_out < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert subscriber.aged_out >= 2  # the server cut the stream, the client reopened it
        publisher.publish(2, {"w": torch.ones(4)})
        version, tensors = subscriber.wait_for(2, 30.0)
        assert version == 2 and torch.equal(tensors["w"], torch.ones(4))
        assert "Subscribe" not in caplog.text  # an expected cut is no warning
    finally:
        subscriber.close()
        publisher.close()
        server.stop(0)


def test_an_env_session_steps_on_across_connection_ages() -> None:
    """A collector's RemoteEnv outlives many connections: its session lives on the server,
    not on the connection, so an episode over several max ages equals the in-process one."""
    cfg = load_config(None, ["catalog.skus=20", "catalog.seed=2", "sim.days=12", "sim.threads=1"])
    catalog = load_catalog(cfg.catalog)
    rpc = RpcConfig(timeout_s=5.0, max_connection_age_s=0.2, max_connection_age_grace_s=5.0)
    server = serve_env(catalog, cfg.sim, rpc)
    try:
        with RemoteEnv(server.address, rpc) as env:
            local = VectorEnv(catalog, cfg.sim)
            env.reset(5), local.reset(5)
            orders = np.full(len(catalog), 3.0)
            for _ in range(cfg.sim.days):
                got, want = env.step(orders), local.step(orders)
                np.testing.assert_array_equal(got.reward, want.reward)
                time.sleep(0.15)  # the 12-day episode spans ~9 connection ages
    finally:
        server.stop(0)
