"""CollectorService over loopback: weights slot + barrier, Collect, chunked GetBuffer, stats,
and the store hand-off; driven by a stand-in collector with the real Rollout arrays."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import torch

from skurl.buffer.rollout import Rollout
from skurl.config import RpcConfig
from skurl.modes.decoupled.collector_client import CollectorClient
from skurl.modes.decoupled.collector_server import CollectorServer, CollectorServicer
from skurl.rpc.errors import RequestRejectedError, VersionNotNewerError
from skurl.rpc.gen import skurl_pb2 as pb
from skurl.rpc.gen import skurl_pb2_grpc as pb_grpc
from skurl.rpc.options import channel_options

RPC = RpcConfig(timeout_s=30.0)
DAYS, SKUS, DIM = 5, 30, 4


class StandInCollector:
    """Deterministic rollouts from (seed, episode, version); records weight loads."""

    def __init__(self) -> None:
        self.version = 0
        self.loaded: list[int] = []

    def set_weights(self, version: int, tensors: dict[str, torch.Tensor]) -> None:
        assert "w" in tensors
        self.version = version
        self.loaded.append(version)

    def collect(self, seed: int, episode: int, version: int | None = None,
                record: bool = True) -> Rollout:
        assert version == self.version
        rng = np.random.default_rng([seed, episode, self.version])
        r = Rollout.allocate(DAYS, np.arange(SKUS, dtype=np.int64) + 1000, DIM)
        for name, arr in r.arrays().items():
            if name != "sku_ids":
                arr[...] = (rng.random(arr.shape) * 10).astype(arr.dtype)
        r.policy_version, r.seed, r.episode = self.version, seed, episode
        return r


def weights(v: float) -> dict[str, torch.Tensor]:
    return {"w": torch.full((3, 3), v)}


@pytest.fixture
def served() -> Iterator[tuple[CollectorClient, StandInCollector, CollectorServer]]:
    backend = StandInCollector()
    server = CollectorServer(CollectorServicer("c0", backend, RPC), RPC)
    client = CollectorClient(server.address, RPC)
    yield client, backend, server
    client.close()
    server.stop(0)


def test_barrier_weights_collect_and_stats(served) -> None:  # type: ignore[no-untyped-def]
    client, backend, _ = served
    with pytest.raises(RequestRejectedError, match=r"FAILED_PRECONDITION.*version 1"):
        client.collect(iteration=0, seed=1, episode=0, min_version=1, wait_s=0.1)
    assert client.update_weights(1, weights(1.0)) == 1
    with pytest.raises(VersionNotNewerError):
        client.update_weights(1, weights(1.0))
    assert client.update_weights(2, weights(2.0)) == 2
    reply = client.collect(iteration=0, seed=1, episode=0, min_version=1, wait_s=5)
    assert reply["policy_version"] == 2 and backend.loaded == [2]  # the newest, loaded once
    assert reply["transitions"] == DAYS * SKUS and reply["collector_id"] == "c0"
    client.collect(iteration=1, seed=1, episode=1, min_version=2, wait_s=5)
    assert backend.loaded == [2]  # no reload without a newer version
    stats = client.stats()
    assert stats["policy_version"] == 2 and stats["iterations"] == 2
    assert stats["transitions"] == 2 * DAYS * SKUS and stats["rollouts_held"] == 2


def test_get_buffer_streams_the_rollout_bit_exact_in_chunks(served) -> None:  # type: ignore[no-untyped-def]
    client, backend, _ = served
    client.update_weights(3, weights(3.0))
    client.collect(iteration=7, seed=5, episode=2, min_version=3, wait_s=5)
    backend.version = 3
    want = backend.collect(5, 2, 3).arrays()
    for chunk_rows in (0, 7, DAYS * SKUS):
        version, got = client.get_buffer(7, max_chunk_rows=chunk_rows)
        assert version == 3 and got.keys() == want.keys()
        for name, arr in want.items():
            assert got[name].dtype == arr.dtype and got[name].shape == arr.shape, name
            np.testing.assert_array_equal(got[name], arr)
    _, some = client.get_buffer(7, names=["rewards", "obs"])
    assert set(some) == {"rewards", "obs", "sku_ids"} and some["obs"].shape == (DAYS, SKUS, DIM)
    with pytest.raises(RequestRejectedError, match="NOT_FOUND"):
        client.get_buffer(8)
    with pytest.raises(RequestRejectedError, match=r"INVALID_ARGUMENT.*nope"):
        client.get_buffer(7, names=["nope"])


def test_corrupted_weights_are_refused(served) -> None:  # type: ignore[no-untyped-def]
    client, _, server = served
    channel = grpc.insecure_channel(server.address, options=channel_options(RPC))
    stub = pb_grpc.CollectorServiceStub(channel)
    with pytest.raises(grpc.RpcError) as info:
        stub.UpdateWeights(pb.Weights(key="policy", version=1, sha256="0" * 64, payload=b"x"),
                           timeout=RPC.timeout_s)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    channel.close()
    assert client.stats()["pending_version"] == -1


def test_without_a_collector_only_weights_and_stats_work() -> None:
    server = CollectorServer(CollectorServicer("lonely", None, RPC), RPC)
    client = CollectorClient(server.address, RPC)
    try:
        assert client.update_weights(1, weights(1.0)) == 1
        assert client.stats()["pending_version"] == 1
        with pytest.raises(RequestRejectedError, match="UNIMPLEMENTED"):
            client.collect(iteration=0, seed=0, episode=0, wait_s=1)
    finally:
        client.close()
        server.stop(0)


def test_collect_writes_the_shard_to_the_store(tmp_path: Path) -> None:
    from skurl.store.local import LocalRolloutStore

    store = LocalRolloutStore(tmp_path / "rollouts")
    server = CollectorServer(CollectorServicer("c1", StandInCollector(), RPC, store=store), RPC)
    client = CollectorClient(server.address, RPC)
    try:
        client.update_weights(4, weights(4.0))
        reply = client.collect(iteration=3, seed=2, episode=0, min_version=4, wait_s=5)
        assert reply["manifest_json"]
        (manifest,) = store.list_shards(3)
        got = store.get_shard(manifest)
        _, streamed = client.get_buffer(3)
        for name, arr in streamed.items():
            np.testing.assert_array_equal(got[name], arr)
    finally:
        client.close()
        server.stop(0)
