"""Decoupled bounded staleness through the run's Redis Stream (modes/decoupled/shard_stream.py), with
a real redis-server and collectors as servers in this process (InProcessRoles): a learner
killed mid-stream and resumed trains every announced episode at most once and loses none;
Redis restarted mid-run: collectors keep their last weights, everyone reconnects."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import redis
from test_decoupled import tiny
from test_staleness_modes import assert_bounded

from skurl.config import Config
from skurl.modes.decoupled.supervisor import InProcessRoles
from skurl.modes.decoupled.wiring import run_with_collectors
from skurl.store.api import ShardManifest
from skurl.store.shard_queue import parse_id
from skurl.sync.redis import RedisWeightPublisher
from skurl.telemetry.logger import read_metrics

if TYPE_CHECKING:
    from conftest import RedisProcess

pytestmark = pytest.mark.integration


def bounded_cfg(url: str, key: str, store: Path, *extra: str) -> Config:
    return tiny("sync.backend=redis", f"sync.redis_url={url}", f"sync.key={key}", "sync.poll_s=0.1",
                f"store.url={store}", "collect.staleness=2", "collect.staleness_mode=bounded", *extra)


@pytest.fixture
def roles() -> Iterator[Any]:
    opened: list[InProcessRoles] = []

    def start(cfg: Config, run_name: str) -> InProcessRoles:
        opened.append(InProcessRoles(cfg, run_name=run_name))
        return opened[-1]

    yield start
    for r in opened:
        r.close()


class CrashIn:
    """Around the run's collectors: the learner dies in iteration `at`, after its rollout
    came back (updates before it are done, the last checkpoint may be older)."""

    def __init__(self, inner: Any, at: int) -> None:
        self.inner, self.at = inner, at

    def collect(self, iteration: int, seed: int, version: int, sample: Any) -> Any:
        batch = self.inner.collect(iteration, seed, version, sample)
        if iteration == self.at:
            raise RuntimeError("learner killed")
        return batch

    def close(self) -> None:
        self.inner.close()


def stream_episodes(redis_url: str, run: str) -> tuple[list[int], set[int]]:
    """Episodes of every entry on the run's stream, and of those not acked (pending, or
    never read by the learner)."""
    client = redis.Redis.from_url(redis_url)
    key = f"rl:shards:{run}"
    entries = {i.decode(): ShardManifest.from_json(f[b"manifest"], "test").iteration
               for i, f in client.xrange(key, "-", "+")}
    pending = {entries[p["message_id"].decode()] for p in client.xpending_range(key, "learner", "-", "+", 1000)}
    group, = client.xinfo_groups(key)
    delivered = parse_id(group["last-delivered-id"].decode())
    unread = {e for i, e in entries.items() if parse_id(i) > delivered}
    client.close()
    return sorted(entries.values()), pending | unread


def test_learner_killed_mid_stream_loses_no_shard_and_trains_none_twice(
        tmp_path: Path, redis_url: str, unique_name: str, roles: Any) -> None:
    """The learner dies in iteration 3 (checkpoint 2 holds updates 0 and 1; update 2 and the
    episodes collected ahead are announced, not acked); resumed, it trains every announced
    episode once or refuses it by the staleness rule, and only the episodes collected
    ahead at the end stay unacked."""
    cfg = bounded_cfg(redis_url, unique_name, tmp_path / "store", "train.iterations=6", "train.checkpoint_every=2")
    run = tmp_path / f"run-{unique_name}"
    cluster = roles(cfg, run.name)
    with pytest.raises(RuntimeError, match="learner killed"):
        run_with_collectors(cluster.cfg, run, cluster.collector_addresses, baseline=False,
                            wrap=lambda inner, trainer: CrashIn(inner, 3))
    announced, pending = stream_episodes(redis_url, run.name)
    assert len(announced) == len(set(announced)) * 2  # two collectors, one shard each per episode
    assert not {0, 1} & pending and {2, 3} <= pending
    run_with_collectors(cluster.cfg, run, cluster.collector_addresses, baseline=False, resume=True)
    records = read_metrics(run / "metrics.jsonl")
    trained = [int(r["behaviour_episode"]) for r in records]
    assert len(records) == 6 and len(trained) == len(set(trained)), trained  # none twice
    after, left = stream_episodes(redis_url, run.name)
    refused = int(records[-1]["stale_rollouts_refused"])  # by the resumed learner
    assert not pending & left, (pending, left)  # each unacked at the crash was trained or refused since
    assert len(pending - set(trained)) <= refused
    assert len(set(after)) == len(trained) + len(left) + refused, (after, trained, left, refused)  # none lost
    assert_bounded(run, 2, 6)


def test_redis_restarted_mid_run_collectors_keep_their_weights_and_reconnect(
        tmp_path: Path, redis_process: RedisProcess, roles: Any, caplog: pytest.LogCaptureFixture) -> None:
    """Redis (no persistence) goes away for a second after the second weights publish:
    the weights key and the stream are gone. Collectors keep the weights they hold, the
    publish and every stream command retry until Redis is back, the consumer group is
    recreated, and the run finishes within the staleness bound."""
    cfg = bounded_cfg(redis_process.url, "policy", tmp_path / "store", "train.iterations=5")
    run = tmp_path / "run"
    cluster = roles(cfg, run.name)
    restarts: list[threading.Timer] = []
    held: list[int] = []
    published: list[int] = []  # wire versions, in order

    class RestartingRedis(RedisWeightPublisher):
        def publish(self, version: int, tensors: dict[str, Any]) -> None:
            # Under load the bounded learner may train several updates between publishes, so
            # wire versions can skip (0, 2, 4): key on the third publish, not on a number.
            if len(published) == 2 and not restarts:
                # Collectors follow Redis on their own threads: the last publish may still be
                # on its way; wait (bounded) until each holds it, then take Redis away.
                deadline = time.monotonic() + 30.0
                while time.monotonic() < deadline and any(
                        _held(c) < published[-1] for c in cluster.collectors):
                    time.sleep(0.05)
                held.extend(c.servicer._pending.version for c in cluster.collectors)
                redis_process.stop()
                restarts.append(threading.Timer(1.0, redis_process.start))
                restarts[0].start()
            super().publish(version, tensors)  # retries until Redis is back
            published.append(version)

    def _held(collector: Any) -> int:
        version = collector.servicer._pending.version
        return -1 if version is None else int(version)

    weights = RestartingRedis.from_config(cfg.sync, cfg.store)
    try:
        with caplog.at_level(logging.WARNING):
            run_with_collectors(cluster.cfg, run, cluster.collector_addresses, weights=weights, baseline=False)
    finally:
        weights.close()
        for t in restarts:
            t.join()
    assert len(restarts) == 1 and len(held) == 2, (published, held)
    assert all(v is not None and v >= published[1] for v in held), (published, held)  # kept across the restart
    assert_bounded(run, 2, 5)
    lines = [r.getMessage() for r in caplog.records]
    assert any("consumer group is gone" in line or "reconnected" in line for line in lines), lines[-20:]
