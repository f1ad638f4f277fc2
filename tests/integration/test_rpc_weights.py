"""WeightSyncService over loopback: publish/subscribe, versions, integrity, restarts."""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterator

import grpc
import pytest
import torch

from skurl.config import RpcConfig
from skurl.rpc.errors import VersionNotNewerError
from skurl.rpc.gen import skurl_pb2 as pb
from skurl.rpc.gen import skurl_pb2_grpc as pb_grpc
from skurl.rpc.options import channel_options
from skurl.rpc.weights_server import WeightSyncServer
from skurl.sync.api import WeightBackend, WeightSubscriber, WeightSyncTimeout
from skurl.sync.grpc import GrpcWeightPublisher, GrpcWeightSubscriber

RPC = RpcConfig(timeout_s=30.0)
WAIT = 30.0  # generous: only reached when something is broken


def model(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"pi.0.weight": torch.randn(256, 40, generator=g), "pi.0.bias": torch.randn(256, generator=g),
            "v.out.weight": torch.randn(1, 256, generator=g).double()}


@pytest.fixture
def server() -> Iterator[WeightSyncServer]:
    srv = WeightSyncServer(RPC)
    yield srv
    srv.stop(0)


def test_publish_then_subscribers_get_it_bit_exact(server: WeightSyncServer) -> None:
    pub = GrpcWeightPublisher(server.address, RPC)
    subs = [GrpcWeightSubscriber(server.address, RPC) for _ in range(3)]
    assert isinstance(pub, WeightBackend) and isinstance(subs[0], WeightSubscriber)
    assert subs[0].latest() is None and subs[0].latest_version() is None
    weights = model(1)
    pub.publish(1, weights)
    for sub in subs:
        version, got = sub.wait_for(1, timeout=WAIT)
        assert version == 1 and got.keys() == weights.keys()
        for k in weights:
            assert got[k].dtype == weights[k].dtype and torch.equal(got[k], weights[k])
        assert sub.latest_version() == 1
    pub.publish(5, model(5))
    assert all(sub.wait_for(2, timeout=WAIT)[0] == 5 for sub in subs)  # newest, not next
    for sub in subs:
        sub.close()
    pub.close()


def test_versions_only_grow(server: WeightSyncServer) -> None:
    pub = GrpcWeightPublisher(server.address, RPC)
    pub.publish(3, model(3))
    with pytest.raises(VersionNotNewerError, match="FAILED_PRECONDITION"):
        pub.publish(3, model(3))
    with pytest.raises(ValueError):  # what InProcWeights raises too
        pub.publish(2, model(2))
    pub.close()


def test_wait_for_blocks_until_published_and_times_out_cleanly(server: WeightSyncServer) -> None:
    pub = GrpcWeightPublisher(server.address, RPC)
    with GrpcWeightSubscriber(server.address, RPC) as sub:
        with pytest.raises(WeightSyncTimeout, match="version 1"):
            sub.wait_for(1, timeout=0.2)
        started = threading.Event()

        def late_publish() -> None:
            started.wait(WAIT)
            pub.publish(1, model(1))

        thread = threading.Thread(target=late_publish)
        thread.start()
        started.set()
        assert sub.wait_for(1, timeout=WAIT)[0] == 1
        thread.join()
    pub.close()


def test_corrupted_uploads_are_refused_and_bad_bytes_dropped(server: WeightSyncServer) -> None:
    pub = GrpcWeightPublisher(server.address, RPC)
    channel = grpc.insecure_channel(server.address, options=channel_options(RPC))
    stub = pb_grpc.WeightSyncServiceStub(channel)
    with GrpcWeightSubscriber(server.address, RPC) as sub:
        pub.publish(1, model(1))
        sub.wait_for(1, timeout=WAIT)
        # Payload not matching its sha256: the server refuses it.
        with pytest.raises(grpc.RpcError) as info:
            stub.SetWeights(pb.Weights(key="policy", version=2, sha256="0" * 64,
                                       payload=b"junk"), timeout=WAIT)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "sha256" in info.value.details()
        # Consistent sha256 but not safetensors: refused by the server too (issue 42) ...
        junk = b"\x00" * 64
        bad = pb.Weights(key="policy", version=2, sha256=hashlib.sha256(junk).hexdigest(),
                         payload=junk)
        with pytest.raises(grpc.RpcError) as info:
            stub.SetWeights(bad, timeout=WAIT)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        # ... and dropped by a subscriber that gets it anyway (an older server).
        sub._accept(bad)
        assert sub.rejected == 1
        assert sub.latest()[0] == 1  # the previous version is kept
        pub.publish(3, model(3))
        assert sub.wait_for(3, timeout=WAIT)[0] == 3
        with pytest.raises(grpc.RpcError) as info:
            stub.GetWeights(pb.GetWeightsRequest(key="other"), timeout=WAIT)
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.RpcError) as info:
            stub.GetVersion(pb.VersionRequest(key="bad key!"), timeout=WAIT)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    channel.close()
    pub.close()


def _until(cond: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_subscriber_recovers_when_the_server_restarts() -> None:
    first = WeightSyncServer(RPC)
    port = first.port
    sub = GrpcWeightSubscriber(first.address, RPC)
    try:
        GrpcWeightPublisher(first.address, RPC).publish(1, model(1))
        assert sub.wait_for(1, timeout=WAIT)[0] == 1
        first.stop(0)
        second = WeightSyncServer(RPC, port=port)  # same address, empty state
        try:
            GrpcWeightPublisher(second.address, RPC).publish(2, model(2))
            version, got = sub.wait_for(2, timeout=WAIT)
            assert version == 2 and torch.equal(got["pi.0.bias"], model(2)["pi.0.bias"])
        finally:
            second.stop(0)
    finally:
        sub.close()


def test_learner_hosted_server_publishes_in_process(server: WeightSyncServer) -> None:
    from skurl.rpc.weights_server import to_message
    from skurl.weights.codec import encode_weights

    with GrpcWeightSubscriber(server.address, RPC) as sub:
        server.servicer.put(to_message(encode_weights(model(7), 7)))
        assert sub.wait_for(7, timeout=WAIT)[0] == 7


def test_weights_unlike_the_model_are_dropped(server: WeightSyncServer,
                                              caplog: pytest.LogCaptureFixture) -> None:
    pub = GrpcWeightPublisher(server.address, RPC)
    like = model(0)
    with GrpcWeightSubscriber(server.address, RPC, like=like) as sub:
        wider = {**model(1), "pi.0.bias": torch.zeros(128)}
        with caplog.at_level(logging.ERROR, logger="skurl.rpc.weights"):
            pub.publish(1, wider)
            _until(lambda: sub.rejected == 1)
        assert sub.latest() is None
        assert any("'pi.0.bias' is float32[128], expected float32[256]" in r.getMessage()
                   for r in caplog.records)
        pub.publish(2, model(2))
        assert sub.wait_for(2, timeout=WAIT)[0] == 2
    pub.close()
