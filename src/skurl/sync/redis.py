"""Weight sync through Redis: the learner's publisher (subscribers: sync/redis_subscriber.py).

Keys for model key K (docs/architecture.md, Wire formats and services):
    rl:weights:K   hash {version, model_key, sha256, payload | blob}
    rl:version:K   the newest version, as a decimal string
    rl:updates:K   pub/sub channel; each message is a new version number
All three are written in one MULTI/EXEC, so a reader never pairs a version with
another version's bytes. `payload` is the codec's safetensors bytes; with an object
store the hash names a `blob` in the store instead and Redis carries only the signal.

More: docs/internals.md (sync/redis.py)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from typing import TYPE_CHECKING, Any

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from skurl.config import StoreConfig, SyncConfig
from skurl.config.secrets import redact_url
from skurl.config.services import redis_url_of
from skurl.errors import UserError
from skurl.store.api import RolloutStore
from skurl.sync.api import Tensors
from skurl.weights.codec import (
    encode_checked,
)

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

BACKOFF_START_S = 0.05
BACKOFF_CAP_S = 2.0
_KEEP_STORE_BLOBS = 4  # versions whose store blobs a publisher keeps (slow readers may lag)


class SyncConnectionError(UserError):
    """The Redis server of sync.redis_url cannot be reached."""


def weights_key(model_key: str) -> str:
    return f"rl:weights:{model_key}"


def version_key(model_key: str) -> str:
    return f"rl:version:{model_key}"


def updates_channel(model_key: str) -> str:
    return f"rl:updates:{model_key}"


def store_blob_name(model_key: str, version: int, sha256: str) -> str:
    # Named by content too: a refused or racing publish of the same version writes another
    # blob, never over the bytes whose sha256 Redis announced (safetensors does not even
    # encode the same tensors to the same bytes twice: its header's metadata is a hash map).
    return f"weights/{model_key}/v{version:012d}-{sha256[:16]}.safetensors"


def _check_newer(version: int, current: bytes | str | None) -> None:
    """ValueError unless `version` is newer than the published one (`current`, raw)."""
    if current is not None and int(current) >= version:
        raise ValueError(f"publish: version {version} is not newer than {int(current)}")


def connect(url: str, timeout_s: float) -> redis.Redis:
    """A client for `url` that answers PING, or SyncConnectionError naming the URL."""
    try:
        client = redis.Redis.from_url(
            url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s,
            health_check_interval=30,
            # Quick retries ride over a short outage; longer ones are the caller's backoff.
            retry=Retry(ExponentialBackoff(cap=BACKOFF_CAP_S, base=BACKOFF_START_S), 3),
            **_command_packer(),
        )
        client.ping()
    except (redis.RedisError, ValueError, OSError) as exc:  # AUTH/ACL refusals included
        raise SyncConnectionError(f"sync.redis_url '{redact_url(url)}': cannot connect to Redis "
                                  f"({exc})") from None
    return client


def _command_packer() -> dict[str, Any]:
    """redis-py's pure-Python command packer, which sends big values without copying them.

    With hiredis installed redis-py packs commands in C, but copies every argument into one
    buffer: ~2-4 ms for a 0.6 MB weights payload against ~0.4 ms this way (measured on
    loopback). hiredis still parses the replies."""
    try:
        from redis.connection import Encoder, PythonRespSerializer

        encoder = Encoder(encoding="utf-8", encoding_errors="strict", decode_responses=False)
        return {"command_packer": PythonRespSerializer(6000, encoder.encode)}
    except (ImportError, TypeError):  # a redis-py without these: its default packer works too
        return {}


class RedisWeightPublisher:
    """A WeightBackend: writes weights + version + notification in one transaction.

    `timeout_s` bounds a socket operation and how long publish() keeps retrying while
    Redis is away; `store` moves the weights themselves into the object store."""

    def __init__(self, url: str, model_key: str = "policy", *, store: RolloutStore | None = None,
                 timeout_s: float = 10.0) -> None:
        self.url, self.model_key, self.store = redact_url(url), model_key, store  # url: for messages
        self.timeout_s = timeout_s
        self.client = connect(url, timeout_s)
        self._store_blobs: deque[str] = deque()  # this publisher's blobs, oldest first
        self._server_restarts = 0
        self._server_run_id = self._run_id()

    def _run_id(self) -> str | None:
        with contextlib.suppress(redis.ConnectionError, redis.TimeoutError, KeyError):
            return str(self.client.info("server")["run_id"])
        return None

    def server_restarts(self) -> int:
        """Restarts of the Redis server seen so far, at publishes and at this call: a new
        run_id means it restarted (without persistence its keys are gone). Logged once each."""
        run_id = self._run_id()
        if run_id is not None and self._server_run_id is not None and run_id != self._server_run_id:
            self._server_restarts += 1
            log.warning("weights '%s': %s restarted (its run_id changed)", self.model_key, self.url)
        self._server_run_id = run_id or self._server_run_id
        return self._server_restarts

    def publish(self, version: int, tensors: Tensors) -> None:
        self._publish(version, tensors)
        self.server_restarts()

    def _publish(self, version: int, tensors: Tensors) -> None:
        blob = encode_checked(tensors, version, self.model_key)
        fields: dict[str, Any] = {"version": blob.version, "model_key": blob.model_key,
                                  "sha256": blob.sha256}
        if self.store is None:
            fields["payload"] = blob.payload
            self._write(blob.version, fields)
            return
        # A stale version is refused before it costs a blob; the WATCHed write below still
        # decides a race between publishers (and retries while Redis is away).
        with contextlib.suppress(redis.ConnectionError, redis.TimeoutError):
            _check_newer(blob.version, self.client.get(version_key(self.model_key)))
        fields["blob"] = store_blob_name(self.model_key, blob.version, blob.sha256)
        self.store.put_blob(fields["blob"], blob.payload)  # before Redis points at it
        try:
            self._write(blob.version, fields)
        except ValueError:  # another publisher's version won the race
            self._drop_unless_published(fields["blob"])
            raise
        self._store_blobs.append(fields["blob"])
        while len(self._store_blobs) > _KEEP_STORE_BLOBS:
            self.store.delete_blob(self._store_blobs.popleft())

    def _drop_unless_published(self, blob: str) -> None:
        """Delete our blob after a lost race, unless the winner published the very same
        bytes (same version and sha256: the same name). When Redis cannot tell us, keep it:
        a stray blob costs space, a deleted published one costs every subscriber."""
        with contextlib.suppress(redis.ConnectionError, redis.TimeoutError):
            if self.client.hget(weights_key(self.model_key), "blob") != blob.encode():
                self.store.delete_blob(blob)  # type: ignore[union-attr]

    def _write(self, version: int, fields: dict[str, Any]) -> None:
        vkey, wkey = version_key(self.model_key), weights_key(self.model_key)

        def transaction(pipe: Any) -> None:
            _check_newer(version, pipe.get(vkey))  # WATCHed: a concurrent publisher makes EXEC retry
            pipe.multi()
            pipe.delete(wkey)
            pipe.hset(wkey, mapping=fields)
            pipe.set(vkey, version)
            pipe.publish(updates_channel(self.model_key), version)

        # WATCHed transactions are not retried by redis-py; retry here on fresh connections
        # for up to timeout_s, which rides over a Redis restart since the last publish.
        deadline = time.monotonic() + self.timeout_s
        backoff = BACKOFF_START_S
        while True:
            try:
                self.client.transaction(transaction, vkey)
                return
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                if time.monotonic() + backoff > deadline:
                    raise SyncConnectionError(
                        f"sync.redis_url '{self.url}': publish of version {version} failed "
                        f"for {self.timeout_s:g} s ({exc})"
                    ) from None
                time.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_CAP_S)

    def published_version(self) -> int | None:
        """The version the key holds now (another run's too), None when it holds none."""
        raw = self.client.get(version_key(self.model_key))
        return None if raw is None else int(raw)

    @classmethod
    def from_config(cls, sync: SyncConfig, store: StoreConfig | None = None) -> RedisWeightPublisher:
        """Publisher for sync.redis_url / sync.key; weights go to `store` when
        sync.weights_in_store is set."""
        return cls(redis_url_of(sync), sync.key, store=weights_store(sync, store),
                   timeout_s=min(sync.timeout_s, 10.0))

    def close(self) -> None:
        self.client.close()


def weights_store(sync: SyncConfig, store: StoreConfig | None) -> RolloutStore | None:
    if not sync.weights_in_store:
        return None
    if store is None:
        raise UserError("sync.weights_in_store=true needs the store section (store.url)")
    from skurl.store import open_store

    return open_store(store)
