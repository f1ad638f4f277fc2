"""Mutual TLS and the bearer token on every skurl service (issue 42, docs/security.md):
certificates from scripts/dev_certs.sh; a client without a certificate, with another CA's
certificate, over plaintext, or without the token is refused by each service, and skurl's
own clients (RemoteEnv, the weight publisher/subscriber, CollectorClient, the health
probe) work through it."""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import torch

from skurl.catalog import load_catalog
from skurl.config import RpcConfig, load_config
from skurl.config.services import TlsConfig
from skurl.errors import ConfigError
from skurl.modes.decoupled.collector_client import CollectorClient
from skurl.modes.decoupled.collector_server import CollectorServer, CollectorServicer
from skurl.rpc.env_client import RemoteEnv
from skurl.rpc.env_server import serve_env
from skurl.rpc.gen import skurl_pb2 as pb
from skurl.rpc.gen import skurl_pb2_grpc as pb_grpc
from skurl.rpc.health import probe
from skurl.rpc.servicer_base import GrpcServer
from skurl.rpc.weights_server import WeightSyncServer
from skurl.sync.grpc import GrpcWeightPublisher, GrpcWeightSubscriber

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "dev_certs.sh"
T = 10.0


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    ours, theirs = tmp_path_factory.mktemp("ca1"), tmp_path_factory.mktemp("ca2")
    subprocess.run(["bash", str(SCRIPT), str(ours), "skurl"], check=True, capture_output=True)
    subprocess.run(["bash", str(SCRIPT), str(theirs), "intruder"], check=True, capture_output=True)
    token = ours / "token"
    token.write_text("s3cret-token\n")
    return {"dir": ours, "other": theirs, "token": token}


def secure_cfg(pki: dict[str, Path], token: bool = True) -> RpcConfig:
    d = pki["dir"]
    return RpcConfig(timeout_s=30.0, tls=TlsConfig(cert=str(d / "skurl.pem"), key=str(d / "skurl.key"),
                                                   ca=str(d / "ca.pem")),
                     token_file=str(pki["token"]) if token else "")


def _env() -> Callable[[RpcConfig], GrpcServer]:
    def start(rpc: RpcConfig) -> GrpcServer:
        cfg = load_config(None, ["catalog.skus=8", "catalog.seed=1", "sim.days=3", "sim.threads=1"])
        return serve_env(load_catalog(cfg.catalog), cfg.sim, rpc)
    return start


SERVICES: dict[str, tuple[Callable[[RpcConfig], GrpcServer], Callable[[grpc.Channel], Any]]] = {
    "EnvService": (_env(), lambda ch: pb_grpc.EnvServiceStub(ch).GetInfo(pb.InfoRequest(), timeout=T)),
    "WeightSyncService": (lambda rpc: WeightSyncServer(rpc),
                          lambda ch: pb_grpc.WeightSyncServiceStub(ch).GetVersion(
                              pb.VersionRequest(key="policy"), timeout=T)),
    "CollectorService": (lambda rpc: CollectorServer(CollectorServicer("c0", None, rpc), rpc),
                         lambda ch: pb_grpc.CollectorServiceStub(ch).GetStats(pb.StatsRequest(), timeout=T)),
}


def _read(p: Path) -> bytes:
    return p.read_bytes()


