"""Faults of the shard queue (store/shard_queue*.py) with real processes: a learner-like
consumer SIGKILLed between its update and its ack (twice, at both gaps) and restarted, once
under another consumer name: every shard is trained exactly once in the surviving record (the
learner's checkpoint, written atomically); and Redis restarted mid-stream, with persistence
(nothing lost) and without (the loss is counted and the queue keeps working)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import redis
from prometheus_client import CollectorRegistry

from conftest import free_port, wait_until
from skurl.store.api import ShardManifest
from skurl.store.shard_queue import Ledger
from skurl.store.shard_queue_redis import RedisShardQueue, ShardQueueError
from skurl.telemetry.metrics import use_registry

if TYPE_CHECKING:
    from conftest import RedisProcess

pytestmark = pytest.mark.integration
SRC = Path(__file__).resolve().parents[2] / "src"
ITERATIONS, COLLECTORS = 6, 2

# The learner: update k "trains" iteration k's shards (their names join the trained list), a
# checkpoint records the list and k + 1 atomically, and only then are the entries acked.
# KILL=update:k dies after update k, before its checkpoint; KILL=checkpoint:k after the
# checkpoint, before the ack.
LEARNER = """
import json, os, signal, sys, time
from pathlib import Path
from skurl import atomic
from skurl.store.shard_queue import Ledger
from skurl.store.shard_queue_redis import RedisShardQueue, ShardQueueError

url, run, consumer, state, kill = sys.argv[1:6]
iterations, collectors, state = int(sys.argv[6]), int(sys.argv[7]), Path(state)
ckpt = json.loads(state.read_text()) if state.exists() else {"iteration": 0, "trained": []}
queue = RedisShardQueue(url, run, consumer, timeout_s=10.0)
ledger = Ledger(queue, trained_through=ckpt["iteration"])
claimed = queue.claim_idle(min_idle_s=0.0)  # a dead consumer's entries (none when it is us)
ledger.add(claimed)
deadline = time.monotonic() + 30
while ckpt["iteration"] < iterations:
    k = ckpt["iteration"]
    while ledger.ready(k) < collectors:
        if time.monotonic() > deadline:
            sys.exit(3)
        ledger.add(queue.read(count=16, block_s=0.5))
    trained = ckpt["trained"] + [m.name for m in ledger.take(k)]  # the update
    if kill == f"update:{k}":
        os.kill(os.getpid(), signal.SIGKILL)
    ckpt = {"iteration": k + 1, "trained": trained}
    atomic.write_text(state, json.dumps(ckpt))  # the checkpoint
    if kill == f"checkpoint:{k}":
        os.kill(os.getpid(), signal.SIGKILL)
    ledger.committed(k + 1)
