"""A corrupted rollout shard (payload bytes flipped in the store after the collector wrote
it) is detected by its checksum, reported, never trained on, and that collector's share is
collected again: the run trains exactly as `--mode colocated` does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_decoupled import Delegating, assert_same_training, tiny

from skurl.modes import colocated
from skurl.modes.decoupled import wiring as decoupled
from skurl.store.objects import payload_key
from skurl.telemetry.logger import read_metrics
from skurl.train import run as training

BAD_ITERATION, VICTIM = 1, "c1"


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("colocated") / "run"
    training.start(colocated.mode, tiny(), run_dir, baseline=False)
    return run_dir


class CorruptingStore(Delegating):
    """Flips bytes of one collector's payload once, right before the learner reads it
    (the learner lists the iteration's shards first)."""

    damaged = 0

    def list_shards(self, it: int) -> Any:
        found = self.inner.list_shards(it)
        if it == BAD_ITERATION and not CorruptingStore.damaged:
            (manifest,) = [m for m in found if m.collector_id == VICTIM]
            key = payload_key(manifest)
            backend: Any = self.inner.backend
            data = bytearray(backend.read(key))
            data[len(data) // 2] ^= 0xFF
            backend.write(key, bytes(data))
            CorruptingStore.damaged += 1
        return found


def corrupting(collectors: Any, run: Any) -> Any:
    collectors.store = CorruptingStore(collectors.store, run)
    return collectors


def test_corrupt_shard_is_reported_recollected_and_never_trained_on(
        tmp_path: Path, reference: Path) -> None:
    run_dir = tmp_path / "decoupled"
    training.start(decoupled.launched, tiny("sync.backend=grpc"), run_dir, baseline=False, wrap=corrupting)
    assert CorruptingStore.damaged == 1
    logs = read_metrics(run_dir / "metrics.jsonl")
    assert [r["corrupt_shards"] for r in logs] == [0, 1, 0]
    assert [r["recollected_shares"] for r in logs] == [0, 1, 0]
    assert_same_training(reference, run_dir)
