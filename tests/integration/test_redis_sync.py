"""Redis weight sync against a real redis-server: outages, restarts, fallbacks, latency."""

from __future__ import annotations

import statistics
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import redis
import torch
from torch import nn

from skurl.config import StoreConfig, SyncConfig
from skurl.errors import UserError
from skurl.store.local import LocalRolloutStore
from skurl.sync.api import Tensors, WeightSyncTimeout
from skurl.sync.redis import RedisWeightPublisher, SyncConnectionError, version_key, weights_key
from skurl.sync.redis_subscriber import RedisWeightSubscriber
from skurl.weights.codec import encode_weights

if TYPE_CHECKING:
    from conftest import RedisProcess

pytestmark = pytest.mark.integration
WAIT_S = 15.0


def small_model(seed: int, hidden: int = 8) -> Tensors:
    g = torch.Generator().manual_seed(seed)
    return {"w": torch.randn(hidden, 3, generator=g), "b": torch.randn(hidden, generator=g)}


def test_unreachable_redis_is_one_line_naming_the_url(closed_port: int) -> None:
    url = f"redis://127.0.0.1:{closed_port}/0"
    for make in (lambda: RedisWeightPublisher(url, "k", timeout_s=1),
                 lambda: RedisWeightSubscriber(url, "k", timeout_s=1)):
        with pytest.raises(SyncConnectionError) as info:
            make()
        assert isinstance(info.value, UserError)
        assert url in str(info.value) and "\n" not in str(info.value)


def test_subscriber_recovers_after_redis_restarts(redis_process: RedisProcess) -> None:
    publisher = RedisWeightPublisher(redis_process.url, "policy", timeout_s=2)
    sub = RedisWeightSubscriber(redis_process.url, "policy", poll_s=0.1, timeout_s=2)
    try:
        publisher.publish(1, small_model(1))
        assert sub.wait_for(1, timeout=WAIT_S)[0] == 1
        redis_process.stop()  # the server dies: no persistence, every key is gone
        with pytest.raises(SyncConnectionError, match="publish of version 2 failed"):
            publisher.publish(2, small_model(2))
        assert sub.latest_version() == 1  # the collector keeps working on what it has
        redis_process.start()  # same port, empty
        publisher.publish(2, small_model(2))
        version, got = sub.wait_for(2, timeout=WAIT_S)
        assert version == 2
        assert torch.equal(got["w"], small_model(2)["w"])
        publisher.publish(3, small_model(3))  # and it keeps following
        assert sub.wait_for(3, timeout=WAIT_S)[0] == 3
    finally:
        sub.close()
        publisher.close()


def test_a_missed_message_is_caught_by_the_version_poll(redis_url: str, unique_name: str) -> None:
    sub = RedisWeightSubscriber(redis_url, unique_name, poll_s=0.05)
    raw = redis.Redis.from_url(redis_url)
    try:
        blob = encode_weights(small_model(7), 7, unique_name)
        with raw.pipeline(transaction=True) as pipe:  # written, but never announced
            pipe.hset(weights_key(unique_name), mapping={
                "version": 7, "model_key": unique_name, "sha256": blob.sha256, "payload": blob.payload,
            })
            pipe.set(version_key(unique_name), 7).execute()
        assert sub.wait_for(7, timeout=WAIT_S)[0] == 7
    finally:
        sub.close()
        raw.close()


def test_without_a_model_the_first_version_sets_the_expected_shapes(
    redis_url: str, unique_name: str
) -> None:
    publisher = RedisWeightPublisher(redis_url, unique_name)
    sub = RedisWeightSubscriber(redis_url, unique_name, poll_s=0.05)
    try:
        publisher.publish(1, small_model(1))
        sub.wait_for(1, timeout=WAIT_S)
        publisher.publish(2, small_model(2, hidden=9))
        with pytest.raises(WeightSyncTimeout):
            sub.wait_for(2, timeout=0.5)
        assert sub.latest_version() == 1
    finally:
        sub.close()
        publisher.close()


def test_closed_subscriber_stops_waiting(redis_url: str, unique_name: str) -> None:
    sub = RedisWeightSubscriber(redis_url, unique_name, poll_s=0.05)
    sub.close()
    with pytest.raises(WeightSyncTimeout, match="closed"):
        sub.wait_for(1, timeout=WAIT_S)


def test_weights_in_the_object_store_redis_carries_the_signal(
    redis_url: str, unique_name: str, tmp_path: Path
) -> None:
    sync = SyncConfig(backend="redis", redis_url=redis_url, key=unique_name, weights_in_store=True)
    store_cfg = StoreConfig(url=str(tmp_path / "store"))
    publisher = RedisWeightPublisher.from_config(sync, store_cfg)
    sub = RedisWeightSubscriber.from_config(sync, store_cfg, like=small_model(0))
    raw = redis.Redis.from_url(redis_url)
    try:
        for version in range(1, 8):
            publisher.publish(version, small_model(version))
            assert sub.wait_for(version, timeout=WAIT_S)[0] == version
        fields = raw.hgetall(weights_key(unique_name))
        assert b"payload" not in fields
        blob = fields[b"blob"].decode()
        assert blob.startswith(f"weights/{unique_name}/v000000000007-")
        store = LocalRolloutStore(tmp_path / "store")
        kept = sorted(p.name[:13] for p in (tmp_path / "store" / "blobs" / "weights" / unique_name).iterdir())
        assert kept == [f"v{v:012d}" for v in range(4, 8)]  # older ones pruned
        assert store.get_blob(blob)
    finally:
        sub.close()
        publisher.close()
        raw.close()