print(json.dumps({"skipped": ledger.skipped, "claimed": len(claimed)}))
"""


def manifest(iteration: int, collector: str) -> ShardManifest:
    return ShardManifest(iteration=iteration, collector_id=collector, policy_version=iteration, sku_start=0,
                         sku_count=4, rows=8, arrays=(), sha256="0" * 64, payload_bytes=1, raw_bytes=1, created=0.0)


def learner(script: Path, url: str, run: str, consumer: str, state: Path, kill: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.run([sys.executable, str(script), url, run, consumer, str(state), kill, str(ITERATIONS),
                           str(COLLECTORS)], env=env, capture_output=True, text=True, timeout=60)


def test_a_learner_killed_between_update_and_ack_trains_every_shard_once(
        tmp_path: Path, redis_url: str, unique_name: str) -> None:
    script, state = tmp_path / "learner.py", tmp_path / "checkpoint.json"
    script.write_text(LEARNER)
    producer = RedisShardQueue(redis_url, unique_name, "collectors")
    for k in range(ITERATIONS):
        for c in range(COLLECTORS):
            producer.put(manifest(k, f"collector-{c}"))
    producer.put(manifest(2, "collector-1"))  # a retried put: shard it00000002/collector-1 twice

    first = learner(script, redis_url, unique_name, "learner", state, kill="checkpoint:1")
    assert first.returncode == -signal.SIGKILL, first.stderr
    assert json.loads(state.read_text())["iteration"] == 2
    second = learner(script, redis_url, unique_name, "learner", state, kill="update:3")
    assert second.returncode == -signal.SIGKILL, second.stderr
    assert json.loads(state.read_text())["iteration"] == 3  # update 3 died before its checkpoint
    third = learner(script, redis_url, unique_name, "learner-b", state)  # another name: claims
    assert third.returncode == 0, third.stderr

    expected = [f"it{k:08d}/collector-{c}" for k in range(ITERATIONS) for c in range(COLLECTORS)]
    assert json.loads(state.read_text()) == {"iteration": ITERATIONS, "trained": expected}
    summary = json.loads(third.stdout)
    assert summary["claimed"] == 3 * COLLECTORS  # iterations 3..5: read by the dead one, never acked
    assert summary["skipped"] == 0  # the second run acked iteration 1's without training them
    assert producer.backlog() == 0
    pending = producer.client.xpending(producer.stream, producer.group)
    assert pending["pending"] == 0
    producer.client.delete(producer.stream)
    producer.close()


def persistent_redis(workdir: Path, port: int) -> subprocess.Popen[bytes]:
    """A redis-server that writes every command to its append-only file before answering."""
    proc = subprocess.Popen([shutil.which("redis-server") or "redis-server", "--port", str(port), "--bind",
                             "127.0.0.1", "--save", "", "--appendonly", "yes", "--appendfsync", "always",
                             "--dir", str(workdir)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    wait_until(lambda: _pings(port), 10, f"redis-server on port {port}")
    return proc


def _pings(port: int) -> bool:
    try:
        return bool(redis.Redis(port=port, socket_connect_timeout=0.2).ping())
    except redis.ConnectionError:
        return False


@pytest.fixture
def aof_redis(tmp_path: Path) -> Iterator[tuple[int, list[subprocess.Popen[bytes]]]]:
    if shutil.which("redis-server") is None:
        pytest.skip("needs the redis-server binary (apt-get install redis-server)")
    port, procs = free_port(), []
    procs.append(persistent_redis(tmp_path, port))
    yield port, procs
    for proc in procs:
        proc.kill()
        proc.wait(timeout=10)


def test_redis_restarted_mid_stream_with_persistence_loses_nothing(
        tmp_path: Path, aof_redis: tuple[int, list[subprocess.Popen[bytes]]]) -> None:
    port, procs = aof_redis
    url = f"redis://127.0.0.1:{port}/0"
    producer, consumer = RedisShardQueue(url, "run", "collectors"), RedisShardQueue(url, "run", "learner")
    ledger = Ledger(consumer)
    for c in range(3):
        producer.put(manifest(0, f"c{c}"))
    ledger.add(consumer.read(count=2))  # two read (pending), one unread when Redis dies
    procs[0].kill()  # SIGKILL: only what the append-only file holds survives
    procs[0].wait(timeout=10)
    restart = threading.Timer(1.0, lambda: procs.append(persistent_redis(tmp_path, port)))
    restart.start()
    try:
        producer.put(manifest(1, "c0"))  # retried with backoff until Redis is back
        producer.put(manifest(1, "c1"))
        producer.put(manifest(1, "c2"))
    finally:
        restart.join()
    while ledger.ready(0) < 3 or ledger.ready(1) < 3:
        ledger.add(consumer.read(count=16, block_s=0.5))
    assert [m.collector_id for m in ledger.take(0) + ledger.take(1)] == ["c0", "c1", "c2"] * 2
    assert ledger.committed(2) == 6 and consumer.backlog() == 0 and consumer.resets == 0


def test_redis_restarted_without_persistence_is_counted_and_the_queue_goes_on(
        redis_process: RedisProcess) -> None:
    with use_registry(CollectorRegistry(), "learner") as m:
        producer = RedisShardQueue(redis_process.url, "run", "collectors")
        consumer = RedisShardQueue(redis_process.url, "run", "learner")
        producer.put(manifest(0, "c0"))
        producer.put(manifest(0, "c1"))
        assert len(consumer.read(count=1)) == 1
        redis_process.stop()
        redis_process.start()  # empty: the stream, its group and the pending entry are gone
        assert consumer.read(block_s=0.2) == [] and consumer.resets == 1
        assert m.registry.get_sample_value("shard_queue_resets_total") == 1
        producer.put(manifest(1, "c0"))  # the producer reconnects; the recreated group reads it
        got = consumer.read(block_s=0.5)
        assert [(e.manifest.iteration, e.manifest.collector_id) for e in got] == [(1, "c0")]
        assert consumer.ack([e.id for e in got]) == 1 and consumer.backlog() == 0


def test_an_unreachable_redis_is_one_line_naming_it(closed_port: int, redis_process: RedisProcess) -> None:
    url = f"redis://127.0.0.1:{closed_port}/0"
    with pytest.raises(ShardQueueError, match=rf"^shard queue: cannot connect to Redis at '{url}'"):
        RedisShardQueue(url, "run", "learner", timeout_s=1.0)
    queue = RedisShardQueue(redis_process.url, "run", "collectors", timeout_s=0.5)
    redis_process.stop()  # away for longer than the queue's timeout: one line, after the retries
    with pytest.raises(ShardQueueError, match=r"^shard queue rl:shards:run: Redis at .* unreachable for 0.5 s") as exc:
        queue.put(manifest(0, "c0"))
    assert "\n" not in str(exc.value)
    redis_process.start()
    assert queue.put(manifest(0, "c0"))  # and back once it is up
