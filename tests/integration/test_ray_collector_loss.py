"""--mode ray, 2 simulator workers driven by 2 collector actors (about half the SKUs
each); collector 1 is killed in the middle of iteration 1's collection.

- deploy.max_lost_share above its share: the iteration trains on collector 0's SKUs
  only (logged, counted), the collector is replaced and the next iteration is whole.
  This run differs from an undisturbed one by design.
- the default 5%: the iteration waits for the replacement to re-collect the lost share
  and the run ends with the weights of an undisturbed run, bit for bit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from prometheus_client import CollectorRegistry

ray = pytest.importorskip("ray")

from test_ray_mode import ITERATIONS, config, final_weights, local_ray  # noqa: E402, F401

from skurl.config import Config  # noqa: E402
from skurl.modes.ray import wiring as ray_mode  # noqa: E402
from skurl.modes.ray.cluster import RayCluster  # noqa: E402
from skurl.modes.ray.collectors import RayCollectors, Share  # noqa: E402
from skurl.telemetry.logger import read_metrics  # noqa: E402
from skurl.telemetry.metrics import use_registry  # noqa: E402
from skurl.train import run as training  # noqa: E402
from skurl.train.loop import Trainer  # noqa: E402

KILL_AT, VICTIM = 1, 1
TWO = ("ray.collectors=2", "ppo.reward_scale=sku")


class KillingCollectors(RayCollectors):
    """Kills the victim's actor right after sending it the iteration's collect task."""

    killed = False

    def _send(self, share: Share, seed: int, episode: int, version: int) -> Any:
        ref = super()._send(share, seed, episode, version)
        if episode == KILL_AT and share.index == VICTIM and not KillingCollectors.killed:
            KillingCollectors.killed = True  # once: the replacement then collects normally
            ray.kill(self.run.collector_actors[share.index], no_restart=True)
        return ref


def train(cfg: Config, run_dir: Path) -> tuple[Trainer, RayCluster]:
    run = Trainer(cfg, run_dir, ray_mode.RayMode(cfg), baseline=False)
    run.collectors.fanout = KillingCollectors  # type: ignore[attr-defined]
    KillingCollectors.killed = False
    run.run()
    return run, run.collectors.cluster  # type: ignore[attr-defined]


def test_a_small_lost_share_is_trained_without_and_counted(tmp_path: Path) -> None:
    with use_registry(CollectorRegistry()) as metrics:
        run, cluster = train(config(*TWO, "deploy.max_lost_share=0.6"), tmp_path / "run")
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["iteration"] for r in records] == list(range(ITERATIONS))
    lost = records[KILL_AT]
    victim_skus = next(s.rows.size for s in cluster.placements[0].shares if s.index == VICTIM)
    assert lost["lost_collectors"] == 1 and lost["lost_skus"] == victim_skus
    assert 0 < lost["lost_share"] <= 0.6
    skus, days = run.cfg.catalog.skus, run.cfg.sim.days
    assert lost["transitions"] == days * (skus - victim_skus)  # only the survivors' columns
    for r in (records[0], records[2]):  # the replacement collects the next iteration whole
        assert r["lost_skus"] == 0 and r["transitions"] == days * skus
    assert records[-1]["collector_replacements"] == 1
    assert metrics.registry.get_sample_value("collector_shares_lost_total") == 1
    assert metrics.registry.get_sample_value("collector_lost_skus_total") == victim_skus
    # Per-SKU reward statistics saw the lost SKUs in 2 iterations, the others in 3.
    scaler = run.learner.reward_scaler
    victim_ids = torch.from_numpy(run.core.catalog.sku_id[next(s.rows for s in cluster.placements[0].shares
                                                          if s.index == VICTIM)])
    seen = torch.isin(scaler.ids, victim_ids)
    assert int(seen.sum()) == victim_skus
    assert bool((scaler.count[seen] < scaler.count[~seen].min()).all())


def test_a_large_lost_share_is_recollected_by_a_replacement(tmp_path: Path) -> None:
    training.start(ray_mode.mode, config(*TWO), tmp_path / "undisturbed", baseline=False)
    with use_registry(CollectorRegistry()) as metrics:
        train(config(*TWO), tmp_path / "run")  # deploy.max_lost_share 0.05 < ~50%
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert records[KILL_AT]["lost_collectors"] == 1 and records[KILL_AT]["lost_share"] > 0.05
    assert records[-1]["collector_replacements"] == 1
    skus, days = config().catalog.skus, config().sim.days
    assert all(r["transitions"] == days * skus for r in records)
    assert metrics.registry.get_sample_value("collector_shares_lost_total") == 0
    want, got = final_weights(tmp_path / "undisturbed"), final_weights(tmp_path / "run")
    for k in want:
        assert torch.equal(want[k], got[k]), k