def test_a_refused_publish_leaves_the_published_blob_alone(
    redis_url: str, unique_name: str, tmp_path: Path
) -> None:
    """Publishing a version that is not newer (a second learner, a replayed publish) is
    refused without touching the store: subscribers that start later still verify the
    published version (the bytes of a re-encode differ, so overwriting them would get the
    version rejected for its checksum)."""
    sync = SyncConfig(backend="redis", redis_url=redis_url, key=unique_name, weights_in_store=True)
    store_cfg = StoreConfig(url=str(tmp_path / "store"))
    publisher = RedisWeightPublisher.from_config(sync, store_cfg)
    blobs = tmp_path / "store" / "blobs" / "weights" / unique_name
    try:
        publisher.publish(2, small_model(2))
        before = {p.name: p.read_bytes() for p in blobs.iterdir()}
        for stale, tensors in ((2, small_model(2)), (2, small_model(9)), (1, small_model(1))):
            with pytest.raises(ValueError, match="not newer"):
                publisher.publish(stale, tensors)
        assert {p.name: p.read_bytes() for p in blobs.iterdir()} == before
        with RedisWeightSubscriber.from_config(sync, store_cfg) as sub:
            version, got = sub.wait_for(2, timeout=WAIT_S)
        assert version == 2 and all(torch.equal(got[k], v) for k, v in small_model(2).items())
    finally:
        publisher.close()


def test_a_publisher_that_loses_a_race_keeps_a_blob_the_winner_published(
    redis_url: str, unique_name: str, tmp_path: Path
) -> None:
    """Another publisher publishes between our version check and our write: ours is refused
    and its blob removed, unless the winner's Redis entry names that very blob (the same
    version and bytes), which subscribers then read."""
    sync = SyncConfig(backend="redis", redis_url=redis_url, key=unique_name, weights_in_store=True)
    store_cfg = StoreConfig(url=str(tmp_path / "store"))
    publisher = RedisWeightPublisher.from_config(sync, store_cfg)
    raw = redis.Redis.from_url(redis_url)
    put = publisher.store.put_blob

    def winner_names(name: str, data: bytes) -> None:  # the race, right after our check
        put(name, data)
        raw.hset(weights_key(unique_name), "blob", name if same else "weights/other.safetensors")
        raw.set(version_key(unique_name), 3)

    publisher.store.put_blob = winner_names
    try:
        for same in (False, True):
            with pytest.raises(ValueError, match="not newer"):
                publisher.publish(3, small_model(3))
            raw.delete(version_key(unique_name))
            assert len(list((tmp_path / "store").rglob("v*.safetensors"))) == int(same)
    finally:
        publisher.close()
        raw.close()


def test_weights_in_store_needs_a_store(redis_url: str) -> None:
    sync = SyncConfig(redis_url=redis_url, weights_in_store=True)
    with pytest.raises(UserError, match=r"store\.url"):
        RedisWeightPublisher.from_config(sync, None)


def policy_value_2x256(obs_dim: int = 40, actions: int = 20) -> Tensors:
    """The default model (docs/architecture.md, Learning): separate policy and value MLPs, 2 x 256 hidden units."""
    torch.manual_seed(0)
    policy = nn.Sequential(nn.Linear(obs_dim, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                           nn.Linear(256, actions))
    value = nn.Sequential(nn.Linear(obs_dim, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                          nn.Linear(256, 1))
    state = {f"policy.{k}": v for k, v in policy.state_dict().items()}
    state.update({f"value.{k}": v for k, v in value.state_dict().items()})
    return state


def test_publish_to_all_subscribers_latency(redis_url: str, unique_name: str) -> None:
    """Median and p99 time from publish() to both subscribers holding verified weights."""
    publishes, n_subs = 200, 2
    state = policy_value_2x256()
    arrived: dict[int, list[float]] = {}
    lock = threading.Condition()

    def on_update(version: int, _: Tensors) -> None:
        with lock:
            arrived.setdefault(version, []).append(time.perf_counter())
            lock.notify_all()

    publisher = RedisWeightPublisher(redis_url, unique_name)
    subs = [RedisWeightSubscriber(redis_url, unique_name, poll_s=0.5, on_update=on_update,
                                  like=state) for _ in range(n_subs)]
    latencies_ms = []
    try:
        for version in range(1, publishes + 1):
            start = time.perf_counter()
            publisher.publish(version, state)
            with lock:
                assert lock.wait_for(lambda v=version: len(arrived.get(v, [])) == n_subs, WAIT_S)
                latencies_ms.append((max(arrived[version]) - start) * 1e3)
    finally:
        for sub in subs:
            sub.close()
        publisher.close()
    nbytes = sum(t.numel() * t.element_size() for t in state.values())
    q = statistics.quantiles(latencies_ms, n=100)
    print(f"\nredis weight sync, {nbytes / 1e6:.2f} MB, {publishes} publishes, {n_subs} subscribers: "
          f"median {statistics.median(latencies_ms):.2f} ms, p99 {q[98]:.2f} ms, "
          f"max {max(latencies_ms):.2f} ms")
    assert len(latencies_ms) == publishes
