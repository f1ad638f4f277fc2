"""Issue 42: a hostile client calls every RPC of skurl.proto with malformed requests (NaN,
infinities, huge and negative sizes, wrong dtypes, unknown keys and ids, floods of
streams and sessions) against a real chain: a sim server, a weight server and a collector
process following it. After each case: the status code is the documented one, every
server still answers (health included), and a following valid Collect gives the same
rollout as before any bad call."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import torch

from skurl.catalog import load_catalog
from skurl.config import load_config
from skurl.modes.decoupled.roles import CollectorProcess
from skurl.rpc.codec import encode_batch
from skurl.rpc.env_server import serve_env
from skurl.rpc.gen import skurl_pb2 as pb
from skurl.rpc.gen import skurl_pb2_grpc as pb_grpc
from skurl.rpc.health import probe
from skurl.rpc.options import channel_options
from skurl.rpc.weights_server import WeightSyncServer, to_message
from skurl.sync.grpc import GrpcWeightPublisher
from skurl.weights.codec import encode_weights

OK, BAD = grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT
FULL, MISSING = grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.NOT_FOUND
T = 10.0  # deadline of each call


@dataclass
class Chain:
    cfg: Any
    sim: Any
    weights: Any
    collector: CollectorProcess
    env: pb_grpc.EnvServiceStub
    sync: pb_grpc.WeightSyncServiceStub
    coll: pb_grpc.CollectorServiceStub
    good: dict[str, torch.Tensor]
    baseline: dict[str, np.ndarray]
    iteration: int = 100
    n: int = 0

    def collect(self) -> dict[str, np.ndarray]:
        self.iteration += 1
        self.coll.Collect(pb.CollectRequest(iteration=self.iteration, seed=5, episode=1,
                                            min_version=1, timeout_s=T), timeout=30)
        chunks = list(self.coll.GetBuffer(pb.GetBufferRequest(iteration=self.iteration), timeout=30))
        out: dict[str, list[np.ndarray]] = {}
        for c in chunks:
            for t in c.tensors.tensors:
                out.setdefault(t.name, []).append(np.frombuffer(t.data, t.dtype).reshape(t.shape))
        return {k: np.concatenate(v) for k, v in out.items()}


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chain]:
    base = ["catalog.skus=16", "catalog.seed=2", "sim.days=4", "sim.threads=1",
            "policy.hidden=[8,8]", "train.torch_threads=1", "collect.infer_dtype=float32",
            "sync.backend=grpc", "sync.timeout_s=10", "rpc.timeout_s=30"]
    cfg0 = load_config(None, base)
    sim = serve_env(load_catalog(cfg0.catalog), cfg0.sim, cfg0.rpc)
    weights = WeightSyncServer(cfg0.rpc)
    store = Path(tmp_path_factory.mktemp("store"))
    cfg = load_config(None, [*base, f"deploy.sim_addresses=[{sim.address}]",
                             f"deploy.weights_address={weights.address}", f"store.url={store}"])
    collector = CollectorProcess(cfg, "c0", 0, 1)
    opts = channel_options(cfg.rpc)
    channels = [grpc.insecure_channel(a, options=opts)
                for a in (sim.address, weights.address, collector.server.address)]
    torch.manual_seed(0)
    good = {k: torch.randn_like(v) * 0.1 for k, v in collector.servicer._collector.model.state_dict().items()}
    publisher = GrpcWeightPublisher(weights.address, cfg.rpc)
    publisher.publish(1, good)
    publisher.close()
    c = Chain(cfg, sim, weights, collector, pb_grpc.EnvServiceStub(channels[0]),
              pb_grpc.WeightSyncServiceStub(channels[1]), pb_grpc.CollectorServiceStub(channels[2]),
              good, {})
    c.baseline = c.collect()
    yield c
    for ch in channels:
        ch.close()
    collector.close()
    weights.stop(0)
    sim.stop(0)


def code_of(fn: Callable[[], Any]) -> grpc.StatusCode:
    try:
        result = fn()
        if isinstance(result, grpc.Call) or hasattr(result, "__next__"):
            for _ in result:
                pass
    except grpc.RpcError as exc:
        return exc.code()
    return OK


def tensor(name: str, dtype: str, shape: list[int], data: bytes) -> pb.TensorBatch:
    return pb.TensorBatch(tensors=[pb.Tensor(name=name, dtype=dtype, shape=shape, data=data)])


def weights_msg(tensors: dict[str, torch.Tensor], version: int, key: str = "policy") -> pb.Weights:
    return to_message(encode_weights(tensors, version, key))


def _with(good: dict[str, torch.Tensor], change: Callable[[dict[str, torch.Tensor]], None]) -> dict[str, torch.Tensor]:
    out = {k: v.clone() for k, v in good.items()}
    change(out)
    return out


def _first(d: dict[str, torch.Tensor]) -> str:
    return next(iter(d))


def _nan(d: dict[str, torch.Tensor]) -> None:
    d[_first(d)].view(-1)[0] = math.nan


def _inf(d: dict[str, torch.Tensor]) -> None:
    d[_first(d)].view(-1)[-1] = math.inf


def _shape(d: dict[str, torch.Tensor]) -> None:
    d[_first(d)] = torch.zeros(3, 3)


def _dtype(d: dict[str, torch.Tensor]) -> None:
    d[_first(d)] = d[_first(d)].half()  # the model is float32 or float64, never half


def _label_job(weights: dict[str, torch.Tensor]) -> bytes:
    """A DCL label job (learn/label_wire.py) of one planned SKU under `weights`."""
    from skurl.learn.dcl import DclSpec
    from skurl.learn.dcl_parts import SamplePlan
    from skurl.learn.label_wire import encode_job
    from skurl.learn.labelling import LabelJob

    plan = SamplePlan((2,), (np.array([0]),), 6)
    return encode_job(LabelJob(1, 0, 1, 0, plan, DclSpec(states=1, horizon=2, budget=2, warmup=2), False, weights))


def _env_cases(c: Chain) -> dict[str, tuple[Callable[[], Any], set[grpc.StatusCode]]]:
    n = c.sim.servicer.num_skus

    def step(orders: pb.TensorBatch, env_id: str = "hostile") -> Callable[[], Any]:
        def call() -> Any:
            c.env.Reset(pb.ResetRequest(env_id=env_id, seed=1), timeout=T)
            return c.env.Step(pb.StepRequest(env_id=env_id, orders=orders), timeout=T)
        return call

    f64 = lambda v: encode_batch({"orders": np.full(n, v, np.float64)})  # noqa: E731
    return {
        "info-bad-id": (lambda: c.env.GetInfo(pb.InfoRequest(env_id="x" * 10_000), timeout=T), {BAD}),
        "info-unknown-id": (lambda: c.env.GetInfo(pb.InfoRequest(env_id="nobody"), timeout=T), {BAD}),
        "reset-negative-seed": (lambda: c.env.Reset(pb.ResetRequest(env_id="h", seed=-1), timeout=T), {BAD}),
        "reset-negative-episode": (lambda: c.env.Reset(pb.ResetRequest(env_id="h", episode=-2**63), timeout=T), {BAD}),
        "step-nan": (step(f64(math.nan)), {BAD}),
        "step-inf": (step(f64(math.inf)), {BAD}),
        "step-negative": (step(f64(-1.0)), {BAD}),
        "step-huge": (step(f64(1e300)), {BAD}),
        "step-wrong-dtype": (step(tensor("orders", "complex128", [n], b"\0" * 16 * n)), {BAD}),
        "step-object-dtype": (step(tensor("orders", "object", [n], b"\0" * 8 * n)), {BAD}),
        "step-huge-shape": (step(tensor("orders", "float64", [2**40], b"\0" * 8)), {BAD}),
        "step-negative-shape": (step(tensor("orders", "float64", [-n], b"\0" * 8 * n)), {BAD}),
        "step-short-data": (step(tensor("orders", "float64", [n], b"\0" * 3)), {BAD}),
        "step-unknown-id": (lambda: c.env.Step(pb.StepRequest(env_id="ghost", orders=f64(1.0)), timeout=T), {BAD}),
        "close-bad-id": (lambda: c.env.Close(pb.CloseRequest(env_id="bad id"), timeout=T), {BAD}),
        "close-unknown-id": (lambda: c.env.Close(pb.CloseRequest(env_id="ghost"), timeout=T), {OK}),
        "attach-unknown-id": (lambda: c.env.Attach(pb.AttachRequest(env_id="ghost"), timeout=T), {BAD}),
    }


def _weight_cases(c: Chain) -> dict[str, tuple[Callable[[], Any], set[grpc.StatusCode]]]:
    g = c.good
    junk = b"\x07" * 100
    return {
        "set-nan": (lambda: c.sync.SetWeights(weights_msg(_with(g, _nan), 50), timeout=T), {BAD}),
        "set-inf": (lambda: c.sync.SetWeights(weights_msg(_with(g, _inf), 50), timeout=T), {BAD}),
        "set-bad-sha": (lambda: c.sync.SetWeights(pb.Weights(key="policy", version=50, sha256="0" * 64,
                                                             payload=junk), timeout=T), {BAD}),
        "set-not-safetensors": (lambda: c.sync.SetWeights(pb.Weights(
            key="policy", version=50, sha256=hashlib.sha256(junk).hexdigest(), payload=junk), timeout=T), {BAD}),
        "set-negative-version": (lambda: c.sync.SetWeights(weights_msg(g, -5), timeout=T), {BAD}),
        "set-bad-key": (lambda: c.sync.SetWeights(weights_msg(g, 50, "no such key!"), timeout=T), {BAD}),
        # Taken by the server (it hosts any key) but not by the collector that follows "policy".
        "set-other-key-max-version": (lambda: c.sync.SetWeights(weights_msg(g, 2**63 - 1, "other"),
                                                                 timeout=T), {OK, grpc.StatusCode.FAILED_PRECONDITION}),
        "get-unknown-key": (lambda: c.sync.GetWeights(pb.GetWeightsRequest(key="ghost"), timeout=T), {MISSING}),
        "get-future-version": (lambda: c.sync.GetWeights(pb.GetWeightsRequest(key="policy", min_version=2**62),
                                                         timeout=T), {MISSING}),
        "version-bad-key": (lambda: c.sync.GetVersion(pb.VersionRequest(key="\u00e9" * 300), timeout=T), {BAD}),
        "subscribe-bad-key": (lambda: c.sync.Subscribe(pb.SubscribeRequest(key=""), timeout=T), {BAD}),
    }


def _collector_cases(c: Chain) -> dict[str, tuple[Callable[[], Any], set[grpc.StatusCode]]]:
    g = c.good

    def collect(**kw: Any) -> Callable[[], Any]:
        request = pb.CollectRequest(**{"iteration": 1, "seed": 1, "min_version": 1, "timeout_s": 1.0, **kw})
        return lambda: c.coll.Collect(request, timeout=T)

    def push(tensors: dict[str, torch.Tensor], version: int, key: str = "policy") -> Callable[[], Any]:
        return lambda: c.coll.UpdateWeights(weights_msg(tensors, version, key), timeout=T)

    def label(job: bytes) -> Callable[[], Any]:
        return lambda: c.coll.Label(pb.LabelRequest(job=job), timeout=T)

    return {
        "collect-timeout-nan": (collect(timeout_s=math.nan), {BAD}),
        "collect-timeout-inf": (collect(timeout_s=math.inf), {BAD}),
        "collect-timeout-huge": (collect(timeout_s=1e12), {BAD}),
        "collect-timeout-negative": (collect(timeout_s=-1.0), {BAD}),
        "collect-negative-seed": (collect(seed=-1), {BAD}),
        "collect-negative-iteration": (collect(iteration=-1), {BAD}),
        "collect-negative-sku": (collect(obs_sku_ids=[-3]), {BAD}),
        "buffer-unknown-iteration": (lambda: c.coll.GetBuffer(pb.GetBufferRequest(iteration=2**62), timeout=T),
                                     {MISSING}),
        "buffer-unknown-name": (lambda: c.coll.GetBuffer(pb.GetBufferRequest(iteration=c.iteration,
                                                                             names=["nope"]), timeout=T), {BAD}),
        "buffer-negative-rows": (lambda: c.coll.GetBuffer(pb.GetBufferRequest(
            iteration=c.iteration, names=["rewards"], max_chunk_rows=-7), timeout=T), {OK}),
        "push-nan": (push(_with(g, _nan), 60), {BAD}),
        "push-inf": (push(_with(g, _inf), 60), {BAD}),
        "push-shape": (push(_with(g, _shape), 60), {BAD}),
        "push-dtype": (push(_with(g, _dtype), 60), {BAD}),
        "push-other-key-max-version": (push(g, 2**63 - 1, "other"), {BAD}),
        "push-negative-version": (push(g, -1), {BAD}),
        "push-bad-sha": (lambda: c.coll.UpdateWeights(pb.Weights(key="policy", version=60, sha256="x",
                                                                 payload=b"1"), timeout=T), {BAD}),
        "stats": (lambda: c.coll.GetStats(pb.StatsRequest(), timeout=T), {OK}),
        "label-not-a-job": (label(b"junk"), {BAD}),
        "label-nan-weights": (label(_label_job(_with(g, _nan))), {BAD}),
        "label-empty": (label(b""), {BAD}),
    }


CASES = {**{f"env/{k}": k for k in ("info-bad-id", "info-unknown-id", "reset-negative-seed",
                                    "reset-negative-episode", "step-nan", "step-inf", "step-negative",
                                    "step-huge", "step-wrong-dtype", "step-object-dtype",
                                    "step-huge-shape", "step-negative-shape", "step-short-data",
                                    "step-unknown-id", "close-bad-id", "close-unknown-id",
                                    "attach-unknown-id")},
         **{f"weights/{k}": k for k in ("set-nan", "set-inf", "set-bad-sha", "set-not-safetensors",
                                        "set-negative-version", "set-bad-key",
                                        "set-other-key-max-version", "get-unknown-key",
                                        "get-future-version", "version-bad-key", "subscribe-bad-key")},
         **{f"collector/{k}": k for k in ("collect-timeout-nan", "collect-timeout-inf",
                                          "collect-timeout-huge", "collect-timeout-negative",
                                          "collect-negative-seed", "collect-negative-iteration",
                                          "collect-negative-sku", "buffer-unknown-iteration",
                                          "buffer-unknown-name", "buffer-negative-rows", "push-nan",
                                          "push-inf", "push-shape", "push-dtype",
                                          "push-other-key-max-version", "push-negative-version",
                                          "push-bad-sha", "stats", "label-not-a-job", "label-nan-weights",
                                          "label-empty")}}


def assert_unharmed(c: Chain) -> None:
    for server in (c.sim, c.weights, c.collector.server):
        assert probe(server.address, 5.0), f"{server.address} stopped answering health"
    again = c.collect()
    assert set(again) == set(c.baseline)
    for name, arr in c.baseline.items():
        np.testing.assert_array_equal(again[name], arr, err_msg=name)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_malformed_call_is_refused_and_changes_nothing(chain: Chain, case: str) -> None:
    service, name = case.split("/")
    table = {"env": _env_cases, "weights": _weight_cases, "collector": _collector_cases}[service](chain)
    call, expected = table[name]
    assert code_of(call) in expected
    assert_unharmed(chain)


def test_floods_of_sessions_streams_and_collects(chain: Chain) -> None:
    c = chain
    # Sessions: the server's limit (8) is RESOURCE_EXHAUSTED, never a hang or a crash.
    codes = [code_of(lambda i=i: c.env.GetInfo(pb.InfoRequest(env_id=f"flood-{i}", open=True), timeout=T))
             for i in range(12)]
    assert FULL in codes and set(codes) <= {OK, FULL}
    for i in range(12):
        c.env.Close(pb.CloseRequest(env_id=f"flood-{i}"), timeout=T)
    # Subscribe streams: beyond the limit RESOURCE_EXHAUSTED; unary calls and health still served.
    streams = [c.sync.Subscribe(pb.SubscribeRequest(key="policy", after_version=10**6), timeout=30)
               for _ in range(c.weights.servicer.max_subscribers + 6)]
    extra = c.sync.Subscribe(pb.SubscribeRequest(key="policy", after_version=10**6), timeout=3)
    assert code_of(lambda: extra) in {FULL, grpc.StatusCode.DEADLINE_EXCEEDED}
    assert c.sync.GetVersion(pb.VersionRequest(key="policy"), timeout=T).version == 1
    assert probe(c.weights.address, 5.0)
    for s in streams:
        s.cancel()
    # Attach streams on one session: at most two, the rest refused.
    attach = [c.env.Attach(pb.AttachRequest(env_id="hostile"), timeout=30) for _ in range(5)]
    refused = sum(code_of(lambda a=a: a) == FULL for a in attach[2:])
    for a in attach:
        a.cancel()
    assert refused >= 1
    # Collects waiting at the barrier: at most 4 in flight, the rest refused at once.
    with futures.ThreadPoolExecutor(12) as pool:
        wait = pb.CollectRequest(iteration=1, seed=1, min_version=10**9, timeout_s=1.5)
        codes = list(pool.map(lambda _: code_of(lambda: c.coll.Collect(wait, timeout=T)), range(12)))
    assert FULL in codes and set(codes) <= {FULL, grpc.StatusCode.FAILED_PRECONDITION}
    assert_unharmed(c)
