"""ShardQueue on a Redis Stream (`rl:shards:{run}`): XADD, XREADGROUP, XACK, XAUTOCLAIM.

The group is created idempotently at id 0 with MKSTREAM (BUSYGROUP ignored), so entries
added before the learner first reads are its too. Trimming never uses XADD's MAXLEN, which
drops entries whether acked or not: `trim` cuts with XTRIM MINID at the oldest entry any
group still needs (its oldest pending one, else its first unread one), and only the entries
beyond `maxlen`. Lost connections are retried with capped exponential backoff for
`timeout_s`. After a Redis restart entries survive only if Redis persists (appendonly):
without it the group is gone (NOGROUP); the queue recreates it, counts a reset
(`resets`, shard_queue_resets_total) and the learner re-reads the store's manifests.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import redis

from skurl.config.secrets import redact_url
from skurl.errors import UserError
from skurl.store.api import CorruptShardError, ShardManifest
from skurl.store.shard_queue import (
    DEFAULT_GROUP,
    QueueEntry,
    Refusals,
    encode_entry,
    next_id,
    parse_id,
    stream_key,
)
from skurl.telemetry.metrics import get_metrics

log = logging.getLogger(__name__)
T = TypeVar("T")
_BACKOFF_START_S, _BACKOFF_CAP_S = 0.05, 2.0
Raw = list[tuple[str, "dict[bytes, bytes] | None"]]


class ShardQueueError(UserError):
    """The queue's Redis stayed unreachable for the queue's timeout."""


def _connect(url: str, timeout_s: float) -> redis.Redis:
    """A client for `url` (commands retried by RedisShardQueue._call, not by redis-py)."""
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s,
                                      retry_on_timeout=False, health_check_interval=30)
        client.ping()
    except (redis.RedisError, ValueError, OSError) as exc:  # AUTH/ACL refusals included
        raise ShardQueueError(f"shard queue: cannot connect to Redis at '{redact_url(url)}' ({exc}); "
                              "expected a running redis-server") from None
    return client


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _key(info: dict[Any, Any], name: str) -> Any:
    return info.get(name, info.get(name.encode()))


class RedisShardQueue:
    """One process's handle on the run's stream: a producer (collectors) or a consumer
    `consumer` of `group` (the learner). Entries read and never acked stay pending under
    `consumer`: reopen with the same name to read them again first."""

    def __init__(self, url: str, run: str, consumer: str, *, group: str = DEFAULT_GROUP, maxlen: int = 10_000,
                 timeout_s: float = 10.0, sleep: Callable[[float], None] = time.sleep) -> None:
        self.url, self.stream, self.consumer, self.group = redact_url(url), stream_key(run), consumer, group
        self.maxlen, self.timeout_s, self.sleep = maxlen, timeout_s, sleep
        self.client = _connect(url, timeout_s)
        self.refusals = Refusals()
        self.resets = 0  # times the stream was gone (Redis restarted without persistence)
        self._cursor: str | None = "0-0"  # re-reading own pending entries; None: reading new ones
        self._lost_since: float | None = None
        self._call(self._ensure_group)

    def _ensure_group(self) -> None:
        try:
            self.client.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def _call(self, command: Callable[[], T]) -> T:
        """`command`, retried over lost connections (backoff) and a lost group (reset)."""
        deadline, backoff, reset = time.monotonic() + self.timeout_s, _BACKOFF_START_S, False
        while True:
            try:
                result = command()
            except redis.ResponseError as exc:
                if "NOGROUP" not in str(exc) or reset:
                    raise
                self._reset()
                reset = True
                continue
            except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
                if self._lost_since is None:
                    self._lost_since = time.monotonic()
                    log.warning("shard queue %s: lost %s (%s); reconnecting", self.stream, self.url, exc)
                if time.monotonic() + backoff > deadline:
                    raise ShardQueueError(f"shard queue {self.stream}: Redis at {self.url} unreachable for "
                                          f"{self.timeout_s:g} s ({exc}); expected a running redis-server") from None
                self.sleep(backoff)
                backoff = min(backoff * 2, _BACKOFF_CAP_S)
                continue
            if self._lost_since is not None:
                log.warning("shard queue %s: reconnected to %s after %.1f s", self.stream, self.url,
                            time.monotonic() - self._lost_since)
                self._lost_since = None
            return result

    def _reset(self) -> None:
        self.resets += 1
        get_metrics().shard_queue_resets_total.inc()
        log.warning("shard queue %s: its consumer group is gone (Redis restarted without persistence?); "
                    "recreated: entries put before the restart are lost, re-read the store", self.stream)
        self._ensure_group()
        self._cursor = "0-0"

    def clear(self) -> None:
        """Delete the stream and recreate the group: a new run under a name used before
        must not read the old run's entries."""
        self._call(lambda: self.client.delete(self.stream))
        self._call(self._ensure_group)
        self._cursor = "0-0"

    def put(self, manifest: ShardManifest) -> str:
        return _text(self._call(lambda: self.client.xadd(self.stream, encode_entry(manifest))))  # type: ignore[arg-type]  # redis-py wants dict[EncodableT, ...]: dict is invariant

    def read(self, count: int = 64, block_s: float = 0.0) -> list[QueueEntry]:
        if self._cursor is not None:
            raw = self._read_group(self._cursor, count, None)
            if raw:
                self._cursor = raw[-1][0]
                return self._valid(raw)
            self._cursor = None
        block = int(min(block_s, self.timeout_s / 2) * 1000) or None
        return self._valid(self._read_group(">", count, block))

    def _read_group(self, start: str, count: int, block_ms: int | None) -> Raw:
        reply = self._call(lambda: self.client.xreadgroup(self.group, self.consumer, {self.stream: start},
                                                          count=count, block=block_ms))
        if isinstance(reply, dict):  # RESP3
            batches = list(reply.values())
            entries = [e for batch in batches for part in batch for e in part]
        else:
            entries = [e for _, part in (reply or []) for e in part]
        return [(_text(entry_id), fields) for entry_id, fields in entries]  # type: ignore[misc,str-unpack]  # redis-py types replies as every RESP2/RESP3 shape at once

    def _valid(self, raw: Raw) -> list[QueueEntry]:
        return self.refusals.valid(raw, self.stream, self.ack)

    def claim_idle(self, min_idle_s: float, count: int = 64) -> list[QueueEntry]:
        reply = self._call(lambda: self.client.xautoclaim(self.stream, self.group, self.consumer,
                                                          int(min_idle_s * 1000), start_id="0-0", count=count))
        claimed = [(_text(entry_id), fields) for entry_id, fields in reply[1]]
        gone = [_text(i) for i in (reply[2] if len(reply) > 2 else [])]  # pending, but trimmed
        for entry_id in gone:
            self.refusals.refuse(CorruptShardError(f"{self.stream} entry {entry_id}", "the entry is gone"))
        if gone:
            self.ack(gone)
        return self._valid(claimed)

    def ack(self, ids: Iterable[str]) -> int:
        ids = list(ids)
        return int(self._call(lambda: self.client.xack(self.stream, self.group, *ids))) if ids else 0

    def _groups(self) -> list[dict[Any, Any]]:
        try:
            return list(self._call(lambda: self.client.xinfo_groups(self.stream)))
        except redis.ResponseError:  # no such key: nothing to count or keep
            return []

    def backlog(self) -> int:
        group = next((g for g in self._groups() if _text(_key(g, "name")) == self.group), None)
        if group is None:
            return int(self._call(lambda: self.client.xlen(self.stream)))
        unread = _key(group, "lag")
        if unread is None:  # Redis cannot tell after some deletions: count them
            start = "(" + _text(_key(group, "last-delivered-id"))
            unread = len(self._call(lambda: self.client.xrange(self.stream, min=start, max="+")))  # type: ignore[arg-type]  # redis-py types replies as every RESP2/RESP3 shape at once
        return int(_key(group, "pending")) + int(unread)

    def _safe_floor(self) -> str | None:
        """The oldest id some group still needs (None: no group, keep everything)."""
        floors = []
        for group in self._groups():
            name = _text(_key(group, "name"))
            pending = self._call(lambda n=name: self.client.xpending(self.stream, n))  # type: ignore[misc]
            if int(_key(pending, "pending") or 0) > 0:
                floors.append(_text(_key(pending, "min")))
            else:
                floors.append(next_id(_text(_key(group, "last-delivered-id"))))
        return min(floors, key=parse_id) if floors else None

    def trim(self) -> int:
        excess = int(self._call(lambda: self.client.xlen(self.stream))) - self.maxlen
        floor = self._safe_floor() if excess > 0 else None
        if floor is None:
            return 0
        oldest = self._call(lambda: self.client.xrange(self.stream, min="-", max="+", count=excess))
        cut = min(next_id(_text(oldest[-1][0])), floor, key=parse_id)  # type: ignore[index]  # redis-py types replies as every RESP2/RESP3 shape at once
        return int(self._call(lambda: self.client.xtrim(self.stream, minid=cut, approximate=False)))

    def close(self) -> None:
        self.client.close()
