"""Decoupled bounded staleness through the run's Redis Stream (store/shard_queue.py).

Collectors announce each stored shard on the stream; the learner acknowledges an entry only
once a checkpoint holds the update that trained it, so a learner killed anywhere and
resumed trains every announced shard exactly once.

More: docs/internals.md (modes/decoupled/shard_stream.py)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from skurl import atomic
from skurl.collect.bounded import BoundedStaleness
from skurl.collect.collectors import Collected
from skurl.errors import UserError
from skurl.json_ready import read_json_or_none
from skurl.store.shard_queue import Ledger, QueueEntry
from skurl.train.mode import Observer

if TYPE_CHECKING:
    from skurl.config import Config
    from skurl.modes.decoupled.grpc_collectors import GrpcCollectors
    from skurl.store.shard_queue_redis import RedisShardQueue

log = logging.getLogger(__name__)
LEDGER_DIR = "shard_queue"
CONSUMER = "learner"
_READ = 256


def uses_stream(cfg: Config) -> bool:
    """Decoupled bounded staleness with weights through Redis: shards go through its stream."""
    t = cfg.collect
    return t.staleness > 0 and t.staleness_mode == "bounded" and cfg.sync.backend == "redis"


def open_stream(cfg: Config, run_name: str, consumer: str) -> RedisShardQueue:
    from skurl.config.services import redis_url_of
    from skurl.store.shard_queue_redis import RedisShardQueue

    return RedisShardQueue(redis_url_of(cfg.sync), run_name, consumer, timeout_s=max(cfg.sync.timeout_s, 10.0))


def _trained_file(run_dir: Path, iteration: int) -> Path:
    return run_dir / LEDGER_DIR / f"trained_{iteration:06d}.json"


def trained_ids(run_dir: Path, iteration: int) -> list[str]:
    """The entries the checkpoint of `iteration` holds but had not acked ([] when none)."""
    path = _trained_file(run_dir, iteration)
    if not path.is_file():
        return []
    found = read_json_or_none(path)
    ids = found.get("ids") if isinstance(found, dict) else None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise UserError(f"{path}: damaged; expected {{\"ids\": [stream entry ids]}} (the entries checkpoint "
                        f"{iteration} holds); resume from another checkpoint or delete the run's stream")
    return ids


class StreamShares(Observer):
    """The learner's side of the stream for one BoundedStaleness over GrpcCollectors."""

    def __init__(self, queue: RedisShardQueue, grpc: GrpcCollectors, run_dir: Path, iteration: int, *, resumed: bool) -> None:
        self.queue, self.grpc, self.run_dir = queue, grpc, run_dir
        if not resumed:  # a fresh start: entries of an earlier run of this name are not ours
            queue.clear()
        self.ledger = Ledger(queue, trained_ids=trained_ids(run_dir, iteration) if resumed else ())
        self._warned = False

    def attach(self, bounded: BoundedStaleness) -> BoundedStaleness:
        """`bounded`, taking and refusing through the ledger (this is also the loop's
        Observer: checkpoints record and commit it)."""
        bounded.recover = self.recover
        bounded.on_take.append(self.took)
        bounded.on_refuse.append(self.refused)
        return bounded

    def on_checkpoint(self, it: int) -> None:
        self.ledger.commit_all()

    def _read_all(self) -> None:
        """Every entry announced so far into the ledger (own pending ones first)."""
        while entries := self.queue.read(_READ):
            self.ledger.add(entries)

    def took(self, batch: Collected) -> None:
        self._read_all()
        if not self.ledger.take(int(batch.rollout.episode)) and not self._warned:
            self._warned = True  # trained all the same; only a restart cannot read it back
            log.warning("shard queue %s: no shard of episode %d was announced on it: collectors started "
                        "alone need `skurl collector --run %s` (the learner's run directory name)",
                        self.queue.stream, int(batch.rollout.episode), self.run_dir.name)

    def refused(self, batch: Collected) -> None:
        """A refused rollout is done with: its entries are acked untrained."""
        self._read_all()
        self.ledger.drop(int(batch.rollout.episode))

    def before_checkpoint(self, iteration: int) -> None:
        """Record what the checkpoint about to be saved holds but has not acked."""
        path = _trained_file(self.run_dir, iteration)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_text(path, json.dumps({"ids": self.ledger.uncommitted_ids()}) + "\n")
        for old in path.parent.glob("trained_*.json"):
            if old.name < path.name:
                old.unlink(missing_ok=True)

    def recover(self, iteration: int) -> tuple[list[Collected], int]:
        """After a restart: the pending episodes' rollouts (oldest first) and the next
        episode number (above every episode announced)."""
        self._read_all()
        waiting = self.ledger.waiting()
        out = []
        for episode, entries in waiting.items():
            batch = self._stored(episode, entries)
            if batch is None:  # incomplete or unreadable: collected again under a new number
                self.ledger.drop(episode)
            else:
                out.append(batch)
        if out:
            log.warning("shard queue %s: re-reading %d pending episodes %s from the store", self.queue.stream,
                        len(out), [int(b.rollout.episode) for b in out])
        return out, max([iteration, *(e + 1 for e in waiting)])

    def _stored(self, episode: int, entries: list[QueueEntry]) -> Collected | None:
        """The episode's rollout from the store when every collector's shard of one learner
        version is there and verifies; None otherwise."""
        wire = {e.manifest.policy_version for e in entries}
        versions = {self.grpc.weights.wire.map.get(v) for v in wire}
        version = versions.pop() if len(versions) == 1 else None
        if version is None or len({e.manifest.collector_id for e in entries}) < len(self.grpc.clients):
            return None
        return self.grpc.stored_rollout(episode, version)
