"""One contract for every ShardQueue (store/shard_queue.py): a Redis Stream on a real
redis-server on loopback, and the in-memory stream. A consumer's "crash" is dropping its
queue object without acking and opening a new one under the same consumer name."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from prometheus_client import CollectorRegistry

from skurl.errors import UserError
from skurl.store.api import ShardManifest
from skurl.store.shard_queue import (
    FIELD,
    Ledger,
    MemoryShardQueue,
    MemoryStream,
    ShardQueue,
    stream_key,
)
from skurl.telemetry.metrics import use_registry


def manifest(iteration: int, collector: str = "c0", version: int | None = None) -> ShardManifest:
    return ShardManifest(iteration=iteration, collector_id=collector,
                         policy_version=iteration if version is None else version, sku_start=0, sku_count=4,
                         rows=8, arrays=(), sha256="0" * 64, payload_bytes=10, raw_bytes=20, created=1.0)


@dataclass
class Backend:
    """Opens queues on one stream; `inject` adds a raw entry; `idle` makes pending entries old."""

    open: Callable[..., ShardQueue]
    inject: Callable[[dict[bytes, bytes]], str]
    idle: Callable[[float], None]


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["memory", "redis"])
def backend(request: pytest.FixtureRequest, unique_name: str) -> Iterator[Backend]:
    if request.param == "memory":
        clock = FakeClock()
        stream = MemoryStream(stream_key(unique_name), clock=clock)

        def idle(seconds: float) -> None:
            clock.now += seconds

        yield Backend(lambda consumer, **kw: MemoryShardQueue(stream, consumer, **kw), stream.append, idle)
        return
    from skurl.store.shard_queue_redis import RedisShardQueue

    url = request.getfixturevalue("redis_url")
    opened: list[RedisShardQueue] = []

    def open_queue(consumer: str, **kw: object) -> RedisShardQueue:
        opened.append(RedisShardQueue(url, unique_name, consumer, timeout_s=5.0, **kw))  # type: ignore[arg-type]
        return opened[-1]

    def inject(fields: dict[bytes, bytes]) -> str:
        return str(opened[0].client.xadd(stream_key(unique_name), fields).decode())

    def idle(seconds: float) -> None:
        import time

        time.sleep(seconds)

    yield Backend(open_queue, inject, idle)
    if opened:
        opened[0].client.delete(stream_key(unique_name))
    for queue in opened:
        queue.close()


def ids(entries: list) -> list[str]:
    return [e.id for e in entries]


def test_entries_come_in_order_with_their_manifests(backend: Backend) -> None:
    producer, learner = backend.open("collector-0"), backend.open("learner")
    sent = [manifest(i, f"c{i % 2}") for i in range(5)]
    put = [producer.put(m) for m in sent]
    got = learner.read(count=3) + learner.read(count=10)
    assert ids(got) == put and [e.manifest for e in got] == sent
    assert learner.read(count=10, block_s=0.05) == []


def test_acked_entries_leave_the_backlog_unacked_ones_stay(backend: Backend) -> None:
    q = backend.open("learner")
    for i in range(4):
        q.put(manifest(i))
    got = q.read()
    assert q.backlog() == 4
    assert q.ack(ids(got[:3])) == 3 and q.ack(ids(got[:1])) == 0  # twice is harmless
    assert q.backlog() == 1
    q.put(manifest(4))
    assert q.backlog() == 2  # one pending, one never read


def test_a_restarted_consumer_reads_its_pending_entries_first(backend: Backend) -> None:
    q = backend.open("learner")
    for i in range(4):
        q.put(manifest(i))
    got = q.read()
    q.ack(ids(got[:1]))
    del q  # crash: entries 1..3 read, never acked
    backend.open("collector").put(manifest(4))
    again = backend.open("learner")
    pending = again.read(count=2) + again.read(count=2)
    assert ids(pending) == ids(got[1:])  # own pending first, in order, without the acked one
    assert [e.manifest.iteration for e in again.read()] == [4]  # then the new one


def test_a_dead_consumers_entries_are_claimed_by_another(backend: Backend) -> None:
    dead = backend.open("learner-a")
    for i in range(3):
        dead.put(manifest(i))
    taken = dead.read()
    other = backend.open("learner-b")
    assert other.read() == []  # delivered to learner-a: not new to the group
    assert other.claim_idle(min_idle_s=60.0) == []  # not idle long enough
    backend.idle(0.2)
    claimed = other.claim_idle(min_idle_s=0.1)
    assert ids(claimed) == ids(taken)
    assert other.ack(ids(claimed)) == 3 and other.backlog() == 0


def test_a_malformed_entry_is_refused_in_one_line_and_acked(backend: Backend,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    q = backend.open("learner")
    good = q.put(manifest(0))
    bad = [backend.inject({FIELD: b"\x80\x04\x95 not json"}),  # a pickle's first bytes: never unpickled
           backend.inject({FIELD: json.dumps({"iteration": 1}).encode()}),
           backend.inject({FIELD: manifest(2).to_json().replace(b'"iteration": 2', b'"iteration": -2')}),
           backend.inject({b"other": b"x"})]
    with use_registry(CollectorRegistry()) as m, caplog.at_level(logging.ERROR, "skurl.store.shard_queue"):
        got = q.read()
    assert ids(got) == [good]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 4 and all("refused" in line and "\n" not in line for line in lines)
    assert all(entry in " ".join(lines) for entry in bad)
    assert "iteration -2" in lines[2] and "expected one field 'manifest'" in lines[3]
    assert m.registry.get_sample_value("shard_queue_refused_total") == 4
    assert q.backlog() == 1  # the refused ones are acked; the good one is pending


def test_trimming_keeps_every_unacked_entry(backend: Backend) -> None:
    q = backend.open("learner", maxlen=2)
    put = [q.put(manifest(i)) for i in range(6)]
    got = q.read(count=4)  # 4 delivered, 2 never read
    q.ack(ids(got[:3]))  # entries 0..2 acked; 3 pending; 4, 5 unread
    assert q.trim() == 3  # only acked ones go, though 3 pending + unread exceed maxlen 2
    assert q.trim() == 0
    q.ack(ids(got[3:]))
    fresh = backend.open("learner", maxlen=2)  # re-reads its pending (none), then the unread ones
    assert ids(fresh.read()) == put[4:]
    fresh.ack(put[4:])
    assert fresh.trim() == 1 and fresh.backlog() == 0  # down to maxlen


def test_the_ledger_acks_on_commit_and_trains_none_twice(backend: Backend) -> None:
    """A crash after the checkpoint of update 1 but before its ack: the restarted learner
    acks iteration 1's entries without training them and trains iteration 2's once."""
    q = backend.open("learner")
    for i in range(3):
        q.put(manifest(i, "c0"))
        q.put(manifest(i, "c1"))
    q.put(manifest(1, "c1"))  # a retried put: the same shard announced twice
    ledger = Ledger(q)
    ledger.add(q.read())
    assert ledger.ready(0) == 2 and ledger.ready(1) == 2
    assert [m.collector_id for m in ledger.take(0)] == ["c0", "c1"]
    assert ledger.committed(1) == 2  # checkpoint of update 0: its two entries acked
    assert len(ledger.take(1)) == 2  # update 1 trains c0, c1 once (the duplicate rides along)
    del q, ledger  # crash after checkpoint 2 was written, before committed(2) acked
    again = backend.open("learner")
    restarted = Ledger(again, trained_through=2)
    restarted.add(again.read())
    assert restarted.skipped == 3  # iteration 1's three entries: in the checkpoint already
    assert restarted.ready(1) == 0 and restarted.ready(2) == 2
    assert [m.iteration for m in restarted.take(2)] == [2, 2]
    assert restarted.committed(3) == 2 and again.backlog() == 0


def test_the_bounded_ledger_refuses_stale_shards_and_settles_by_entry_id(backend: Backend) -> None:
    """Bounded mode: the oldest shards read, whatever their iteration; those older than the
    oldest version allowed refused; a checkpoint records the ids its updates trained."""
    q = backend.open("learner")
    put = [q.put(manifest(i, "c0", version=v)) for i, v in enumerate([0, 3, 4, 4, 5])]
    duplicate = q.put(manifest(2, "c0", version=4))  # a retried put of shard it00000002/c0
    ledger = Ledger(q)
    ledger.add(q.read())
    with use_registry(CollectorRegistry()) as m:
        first = ledger.take_oldest(2, min_version=2)
    assert [(x.iteration, x.policy_version) for x in first] == [(1, 3), (2, 4)]
    assert ledger.refused_stale == 1 and m.registry.get_sample_value("stale_shards_refused_total") == 1
    recorded = ledger.uncommitted_ids()  # the checkpoint after this update holds these
    assert sorted(recorded) == sorted([put[1], put[2], duplicate])  # the duplicate rides along
    del q, ledger  # crash after that checkpoint, before commit_all acked
    again = backend.open("learner")
    restarted = Ledger(again, trained_ids=recorded)
    restarted.add(again.read())
    assert restarted.skipped == 3
    assert [x.iteration for x in restarted.take_oldest(10, min_version=2)] == [3, 4]
    assert restarted.commit_all() == 2 and again.backlog() == 0



def test_the_stream_is_named_by_the_run_and_a_bad_name_is_one_line() -> None:
    assert stream_key("prod-2026.12") == "rl:shards:prod-2026.12"
    with pytest.raises(UserError, match=r"^shard queue run name 'a b': expected 1-128 letters") as exc:
        stream_key("a b")
    assert "\n" not in str(exc.value)
