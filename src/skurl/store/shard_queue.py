"""The queue of stored shards between collectors and the learner (decoupled near-on-policy).

Collectors `put` a shard's manifest once the shard is in the rollout store; the learner
`read`s them as one consumer of a group and `ack`s each only after the update that trained
it is checkpointed. Entries read but never acked stay pending under the consumer's name: a
learner re-opened under that name reads them again first, and `claim_idle` takes a dead
consumer's. `Ledger` holds the rule that trains none twice (docs/near_on_policy.md). Entries
are JSON manifests, validated when read (never unpickled); a malformed one is refused in one
line and acked. Backends: RedisShardQueue (a Redis Stream, store/shard_queue_redis.py) and
MemoryShardQueue (colocated mode, tests), under one contract suite.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from skurl.store.api import CorruptShardError, ShardManifest, check_collector_id, check_iteration
from skurl.store.api import StoreError as _StoreError
from skurl.telemetry.metrics import get_metrics

log = logging.getLogger(__name__)
FIELD = b"manifest"  # the one field of an entry: the manifest's JSON
DEFAULT_GROUP = "learner"


@dataclass(frozen=True)
class QueueEntry:
    """One announced shard: the stream's entry id and the manifest it carries."""

    id: str
    manifest: ShardManifest


class ShardQueue(Protocol):
    stream: str
    consumer: str

    def put(self, manifest: ShardManifest) -> str:
        """Announce a stored shard; returns the entry id."""
        ...

    def read(self, count: int = 64, block_s: float = 0.0) -> list[QueueEntry]:
        """This consumer's own pending entries first (what it read before a crash), then new
        ones, in id order; waits up to `block_s` for new ones when there are none."""
        ...

    def claim_idle(self, min_idle_s: float, count: int = 64) -> list[QueueEntry]:
        """Take over other consumers' entries pending for at least `min_idle_s` (a dead one's)."""
        ...

    def ack(self, ids: Iterable[str]) -> int:
        """Acknowledge entries (their update is committed); returns how many were pending."""
        ...

    def backlog(self) -> int:
        """Entries of the stream not acknowledged yet (pending or never read)."""
        ...

    def trim(self) -> int:
        """Drop the oldest acknowledged entries beyond `maxlen`, never an unacked one."""
        ...

    def close(self) -> None: ...


_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def stream_key(run: str) -> str:
    """The run's stream: one per run, so two runs on one Redis never read each other's shards."""
    if not _RUN_NAME.fullmatch(run):
        raise _StoreError(f"shard queue run name {run!r}: expected 1-128 letters, digits, '_', '-', '.' "
                          "(starting with a letter or digit)")
    return f"rl:shards:{run}"


def encode_entry(manifest: ShardManifest) -> dict[bytes, bytes]:
    return {FIELD: manifest.to_json()}


def decode_entry(entry_id: str, fields: dict[bytes, bytes] | None, stream: str) -> ShardManifest:
    """The manifest of an entry, validated; CorruptShardError naming the entry otherwise."""
    where = f"{stream} entry {entry_id}"
    if not fields:
        raise CorruptShardError(where, "the entry is gone (trimmed or deleted)")
    if set(fields) != {FIELD}:
        raise CorruptShardError(where, f"expected one field {FIELD.decode()!r}, got {sorted(map(repr, fields))}")
    manifest = ShardManifest.from_json(fields[FIELD], where)
    try:
        check_iteration(manifest.iteration)
        check_collector_id(manifest.collector_id)
        if not isinstance(manifest.policy_version, int) or manifest.policy_version < 0:
            raise _StoreError(f"policy_version {manifest.policy_version!r}: expected an integer >= 0")
    except _StoreError as exc:
        raise CorruptShardError(where, str(exc)) from None
    return manifest


