"""One RpcConfig sets both ends: same message limits, keepalive the server tolerates."""

from __future__ import annotations

import pytest

from skurl.config import RpcConfig
from skurl.errors import UserError
from skurl.rpc.options import channel_options, max_message_bytes, server_options
from skurl.rpc.servicer_base import GrpcServer


def test_one_value_sets_client_and_server_limits() -> None:
    cfg = RpcConfig(max_message_mb=64)
    for opts in (dict(channel_options(cfg)), dict(server_options(cfg))):
        assert opts["grpc.max_send_message_length"] == 64 * 2**20
        assert opts["grpc.max_receive_message_length"] == 64 * 2**20
    assert max_message_bytes(RpcConfig(max_message_mb=2047)) == 2047 * 2**20 < 2**31


def test_server_accepts_pings_as_often_as_clients_send_them() -> None:
    cfg = RpcConfig(keepalive_s=20)
    client, server = dict(channel_options(cfg)), dict(server_options(cfg))
    assert client["grpc.keepalive_time_ms"] == server["grpc.keepalive_time_ms"] == 20_000
    assert client["grpc.keepalive_permit_without_calls"] == 1
    assert server["grpc.http2.min_ping_interval_without_data_ms"] <= client["grpc.keepalive_time_ms"]
    assert client["grpc.keepalive_timeout_ms"] >= 10_000


def test_keepalive_off() -> None:
    opts = dict(server_options(RpcConfig(keepalive_s=0)))
    assert not any("keepalive" in k or "ping" in k for k in opts)


def test_a_second_server_cannot_take_a_live_servers_port() -> None:
    """SO_REUSEPORT is off: a server on a port another one holds is a clear error, never a
    silent second listener the kernel would hand half the clients to."""
    first = GrpcServer(lambda server: None, RpcConfig())
    try:
        with pytest.raises(UserError, match=f"cannot listen on 127.0.0.1:{first.port}"):
            GrpcServer(lambda server: None, RpcConfig(), port=first.port)
    finally:
        first.stop(0)
