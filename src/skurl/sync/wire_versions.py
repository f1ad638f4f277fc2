"""Wire versions: what the learner publishes is a version every collector and the sync
backend take as newer (collectors accept only growing versions), so it can run ahead of
the learner's own version (weights published again, a Redis key left by an earlier run).
The map back to learner versions is a JSONL file in the run dir, kept across restarts so a
restarted learner can still match the shards of its interrupted iteration.
"""

from __future__ import annotations

import json
from pathlib import Path

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
