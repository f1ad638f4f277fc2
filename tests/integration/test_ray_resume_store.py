"""--mode ray with rollouts in the rollout store: the learner dies after iteration 1's
shards are stored; `skurl train --mode ray --resume` restores the last checkpoint, trains
on those stored shards instead of collecting them again, and ends with the weights of an
uninterrupted run (one collector: bit for bit equal to --mode colocated)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

ray = pytest.importorskip("ray")

from test_ray_mode import ITERATIONS, config, final_weights, local_ray  # noqa: E402, F401

from skurl.cli import main  # noqa: E402
from skurl.modes import colocated  # noqa: E402
from skurl.modes.ray import wiring as ray_mode  # noqa: E402
from skurl.modes.ray.collectors import RayCollectors  # noqa: E402
from skurl.store.local import LocalRolloutStore  # noqa: E402
from skurl.telemetry.logger import read_metrics  # noqa: E402
from skurl.train import run as training  # noqa: E402
from skurl.train.loop import Trainer  # noqa: E402

DIES_AT = 1


class LearnerDied(RuntimeError):
    pass


class DiesAfterCollecting(RayCollectors):
    def collect(self, seed: int, episode: int, version: int | None = None) -> Any:
        rollout = super().collect(seed, episode, version)
        if episode == DIES_AT:
            raise LearnerDied("the learner stops once iteration 1's shards are in the store")
        return rollout


def test_restarted_learner_trains_on_the_stored_shards(tmp_path: Path) -> None:
    reference = tmp_path / "colocated"
    training.start(colocated.mode, config(), reference, baseline=False)
    store_dir, run_dir = tmp_path / "rollouts", tmp_path / "ray"
    cfg = config("ray.rollouts=store", f"store.url={store_dir}")
    run = Trainer(cfg, run_dir, ray_mode.RayMode(cfg), baseline=False)
    run.collectors.fanout = DiesAfterCollecting  # type: ignore[attr-defined]
    with pytest.raises(LearnerDied):
        run.run()  # closes the actors
    stored = LocalRolloutStore(store_dir).list_shards(DIES_AT)
    assert [m.collector_id for m in stored] == ["ray-collector-0"]

    assert main(["train", "--mode", "ray", "--resume", str(run_dir), "--no-baseline"]) == 0
    records = read_metrics(run_dir / "metrics.jsonl")
    assert [r["iteration"] for r in records] == list(range(ITERATIONS))
    assert [r["stored_shards_reused"] for r in records] == [0, 1, 0]  # iteration 1 was not collected again
    assert records[DIES_AT]["reward_mean"] == read_metrics(reference / "metrics.jsonl")[DIES_AT]["reward_mean"]
    want, got = final_weights(reference), final_weights(run_dir)
    for k in want:
        assert torch.equal(want[k], got[k]), k