def parse_id(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def next_id(entry_id: str) -> str:
    ms, seq = parse_id(entry_id)
    return f"{ms}-{seq + 1}"


@dataclass
class Refusals:
    """Malformed entries refused (logged once each, acked so that they block nothing)."""

    count: int = 0

    def refuse(self, exc: CorruptShardError) -> None:
        self.count += 1
        get_metrics().shard_queue_refused_total.inc()
        log.error("shard queue: refused %s", exc)

    def valid(self, raw: list[tuple[str, dict[bytes, bytes] | None]], stream: str,
              ack: Callable[[list[str]], int]) -> list[QueueEntry]:
        """The entries of `raw` that decode; the others are refused and acked."""
        out, bad = [], []
        for entry_id, fields in raw:
            try:
                out.append(QueueEntry(entry_id, decode_entry(entry_id, fields, stream)))
            except CorruptShardError as exc:
                self.refuse(exc)
                bad.append(entry_id)
        if bad:
            ack(bad)
        return out


class Ledger:
    """The learner's side of the queue: what it read, which update trained what, and the
    acknowledgements once a checkpoint holds those updates.

    The rule that trains no shard twice: update k trains exactly the shards whose
    manifest.iteration is k, and a checkpoint taken after updates 0..c-1 records c (its
    iteration). So after a restart from checkpoint c, a pending entry of iteration < c is
    in the checkpointed weights already: it is acked without training; one of iteration >= c
    is not (its update died with the process): it is trained by update iteration. A crash
    between checkpoint and ack leaves the first kind; between update and checkpoint, the
    second. A manifest sent twice for one shard (a retried put) is trained once.

    Bounded mode trains the oldest shards read, whatever their iteration (`take_oldest`), so
    there the checkpoint records the entry ids its updates trained since the last ack
    (`uncommitted_ids`) and a restart passes them as `trained_ids`; after each checkpoint,
    `commit_all`. Both acks trim the stream (never below an unacked entry)."""

    def __init__(self, queue: ShardQueue, trained_through: int = 0, trained_ids: Iterable[str] = ()) -> None:
        self.queue, self.trained_through = queue, trained_through
        self._settled = set(trained_ids)  # bounded mode: entries a checkpoint holds
        self._waiting: dict[int, dict[str, list[QueueEntry]]] = {}  # iteration -> collector -> entries
        self._trained: list[QueueEntry] = []  # by updates not yet checkpointed
        self.skipped = 0  # entries acked without training (already in the checkpoint)
        self.refused_stale = 0  # bounded mode: shards older than the oldest version trained

    def add(self, entries: Iterable[QueueEntry]) -> None:
        late = []
        for entry in entries:
            if entry.manifest.iteration < self.trained_through or entry.id in self._settled:
                late.append(entry.id)
            else:
                by_collector = self._waiting.setdefault(entry.manifest.iteration, {})
                by_collector.setdefault(entry.manifest.collector_id, []).append(entry)
        if late:
            self.skipped += self.queue.ack(late)

    def waiting(self) -> dict[int, list[QueueEntry]]:
        """Entries read and not taken yet, by manifest iteration (a bounded run's episode)."""
        return {it: [e for es in by.values() for e in es] for it, by in sorted(self._waiting.items())}

    def ready(self, iteration: int) -> int:
        """Distinct shards of `iteration` read so far."""
        return len(self._waiting.get(iteration, {}))

    def take(self, iteration: int) -> list[ShardManifest]:
        """The shards update `iteration` trains, one per collector (the newest of duplicates)."""
        by_collector = self._waiting.pop(iteration, {})
        for entries in by_collector.values():
            self._trained.extend(entries)
        return [entries[-1].manifest for _, entries in sorted(by_collector.items())]

    def drop(self, iteration: int) -> int:
        """Ack the entries of `iteration` untrained (refused or unreadable); entries trained
        by updates not checkpointed yet stay pending."""
        entries = [e.id for es in self._waiting.pop(iteration, {}).values() for e in es]
        return self._ack(entries) if entries else 0

    def take_oldest(self, count: int, min_version: int = 0) -> list[ShardManifest]:
        """Bounded mode: up to `count` shards, oldest read first, duplicates of a shard with
        it; those of a policy version below `min_version` are refused (acked untrained,
        stale_shards_refused_total, one line each)."""
        ordered = sorted((e for by in self._waiting.values() for es in by.values() for e in es),
                         key=lambda e: parse_id(e.id))
        taken: dict[str, list[QueueEntry]] = {}
        stale = [e for e in ordered if e.manifest.policy_version < min_version]
        for entry in (e for e in ordered if e.manifest.policy_version >= min_version):
            if entry.manifest.name in taken or len(taken) < count:
                taken.setdefault(entry.manifest.name, []).append(entry)
        gone = {e.id for e in stale} | {e.id for es in taken.values() for e in es}
        for iteration, by_collector in list(self._waiting.items()):
            kept = {c: [e for e in es if e.id not in gone] for c, es in by_collector.items()}
            self._waiting[iteration] = {c: es for c, es in kept.items() if es}
            if not self._waiting[iteration]:
                del self._waiting[iteration]
        for entry in stale:
            log.warning("shard queue: refused stale shard %s (policy version %d < %d)", entry.manifest.name,
                        entry.manifest.policy_version, min_version)
        if stale:
            self.refused_stale += len(stale)
            get_metrics().stale_shards_refused_total.inc(len(stale))
            self.queue.ack([e.id for e in stale])
        for entries in taken.values():
            self._trained.extend(entries)
        return [entries[-1].manifest for entries in taken.values()]

    def uncommitted_ids(self) -> list[str]:
        """Entries trained by updates not acked yet: what a bounded-mode checkpoint records."""
        return [e.id for e in self._trained]

    def committed(self, through: int) -> int:
        """A checkpoint now holds updates 0..through-1: ack the entries they trained."""
        self.trained_through = max(self.trained_through, through)
        done = [e.id for e in self._trained if e.manifest.iteration < through]
        self._trained = [e for e in self._trained if e.manifest.iteration >= through]
        return self._ack(done)

    def commit_all(self) -> int:
        """Bounded mode: a checkpoint now holds every update so far: ack what they trained."""
        done, self._trained = [e.id for e in self._trained], []
        return self._ack(done)

    def _ack(self, ids: list[str]) -> int:
        acked = self.queue.ack(ids) if ids else 0
        self.queue.trim()
        return acked


@dataclass
class _Group:
    last_delivered: tuple[int, int] = (0, 0)
    pending: dict[str, tuple[str, float]] = field(default_factory=dict)  # id -> (consumer, delivered at)


class MemoryStream:
    """A Redis Stream's semantics in memory (entries, consumer groups, pending lists), shared
    by the MemoryShardQueues of one process the way one Redis is shared by processes."""

    def __init__(self, name: str = "memory", clock: Callable[[], float] = time.monotonic) -> None:
        self.name, self.clock = name, clock
        self.entries: dict[str, dict[bytes, bytes]] = {}  # insertion (= id) order
        self.groups: dict[str, _Group] = {}
        self.lock = threading.Condition()
        self._seq = 0

    def append(self, fields: dict[bytes, bytes]) -> str:
        with self.lock:
            self._seq += 1
            entry_id = f"{self._seq}-0"
            self.entries[entry_id] = dict(fields)
            self.lock.notify_all()
            return entry_id


class MemoryShardQueue:
    """ShardQueue over a MemoryStream; dropping it without acking is a consumer's crash."""

    def __init__(self, stream: MemoryStream, consumer: str, group: str = DEFAULT_GROUP, maxlen: int = 10_000) -> None:
        self.memory, self.consumer, self.group, self.maxlen = stream, consumer, group, maxlen
        self.stream = stream.name
        self.refusals = Refusals()
        self._cursor: str | None = "0-0"  # re-reading own pending entries; None: new ones
        with stream.lock:
            stream.groups.setdefault(group, _Group())

    def put(self, manifest: ShardManifest) -> str:
        return self.memory.append(encode_entry(manifest))

    def read(self, count: int = 64, block_s: float = 0.0) -> list[QueueEntry]:
        with self.memory.lock:
            raw = self._own_pending(count) if self._cursor is not None else []
            if not raw:
                self._cursor = None
                if not self._new(0) and block_s > 0:
                    self.memory.lock.wait(block_s)
                raw = self._deliver(count)
        return self._valid(raw)

    def _own_pending(self, count: int) -> list[tuple[str, dict[bytes, bytes] | None]]:
        group, after = self.memory.groups[self.group], parse_id(self._cursor or "0-0")
        ids = sorted((i for i, (c, _) in group.pending.items() if c == self.consumer and parse_id(i) > after),
                     key=parse_id)[:count]
        if ids:
            self._cursor = ids[-1]
        return [(i, self.memory.entries.get(i)) for i in ids]

    def _new(self, count: int) -> list[str]:
        last = self.memory.groups[self.group].last_delivered
        new = [i for i in self.memory.entries if parse_id(i) > last]
        return new[:count] if count else new

    def _deliver(self, count: int) -> list[tuple[str, dict[bytes, bytes] | None]]:
        group, now = self.memory.groups[self.group], self.memory.clock()
        ids = self._new(count)
        for i in ids:
            group.pending[i] = (self.consumer, now)
        if ids:
            group.last_delivered = parse_id(ids[-1])
        return [(i, self.memory.entries[i]) for i in ids]

    def _valid(self, raw: list[tuple[str, dict[bytes, bytes] | None]]) -> list[QueueEntry]:
        return self.refusals.valid(raw, self.stream, self.ack)

    def claim_idle(self, min_idle_s: float, count: int = 64) -> list[QueueEntry]:
        with self.memory.lock:
            group, now = self.memory.groups[self.group], self.memory.clock()
            ids = sorted((i for i, (c, at) in group.pending.items()
                          if c != self.consumer and now - at >= min_idle_s), key=parse_id)[:count]
            for i in ids:
                group.pending[i] = (self.consumer, now)
            raw = [(i, self.memory.entries.get(i)) for i in ids]
        return self._valid(raw)

    def ack(self, ids: Iterable[str]) -> int:
        with self.memory.lock:
            pending = self.memory.groups[self.group].pending
            return sum(pending.pop(i, None) is not None for i in ids)

    def backlog(self) -> int:
        with self.memory.lock:
            return len(self.memory.groups[self.group].pending) + len(self._new(0))

    def trim(self) -> int:
        with self.memory.lock:
            floor = self._safe_floor()
            excess = max(0, len(self.memory.entries) - self.maxlen)
            drop = [i for i in list(self.memory.entries)[:excess] if parse_id(i) < floor]
            for i in drop:
                del self.memory.entries[i]
            return len(drop)

    def _safe_floor(self) -> tuple[int, int]:
        """The oldest entry some group still needs: its oldest pending or first unread one."""
        floors = []
        for group in self.memory.groups.values():
            pending = [parse_id(i) for i in group.pending]
            floors.append(min(pending) if pending else (group.last_delivered[0], group.last_delivered[1] + 1))
        return min(floors, default=(0, 0))

    def close(self) -> None:
        pass
