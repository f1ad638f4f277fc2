"""Issue 42, defects 1-6: bounded Collect timeouts, weights checked on every path (key,
version, names, shapes, dtypes, finiteness) with weights_rejected_total, the weight
server's subscriber limit, health on its own threads, no state for unknown keys."""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Iterator

import grpc
import numpy as np
import pytest
import torch
from prometheus_client import CollectorRegistry

from skurl.buffer.rollout import Rollout
from skurl.config import RpcConfig
from skurl.modes.decoupled.collector_server import CollectorServer, CollectorServicer
from skurl.rpc.gen import skurl_pb2 as pb
from skurl.rpc.gen import skurl_pb2_grpc as pb_grpc
from skurl.rpc.health import probe
from skurl.rpc.options import channel_options
from skurl.rpc.weights_server import WeightSyncServer, to_message
from skurl.sync.grpc import GrpcWeightPublisher, GrpcWeightSubscriber
from skurl.telemetry.metrics import use_registry
from skurl.weights.codec import WeightIntegrityError, encode_weights

RPC = RpcConfig(timeout_s=30.0)
DAYS, SKUS, DIM = 3, 6, 2
WAIT = 10.0


class ModelCollector:
    """A stand-in collector with a real torch model: rollouts follow its weights."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.model = torch.nn.Linear(3, 2)
        self.version = -1

    def set_weights(self, version: int, tensors: dict[str, torch.Tensor]) -> None:
        self.model.load_state_dict(tensors)
        self.version = version

    def collect(self, seed: int, episode: int, version: int | None = None,
                record: bool = True) -> Rollout:
        scale = float(sum(p.double().sum() for p in self.model.state_dict().values()))
        rng = np.random.default_rng([seed, episode])
        r = Rollout.allocate(DAYS, np.arange(SKUS, dtype=np.int64), DIM)
        for name, arr in r.arrays().items():
            if name != "sku_ids":
                arr[...] = (rng.random(arr.shape) * scale).astype(arr.dtype)
        r.policy_version, r.seed, r.episode = self.version, seed, episode
        return r


def good_weights(v: float) -> dict[str, torch.Tensor]:
    return {"weight": torch.full((2, 3), v), "bias": torch.full((2,), v)}


@pytest.fixture
def collector() -> Iterator[tuple[pb_grpc.CollectorServiceStub, CollectorServer]]:
    server = CollectorServer(CollectorServicer("c0", ModelCollector(), RPC), RPC)
    channel = grpc.insecure_channel(server.address, options=channel_options(RPC))
    yield pb_grpc.CollectorServiceStub(channel), server
    channel.close()
    server.stop(0)


def push(stub: pb_grpc.CollectorServiceStub, tensors: dict[str, torch.Tensor], version: int,
         key: str = "policy") -> pb.WeightsAck:
    return stub.UpdateWeights(to_message(encode_weights(tensors, version, key)), timeout=WAIT)


def code_of(call: object, *args: object, **kwargs: object) -> grpc.StatusCode:
    try:
        call(*args, **kwargs)  # type: ignore[operator]
    except grpc.RpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def rejected(metrics: object, path: str) -> float:
    return metrics.weights_rejected_total.labels(path=path)._value.get()  # type: ignore[attr-defined]


@pytest.mark.parametrize("timeout_s", [math.nan, math.inf, -math.inf, 1e12, -1.0])
def test_collect_timeouts_not_finite_or_out_of_range_are_invalid_argument(collector, timeout_s) -> None:  # type: ignore[no-untyped-def]
    stub, server = collector
    start = time.monotonic()
    for _ in range(9):  # more than the server's 8 handler threads: none may be held
        code = code_of(stub.Collect, pb.CollectRequest(min_version=5, timeout_s=timeout_s),
                       timeout=WAIT)
        assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert time.monotonic() - start < WAIT  # refused at once, never a wait
    assert probe(server.address, 5.0)
    push(stub, good_weights(1.0), 1)
    reply = stub.Collect(pb.CollectRequest(seed=1, min_version=1, timeout_s=1.0), timeout=WAIT)
    assert reply.policy_version == 1


def test_a_collect_wait_ends_at_the_callers_deadline(collector) -> None:  # type: ignore[no-untyped-def]
    stub, server = collector
    start = time.monotonic()
    code = code_of(stub.Collect, pb.CollectRequest(min_version=5, timeout_s=3600.0), timeout=0.5)
    assert code in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.FAILED_PRECONDITION)
    assert time.monotonic() - start < 5.0
    time.sleep(1.0)  # the handler noticed the caller left: its slot in flight is free
    assert server.servicer._in_flight._value == 4  # type: ignore[attr-defined]


def test_collect_with_a_negative_seed_is_invalid_argument(collector) -> None:  # type: ignore[no-untyped-def]
    stub, _ = collector
    push(stub, good_weights(1.0), 1)
    for field in ("seed", "episode", "iteration"):
        request = pb.CollectRequest(min_version=1, timeout_s=1.0, **{field: -1})
        assert code_of(stub.Collect, request, timeout=WAIT) == grpc.StatusCode.INVALID_ARGUMENT


def _collect_result(stub: pb_grpc.CollectorServiceStub) -> tuple[int, np.ndarray]:
    stub.Collect(pb.CollectRequest(iteration=7, seed=3, min_version=1, timeout_s=1.0), timeout=WAIT)
    chunks = list(stub.GetBuffer(pb.GetBufferRequest(iteration=7, names=["rewards"]), timeout=WAIT))
    t = [x for c in chunks for x in c.tensors.tensors if x.name == "rewards"]
    return chunks[0].policy_version, np.concatenate([np.frombuffer(x.data, x.dtype) for x in t])


@pytest.mark.parametrize("bad", ["shape", "dtype", "names", "nan", "inf", "key", "header"])
def test_pushed_weights_unlike_the_model_are_refused_and_the_old_ones_kept(collector, bad: str) -> None:  # type: ignore[no-untyped-def]
    stub, _ = collector
    push(stub, good_weights(1.0), 1)
    before = _collect_result(stub)
    tensors, key, version = good_weights(2.0), "policy", 2
    if bad == "shape":
        tensors["weight"] = torch.ones(4, 3)
    elif bad == "dtype":
        tensors["weight"] = tensors["weight"].double()
    elif bad == "names":
        tensors["extra"] = torch.ones(1)
    elif bad == "nan":
        tensors["bias"][0] = math.nan
    elif bad == "inf":
        tensors["weight"][1, 1] = -math.inf
    elif bad == "key":
        key, version = "other", 2**63 - 1
    with use_registry(CollectorRegistry()) as metrics:
        if bad == "header":  # the message says version 2, the signed payload says 9
            blob = encode_weights(tensors, 9, key)
            message = pb.Weights(key=key, version=2, sha256=blob.sha256, payload=blob.payload)
            code = code_of(stub.UpdateWeights, message, timeout=WAIT)
        else:
            code = code_of(push, stub, tensors, version, key)
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert rejected(metrics, "push") == 1
    assert _collect_result(stub)[0] == 1
    np.testing.assert_array_equal(_collect_result(stub)[1], before[1])
    assert push(stub, good_weights(3.0), 3).accepted  # not pinned: the next version is taken
    assert _collect_result(stub)[0] == 3


@pytest.fixture
def weights_server() -> Iterator[WeightSyncServer]:
    server = WeightSyncServer(RPC)
    yield server
    server.stop(0)


def test_nan_weights_are_refused_by_publisher_server_and_subscriber(weights_server) -> None:  # type: ignore[no-untyped-def]
    nan = good_weights(1.0)
    nan["weight"][0, 0] = math.nan
    pub = GrpcWeightPublisher(weights_server.address, RPC)
    channel = grpc.insecure_channel(weights_server.address, options=channel_options(RPC))
    stub = pb_grpc.WeightSyncServiceStub(channel)
    with use_registry(CollectorRegistry()) as metrics, \
            GrpcWeightSubscriber(weights_server.address, RPC, like=good_weights(0.0)) as sub:
        with pytest.raises(WeightIntegrityError, match="NaN"):
            pub.publish(1, nan)
        message = to_message(encode_weights(nan, 1))  # a publisher that does not check
        assert code_of(stub.SetWeights, message, timeout=WAIT) == grpc.StatusCode.INVALID_ARGUMENT
        assert stub.GetVersion(pb.VersionRequest(key="policy"), timeout=WAIT).version == -1
        assert rejected(metrics, "publish") == 2
        sub._accept(message)  # what an unchecked server would stream
        assert sub.rejected == 1 and sub.latest() is None
        assert rejected(metrics, "subscribe") == 1
        pub.publish(2, good_weights(2.0))
        assert sub.wait_for(2, timeout=WAIT)[0] == 2
    channel.close()
    pub.close()


def test_the_server_refuses_weights_unlike_the_learners_model(weights_server) -> None:  # type: ignore[no-untyped-def]
    from skurl.weights.codec import spec_of

    weights_server.servicer.expect("policy", spec_of(good_weights(0.0)))
    channel = grpc.insecure_channel(weights_server.address, options=channel_options(RPC))
    stub = pb_grpc.WeightSyncServiceStub(channel)
    wrong = {"weight": torch.ones(5, 3), "bias": torch.ones(2)}
    assert code_of(stub.SetWeights, to_message(encode_weights(wrong, 1)),
                   timeout=WAIT) == grpc.StatusCode.INVALID_ARGUMENT
    assert stub.SetWeights(to_message(encode_weights(good_weights(1.0), 1)), timeout=WAIT).accepted
    channel.close()


def test_the_subscriber_limit_is_enforced_and_health_still_answers() -> None:
    server = WeightSyncServer(RPC, max_subscribers=64)
    channel = grpc.insecure_channel(server.address, options=channel_options(RPC))
    stub = pb_grpc.WeightSyncServiceStub(channel)
    streams = [stub.Subscribe(pb.SubscribeRequest(key="policy"), timeout=60) for _ in range(64)]
    try:
        time.sleep(1.0)  # every stream is open (each holds a handler thread)
        extra = stub.Subscribe(pb.SubscribeRequest(key="policy"), timeout=WAIT)
        with pytest.raises(grpc.RpcError) as info:
            next(extra)
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert probe(server.address, 5.0)
        assert stub.GetVersion(pb.VersionRequest(key="policy"), timeout=5.0).version == -1
        for s in streams[:8]:
            s.cancel()
        time.sleep(1.0)  # their slots are released: new subscribers get in
        again = stub.Subscribe(pb.SubscribeRequest(key="policy"), timeout=WAIT)
        server.servicer.put(to_message(encode_weights(good_weights(1.0), 1)))
        assert next(again).version == 1
    finally:
        for s in streams:
            s.cancel()
        channel.close()
        server.stop(0)


def test_read_only_calls_keep_no_state_for_unknown_keys(weights_server) -> None:  # type: ignore[no-untyped-def]
    channel = grpc.insecure_channel(weights_server.address, options=channel_options(RPC))
    stub = pb_grpc.WeightSyncServiceStub(channel)
    for i in range(300):
        assert stub.GetVersion(pb.VersionRequest(key=f"k{i}"), timeout=WAIT).version == -1
        assert code_of(stub.GetWeights, pb.GetWeightsRequest(key=f"g{i}"),
                       timeout=WAIT) == grpc.StatusCode.NOT_FOUND
    sub = stub.Subscribe(pb.SubscribeRequest(key="never"), timeout=0.5)
    assert code_of(lambda: next(sub)) == grpc.StatusCode.DEADLINE_EXCEEDED
    assert weights_server.servicer._slots == {}  # type: ignore[attr-defined]
    channel.close()


def test_a_consistent_non_safetensors_payload_is_refused_by_the_server(weights_server) -> None:  # type: ignore[no-untyped-def]
    channel = grpc.insecure_channel(weights_server.address, options=channel_options(RPC))
    stub = pb_grpc.WeightSyncServiceStub(channel)
    junk = b"\xff" * 64
    message = pb.Weights(key="policy", version=1, sha256=hashlib.sha256(junk).hexdigest(), payload=junk)
    assert code_of(stub.SetWeights, message, timeout=WAIT) == grpc.StatusCode.INVALID_ARGUMENT
    channel.close()


def test_order_cap_is_the_simulators_and_reported_as_a_plain_number() -> None:
    from skurl.rpc.env_wire import MAX_ORDER, check_orders
    from skurl.rpc.errors import WireError
    from skurl.sim.env import MAX_ORDER as SIM_MAX_ORDER

    assert MAX_ORDER == SIM_MAX_ORDER
    for value, shown in ((1e300, "1e+300"), (MAX_ORDER * 2, "2000000000.0"), (-1.0, "-1.0")):
        with pytest.raises(WireError) as info:
            check_orders(np.array([1.0, value]), 2)
        assert f"orders[1] = {shown}," in str(info.value) and "np." not in str(info.value)
        assert "[0, 1e+09]" in str(info.value)
    check_orders(np.array([0.0, MAX_ORDER]), 2)
