"""Issue 42, defect 7: sim-server sessions of clients that left do not hold the server's
session slots: closed after rpc.session_idle_s without calls, and soon after the client's
channel closes (its Attach stream ends: a SIGKILLed collector), while a live client that
is merely idle keeps its session."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from skurl.catalog import load_catalog
from skurl.config import RpcConfig, load_config
from skurl.rpc import env_server
from skurl.rpc.env_client import RemoteEnv
from skurl.rpc.env_server import EnvServer, serve_env
from skurl.rpc.gen import skurl_pb2 as pb
from skurl.rpc.gen import skurl_pb2_grpc as pb_grpc
from skurl.rpc.options import channel_options

SRC = Path(__file__).resolve().parents[2] / "src"


def _serve(rpc: RpcConfig) -> EnvServer:
    cfg = load_config(None, ["catalog.skus=12", "catalog.seed=1", "sim.days=3", "sim.threads=1"])
    return serve_env(load_catalog(cfg.catalog), cfg.sim, rpc, max_sessions=8)


@pytest.fixture
def idle_server() -> Iterator[EnvServer]:
    server = _serve(RpcConfig(timeout_s=30.0, session_idle_s=1.0))
    yield server
    server.stop(0)


def _env_ids(stub: pb_grpc.EnvServiceStub) -> list[str]:
    return list(stub.GetInfo(pb.InfoRequest(), timeout=10).env_ids)


def test_idle_sessions_expire_and_free_their_slots(idle_server: EnvServer) -> None:
    channel = grpc.insecure_channel(idle_server.address, options=channel_options(RpcConfig()))
    stub = pb_grpc.EnvServiceStub(channel)
    for i in range(8):  # crashed clients: opened, never closed, never attached
        stub.GetInfo(pb.InfoRequest(env_id=f"crashed-{i}", open=True), timeout=10)
    with pytest.raises(grpc.RpcError) as info:
        stub.GetInfo(pb.InfoRequest(env_id="new", open=True), timeout=10)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    time.sleep(1.5)  # > rpc.session_idle_s
    assert _env_ids(stub) == []
    stub.Reset(pb.ResetRequest(env_id="new", seed=1), timeout=10)  # a slot is free again
    assert _env_ids(stub) == ["new"]
    channel.close()


def test_bad_session_idle_setting_names_the_key() -> None:
    from skurl.errors import ConfigError

    for bad in ("-1", "nan", "0.5"):
        with pytest.raises(ConfigError, match=r"rpc\.session_idle_s"):
            load_config(None, [f"rpc.session_idle_s={bad}"])


_CLIENT = """
import sys, time
from skurl.config import RpcConfig
from skurl.rpc.env_client import RemoteEnv
env = RemoteEnv(sys.argv[1], RpcConfig(timeout_s=30.0), env_id="doomed")
env.reset(1, 0)
print("ready", flush=True)
time.sleep(120)
"""


def test_a_killed_clients_session_is_released_a_live_idle_one_kept(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(env_server, "DETACH_GRACE_S", 1.0)
    server = _serve(RpcConfig(timeout_s=30.0))  # idle expiry: the default hour
    live = RemoteEnv(server.address, RpcConfig(timeout_s=30.0), env_id="live")
    child = subprocess.Popen([sys.executable, "-c", _CLIENT, server.address],
                             stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(SRC)})
    channel = grpc.insecure_channel(server.address, options=channel_options(RpcConfig()))
    stub = pb_grpc.EnvServiceStub(channel)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        assert _env_ids(stub) == ["doomed", "live"]
        time.sleep(2.0)  # beyond the grace: attached sessions stay
        assert _env_ids(stub) == ["doomed", "live"]
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        deadline = time.monotonic() + 20
        while "doomed" in _env_ids(stub) and time.monotonic() < deadline:
            time.sleep(0.25)
        assert _env_ids(stub) == ["live"]
        live.reset(2, 0)  # the live client still works
    finally:
        child.kill()
        live.close()
        channel.close()
        server.stop(0)
