"""Collectors' side of the Redis weight sync (sync/redis.py has the keys and the publisher):
a background thread follows rl:updates:K, falls back to polling rl:version:K, and installs
each newer version once its sha256, safetensors header and tensors check out; a bad one is
logged, counted and skipped for good, keeping the previous version."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import redis

from skurl.config import StoreConfig, SyncConfig
from skurl.config.secrets import redact_url
from skurl.config.services import redis_url_of
from skurl.errors import UserError
from skurl.store.api import RolloutStore
from skurl.sync.api import Tensors, WeightSyncTimeout
from skurl.sync.redis import (
    BACKOFF_CAP_S,
    BACKOFF_START_S,
    connect,
    updates_channel,
    version_key,
    weights_key,
    weights_store,
)
from skurl.weights.codec import (
    WeightBlob,
    WeightIntegrityError,
    decode_weights,
    note_rejected,
    spec_mismatch,
    spec_of,
)
from skurl.weights.slot import VersionedSlot

if TYPE_CHECKING:
    from redis.client import PubSub

log = logging.getLogger(__name__)


class RedisWeightSubscriber:
    """A WeightSubscriber: newest verified weights, prefetched by a background thread.

    `like` (names -> tensors of the model) rejects weights of another shape; without it
    the first accepted version is the reference. `on_update(version, tensors)` runs in
    the background thread after each accepted version.
    """

    def __init__(self, url: str, model_key: str = "policy", *, like: Tensors | None = None,
                 store: RolloutStore | None = None, poll_s: float = 0.5, timeout_s: float = 10.0,
                 on_update: Callable[[int, Tensors], None] | None = None) -> None:
        self.url, self.model_key, self.store = redact_url(url), model_key, store  # url: for messages
        self.poll_s, self.on_update = poll_s, on_update
        self.client = connect(url, timeout_s)
        self._spec = None if like is None else spec_of(like)
        self._slot: VersionedSlot[Tensors] = VersionedSlot()  # the newest verified weights
        self._rejected: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"redis-weights-{model_key}",
                                        daemon=True)
        self._thread.start()

    @classmethod
    def from_config(cls, sync: SyncConfig, store: StoreConfig | None = None, *,
                    like: Tensors | None = None,
                    on_update: Callable[[int, Tensors], None] | None = None) -> RedisWeightSubscriber:
        return cls(redis_url_of(sync), sync.key, like=like, store=weights_store(sync, store),
                   poll_s=sync.poll_s, timeout_s=min(sync.timeout_s, 10.0), on_update=on_update)

    # -- WeightSubscriber -------------------------------------------------------------

    def latest(self) -> tuple[int, Tensors] | None:
        return self._slot.held()

    def latest_version(self) -> int | None:
        """The newest version held locally (verified, ready to use)."""
        current = self.latest()
        return None if current is None else current[0]

    def wait_for(self, version: int, timeout: float | None = None) -> tuple[int, Tensors]:
        held = self._slot.wait_for(version, timeout, poll_s=self.poll_s)
        if held is not None:
            return held
        have = self._slot.version
        if self._slot.closed:
            raise WeightSyncTimeout(f"weights '{self.model_key}': subscriber is closed "
                                    f"(waiting for version {version}, latest {have})")
        raise WeightSyncTimeout(f"weights '{self.model_key}' at {self.url}: version {version} not "
                                f"received within {timeout}s (latest {have})")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5 + self.poll_s)
        self._slot.close()
        self.client.close()

    def __enter__(self) -> RedisWeightSubscriber:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- background thread ------------------------------------------------------------

    def _run(self) -> None:
        backoff = BACKOFF_START_S
        while not self._stop.is_set():
            pubsub = self.client.pubsub(ignore_subscribe_messages=True)
            try:
                pubsub.subscribe(updates_channel(self.model_key))
                if backoff > BACKOFF_START_S:
                    log.warning("weights '%s': reconnected to %s", self.model_key, self.url)
                backoff = BACKOFF_START_S
                self._listen(pubsub)
            except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
                if backoff == BACKOFF_START_S:
                    log.warning("weights '%s': lost %s (%s); reconnecting", self.model_key,
                                self.url, exc)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, BACKOFF_CAP_S)
            except Exception:  # a bug must not silently end the thread the barrier relies on
                log.exception("weights '%s': subscriber error; retrying", self.model_key)
                self._stop.wait(BACKOFF_CAP_S)
            finally:
                _close_quietly(pubsub)

    def _listen(self, pubsub: PubSub) -> None:
        self._refresh()  # whatever was published before we (re)subscribed
        while not self._stop.is_set():
            message = pubsub.get_message(timeout=self.poll_s)
            if message is None:
                self._refresh()  # silence for poll_s: poll the version key
            elif message.get("type") == "message":
                self._refresh(announced=_as_int(message.get("data")))

    def _refresh(self, announced: int | None = None) -> None:
        """Fetch and install the published version when it is newer than ours."""
        published = announced
        if published is None:
            raw_version = self.client.get(version_key(self.model_key))
            if raw_version is None:
                return
            published = int(raw_version)
        have = self.latest_version()
        if (have is not None and published <= have) or published in self._rejected:
            return  # versions never change once published: a bad one stays bad
        fields = self.client.hgetall(weights_key(self.model_key))
        if not fields:
            return
        try:
            version, tensors = self._decode(fields)  # type: ignore[arg-type]  # redis-py types hgetall as str or bytes: our client keeps bytes
        except (WeightIntegrityError, ValueError) as exc:
            self._reject(fields, exc)  # type: ignore[arg-type]  # redis-py types hgetall as str or bytes: our client keeps bytes
            return
        except (KeyError, UserError) as exc:  # store blob missing or store unreachable: retry
            log.warning("weights '%s': cannot fetch the published version yet: %s",
                        self.model_key, exc)
            return
        if not self._slot.offer(version, tensors):
            return
        if self.on_update is not None:
            self.on_update(version, tensors)

    def _decode(self, fields: dict[bytes, bytes]) -> tuple[int, Tensors]:
        version = int(fields[b"version"])
        sha = fields[b"sha256"].decode()
        if b"payload" in fields:
            payload = fields[b"payload"]
        elif self.store is not None:
            payload = self.store.get_blob(fields[b"blob"].decode())
        else:
            raise ValueError("weights live in an object store; give the subscriber `store`")
        tensors = decode_weights(WeightBlob(self.model_key, version, payload, sha))
        spec = spec_of(tensors)
        wrong = None if self._spec is None else spec_mismatch(spec, self._spec)
        if wrong is not None:
            raise WeightIntegrityError(f"weights '{self.model_key}' version {version}: tensors {wrong}")
        self._spec = spec
        return version, tensors

    def _reject(self, fields: dict[bytes, bytes], exc: Exception) -> None:
        try:
            version = int(fields.get(b"version", b"-1"))
        except ValueError:
            version = -1
        self._rejected.add(version)
        note_rejected("subscribe")
        log.error("weights '%s': rejected version %s from %s, keeping version %s: %s",
                  self.model_key, version, self.url, self.latest_version(), exc)


def _as_int(data: Any) -> int | None:
    try:
        return int(data)
    except (TypeError, ValueError):
        return None


def _close_quietly(pubsub: PubSub) -> None:
    with contextlib.suppress(redis.RedisError, OSError):
        pubsub.close()
