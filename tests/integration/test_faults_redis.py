"""Weight sync faults with a real redis-server: corrupted weights in Redis (collectors keep
the previous version; the learner publishes again once the barrier times out) and Redis
restarted mid-run (publisher and subscribers ride over it). Collectors and sim servers run
as servers inside this process (InProcessRoles): same gRPC services, no start-up cost."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import redis
import torch
from test_decoupled import assert_same_training, tiny

from skurl.config import Config
from skurl.modes import colocated
from skurl.modes.decoupled.collector_client import CollectorClient
from skurl.modes.decoupled.supervisor import InProcessRoles
from skurl.modes.decoupled.wiring import run_with_collectors
from skurl.rpc.errors import RequestRejectedError
from skurl.sync.redis import RedisWeightPublisher, updates_channel, version_key, weights_key
from skurl.telemetry.logger import read_metrics
from skurl.train import run as training
from skurl.weights.codec import encode_weights

if TYPE_CHECKING:
    from conftest import RedisProcess

pytestmark = pytest.mark.integration


def redis_cfg(url: str, key: str, store: Path, *extra: str) -> Config:
    return tiny("sync.backend=redis", f"sync.redis_url={url}", f"sync.key={key}", "sync.poll_s=0.1",
                "sync.timeout_s=3", f"store.url={store}", *extra)


def publish_corrupted(url: str, key: str, version: int, tensors: dict[str, torch.Tensor]) -> None:
    """What a damaged write looks like: the hash announces `version` with a sha256 its
    payload does not have (one flipped byte)."""
    blob = encode_weights(tensors, version, key)
    payload = bytearray(blob.payload)
    payload[len(payload) // 2] ^= 0xFF
    client = redis.Redis.from_url(url)
    try:
        pipe = client.pipeline()
        pipe.delete(weights_key(key))
        pipe.hset(weights_key(key), mapping={"version": version, "model_key": key,
                                             "sha256": blob.sha256, "payload": bytes(payload)})
        pipe.set(version_key(key), version)
        pipe.publish(updates_channel(key), version)
        pipe.execute()
    finally:
        client.close()


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("colocated") / "run"
    training.start(colocated.mode, tiny(), run_dir, baseline=False)
    return run_dir


@pytest.fixture
def roles(request: pytest.FixtureRequest) -> Iterator[Any]:
    opened: list[InProcessRoles] = []

    def start(cfg: Config) -> InProcessRoles:
        opened.append(InProcessRoles(cfg))
        return opened[-1]

    yield start
    for r in opened:
        r.close()


def test_collector_keeps_its_version_when_redis_holds_corrupted_weights(
        tmp_path: Path, redis_url: str, unique_name: str, roles: Any) -> None:
    cfg = redis_cfg(redis_url, unique_name, tmp_path / "store", "deploy.collectors=1")
    cluster = roles(cfg)
    model = cluster.collectors[0].servicer._collector.model
    tensors = {k: v.clone() for k, v in model.state_dict().items()}
    weights = RedisWeightPublisher.from_config(cfg.sync, cfg.store)
    client = CollectorClient(cluster.collector_addresses[0], cfg.rpc)
    try:
        weights.publish(1, tensors)
        assert client.collect(iteration=0, seed=0, episode=0, min_version=1, wait_s=10)["policy_version"] == 1
        publish_corrupted(redis_url, unique_name, 2, tensors)
        with pytest.raises(RequestRejectedError, match=r"FAILED_PRECONDITION.*version 2.*holding 1"):
            client.collect(iteration=1, seed=0, episode=1, min_version=2, wait_s=1.5)
        assert client.stats()["pending_version"] == 1
        # The previous version still works, and a good newer one is taken.
        assert client.collect(iteration=1, seed=0, episode=1, min_version=1, wait_s=5)["policy_version"] == 1
        weights.publish(3, tensors)
        assert client.collect(iteration=2, seed=0, episode=2, min_version=3, wait_s=10)["policy_version"] == 3
    finally:
        client.close()
        weights.close()


class CorruptOnce(RedisWeightPublisher):
    """Writes wire version 1 damaged (as a torn or tampered write would leave it)."""

    cfg: Config

    @classmethod
    def of(cls, cfg: Config) -> CorruptOnce:
        weights = cls.from_config(cfg.sync, cfg.store)
        weights.cfg = cfg
        return weights

    def publish(self, version: int, tensors: dict[str, Any]) -> None:
        if version == 1:
            publish_corrupted(self.cfg.sync.redis_url, self.cfg.sync.key, version, tensors)
        else:
            super().publish(version, tensors)


def test_learner_publishes_again_when_no_collector_can_load_the_weights(
        tmp_path: Path, redis_url: str, unique_name: str, roles: Any, reference: Path) -> None:
    cfg = redis_cfg(redis_url, unique_name, tmp_path / "store")
    cluster = roles(cfg)
    weights = CorruptOnce.of(cfg)
    run_dir = tmp_path / "run"
    try:
        run_with_collectors(cluster.cfg, run_dir, cluster.collector_addresses, weights=weights,
                            baseline=False)
    finally:
        weights.close()
    logs = read_metrics(run_dir / "metrics.jsonl")
    assert [r["republished_weights"] for r in logs] == [0, 1, 0]
    assert_same_training(reference, run_dir)


def test_redis_restarted_mid_run_with_weights_in_the_store(tmp_path: Path, redis_process: RedisProcess, roles: Any,
                                 reference: Path) -> None:
    # Redis carries only the version signal here; the weights live in the rollout store.
    cfg = redis_cfg(redis_process.url, "policy", tmp_path / "store", "sync.timeout_s=20",
                    "sync.weights_in_store=true")
    cluster = roles(cfg)
    restarts: list[threading.Thread] = []

    class RestartingRedis(RedisWeightPublisher):
        def publish(self, version: int, tensors: dict[str, Any]) -> None:
            if version == 2 and not restarts:  # after iteration 1's update (a fresh key: wire = learner)
                redis_process.stop()  # every key is gone (no persistence)
                restarts.append(threading.Timer(1.0, redis_process.start))
                restarts[0].start()
            super().publish(version, tensors)  # retries until Redis is back

    weights = RestartingRedis.from_config(cfg.sync, cfg.store)
    run_dir = tmp_path / "run"
    try:
        run_with_collectors(cluster.cfg, run_dir, cluster.collector_addresses, weights=weights,
                            baseline=False)
    finally:
        weights.close()
        for t in restarts:
            t.join()
    assert len(restarts) == 1
    assert any((tmp_path / "store" / "blobs" / "weights").rglob("*.safetensors"))
    assert_same_training(reference, run_dir)
