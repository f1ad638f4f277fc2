"""Wire versions: what the learner publishes is a version every collector and the sync
backend take as newer (collectors accept only growing versions), so it can run ahead of
the learner's own version (weights published again, a Redis key left by an earlier run).
The map back to learner versions is a JSONL file in the run dir, kept across restarts so a
restarted learner can still match the shards of its interrupted iteration. WirePublisher
puts the learner's weights on a backend under wire versions (decoupled and DDP modes).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from skurl.sync.api import Tensors, WeightBackend

log = logging.getLogger(__name__)

WIRE_FILE = "wire_versions.jsonl"


class WireVersions:
    """Published wire version -> learner version, appended to a JSONL file (survives a
    learner restart, so stored shards of the interrupted iteration can be matched)."""

    def __init__(self, path: Path, floor: int = 0) -> None:
        self.path = path
        self.map: dict[int, int] = {}
        if path.is_file():
            for line in path.read_text().splitlines():
                try:
                    rec = json.loads(line)
                    self.map[int(rec["wire"])] = int(rec["version"])
                except (ValueError, KeyError, TypeError):
                    continue  # a torn last line
        self.next = max(floor, max(self.map, default=-1) + 1)

    def raise_floor(self, floor: int) -> None:
        """Publish no wire version below `floor` (what collectors and the backend hold)."""
        self.next = max(self.next, floor)

    def new(self, learner_version: int) -> int:
        wire = max(learner_version, self.next)
        self.map[wire] = learner_version
        self.next = wire + 1
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(json.dumps({"wire": wire, "version": learner_version}) + "\n")
        return wire


class WirePublisher:
    """A WeightBackend: the learner's weights on `backend` under wire versions, each learner
    version once, again (newer) when it did not reach every collector."""

    def __init__(self, backend: WeightBackend, wire: WireVersions) -> None:
        self.backend, self.wire = backend, wire
        self.published: tuple[int, int] | None = None  # (learner version, wire version)
        self.publish_unix: dict[int, float] = {}  # wire version -> when it was published
        self._lock = threading.Lock()

    def publish(self, version: int, tensors: Tensors) -> int:
        """Learner version `version` as a new wire version; returns it."""
        wire = self.wire.new(version)
        self.publish_unix[wire] = time.time()
        self.backend.publish(wire, tensors)
        self.published = (version, wire)
        return wire

    def published_version(self) -> int | None:
        """The wire version the backend holds."""
        return self.backend.published_version()

    def close(self) -> None:
        """Nothing of its own: the backend belongs to whoever opened it."""

    def wire_of(self, version: int) -> int:
        """The wire version that carries learner version `version` (published before)."""
        assert self.published is not None and self.published[0] == version
        return self.published[1]

    def ensure(self, version: int, weights_of: Callable[[], Tensors]) -> int:
        if self.published is None or self.published[0] != version:
            return self.publish(version, weights_of())
        return self.published[1]

    def republish(self, wire: int, version: int, weights_of: Callable[[], Tensors]) -> bool:
        """Weights of `wire` reached a collector not in time: publish them again, newer
        (a collector rejects damaged weights and keeps its version; versions only grow).
        True when this call published (collectors waiting on `wire` call it at once)."""
        with self._lock:
            assert self.published is not None
            if self.published[1] != wire:
                return False
            log.error("weights v%d (learner version %d) did not reach every collector in time; "
                      "publishing them again", wire, version)
            self.publish(version, weights_of())
            return True