def code_of(channel: grpc.Channel, call: Callable[[grpc.Channel], Any],
            metadata: tuple[tuple[str, str], ...] | None = None) -> grpc.StatusCode:
    try:
        call(channel)
    except grpc.RpcError as exc:
        return exc.code()
    finally:
        channel.close()
    return grpc.StatusCode.OK


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_only_clients_with_our_certificate_and_token_get_in(pki: dict[str, Path], service: str) -> None:
    from skurl.rpc.security import open_channel

    start, call = SERVICES[service]
    cfg = secure_cfg(pki)
    server = start(cfg)
    d, o = pki["dir"], pki["other"]
    try:
        assert code_of(open_channel(server.address, cfg), call) == grpc.StatusCode.OK
        no_cert = grpc.ssl_channel_credentials(root_certificates=_read(d / "ca.pem"))
        other_ca = grpc.ssl_channel_credentials(
            root_certificates=_read(d / "ca.pem"), private_key=_read(o / "intruder.key"),
            certificate_chain=_read(o / "intruder.pem"))
        refused = {grpc.StatusCode.UNAVAILABLE}
        assert code_of(grpc.secure_channel(server.address, no_cert), call) in refused
        assert code_of(grpc.secure_channel(server.address, other_ca), call) in refused
        assert code_of(grpc.insecure_channel(server.address), call) in refused
        no_token = secure_cfg(pki, token=False)
        assert code_of(open_channel(server.address, no_token), call) == grpc.StatusCode.UNAUTHENTICATED
        wrong = pki["dir"] / "wrong-token"
        wrong.write_text("guess\n")
        wrong_cfg = RpcConfig(timeout_s=30.0, tls=cfg.tls, token_file=str(wrong))
        assert code_of(open_channel(server.address, wrong_cfg), call) == grpc.StatusCode.UNAUTHENTICATED
        assert probe(server.address, 5.0, cfg=no_token)  # health: TLS, but no token needed
        assert not probe(server.address, 2.0)  # plaintext: refused
    finally:
        server.stop(0)


def test_a_token_without_tls_is_still_checked(pki: dict[str, Path]) -> None:
    from skurl.rpc.security import open_channel

    cfg = RpcConfig(timeout_s=30.0, token_file=str(pki["token"]))
    server = WeightSyncServer(cfg)
    _, call = SERVICES["WeightSyncService"]
    try:
        assert code_of(open_channel(server.address, cfg), call) == grpc.StatusCode.OK
        assert code_of(grpc.insecure_channel(server.address), call) == grpc.StatusCode.UNAUTHENTICATED
    finally:
        server.stop(0)


def test_skurl_clients_work_through_tls_and_token(pki: dict[str, Path]) -> None:
    cfg = secure_cfg(pki)
    sim = _env()(cfg)
    weights = WeightSyncServer(cfg)
    collector = CollectorServer(CollectorServicer("c0", None, cfg), cfg)
    try:
        with RemoteEnv(sim.address, cfg) as env:
            env.reset(1, 0)
            assert env.step(np.ones(env.num_skus)).reward.shape == (env.num_skus,)
        publisher = GrpcWeightPublisher(weights.address, cfg)
        with GrpcWeightSubscriber(weights.address, cfg) as sub:
            publisher.publish(1, {"w": torch.ones(2)})
            assert sub.wait_for(1, timeout=T)[0] == 1
        publisher.close()
        client = CollectorClient(collector.address, cfg)
        assert client.update_weights(1, {"w": torch.ones(2)}) == 1
        client.close()
    finally:
        for s in (collector, weights, sim):
            s.stop(0)


def test_plaintext_on_a_public_address_warns_or_is_refused(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="skurl.rpc.security"):
        server = WeightSyncServer(RpcConfig(), host="0.0.0.0")
        server.stop(0)
    assert any("without TLS" in r.getMessage() for r in caplog.records)
    with pytest.raises(ConfigError, match=r"rpc\.require_tls"):
        WeightSyncServer(RpcConfig(require_tls=True), host="0.0.0.0")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="skurl.rpc.security"):
        WeightSyncServer(RpcConfig(require_tls=True)).stop(0)  # loopback: fine, silent
    assert not caplog.records


def test_tls_settings_are_all_or_none_and_files_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"rpc\.tls"):
        load_config(None, ["rpc.tls.cert=/x.pem"])
    cfg = load_config(None, [f"rpc.tls.cert={tmp_path}/a.pem", f"rpc.tls.key={tmp_path}/a.key",
                             f"rpc.tls.ca={tmp_path}/ca.pem"])
    with pytest.raises(ConfigError, match=r"rpc\.tls\.key"):
        WeightSyncServer(cfg.rpc)
