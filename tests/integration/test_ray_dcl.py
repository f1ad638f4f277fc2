"""train.algo=dcl under --mode ray: the collector actors label their own SKUs of the training
shard (modes/ray/labellers.py) and the learner fits on the union, giving the weights
--mode colocated gives, bit for bit; through the rollout store (checksummed label shards)
too, and when a collector is killed mid-labelling (its part asked of its replacement)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

ray = pytest.importorskip("ray")

from test_dcl_training import DCL  # noqa: E402
from test_decoupled import final_weights  # noqa: E402

from skurl.config import RayConfig, load_config  # noqa: E402
from skurl.modes import colocated  # noqa: E402
from skurl.modes.ray import wiring as ray_mode  # noqa: E402
from skurl.modes.ray.cluster import start_ray  # noqa: E402
from skurl.telemetry.logger import read_metrics  # noqa: E402
from skurl.telemetry.metrics import get_metrics  # noqa: E402
from skurl.train import run as training  # noqa: E402

SETTINGS = [*DCL, "train.iterations=2", "ray.num_workers=2", "ray.collectors=2", "ray.cpus_per_worker=0.25",
            "ray.cpus_per_collector=0.25", "ray.get_timeout_s=120"]


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Iterator[None]:
    started = start_ray(RayConfig(num_cpus=2))
    yield
    if started:
        ray.shutdown()


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.Tensor]:
    run_dir = tmp_path_factory.mktemp("colocated")
    training.start(colocated.mode, load_config(None, SETTINGS), run_dir, baseline=False)
    return final_weights(run_dir)


def _same(want: dict[str, torch.Tensor], got: dict[str, torch.Tensor]) -> None:
    assert set(want) == set(got)
    for k in want:
        assert torch.equal(want[k], got[k]), k


@pytest.mark.parametrize("rollouts", ["store"])  # object_store: tests/integration/test_dcl_embedded_modes.py
def test_ray_collectors_label_what_colocated_labels(reference, tmp_path: Path, rollouts: str) -> None:
    cfg = load_config(None, [*SETTINGS, f"ray.rollouts={rollouts}", f"store.url={tmp_path / 'store'}"])
    training.start(ray_mode.mode, cfg, tmp_path / "ray", baseline=False)
    _same(reference, final_weights(tmp_path / "ray"))
    records = read_metrics(tmp_path / "ray" / "metrics.jsonl")
    for r in records:
        assert 0 <= r["dcl_label_collector_idle_share"] <= 1 and r["dcl_label_collector_seconds_max"] > 0
        assert r["dcl_check_collector_seconds_max"] > 0
        if rollouts == "store":  # every part through the store, one per collector and labelling
            assert r["dcl_label_shards_stored"] == 2 * (1 + r["dcl_corrections"])
    registry = get_metrics().registry  # and on Prometheus
    assert (registry.get_sample_value("dcl_collector_label_seconds_count") or 0) >= 4 * len(records)
    assert 0 <= (registry.get_sample_value("dcl_collector_idle_share") or -1) <= 1
    assert (registry.get_sample_value("dcl_rollout_sku_days_per_second") or 0) > 0
    assert (registry.get_sample_value("dcl_rollout_row_days_per_second") or 0) >= \
        (registry.get_sample_value("dcl_rollout_sku_days_per_second") or 0)
    if rollouts == "store":
        assert (registry.get_sample_value("dcl_label_shards_total", {"outcome": "stored"}) or 0) >= 2 * len(records)


def test_a_collector_killed_mid_labelling_is_replaced_and_relabels(reference, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from skurl.modes.ray import labellers

    gather, killed = labellers.RayLabellers._gather, []

    def kill_first(self, key, blob, shares):
        if not killed:  # the first fan-out: collector 1 dies while its part is asked
            refs_sent = gather(self, key, blob, shares[:1])
            ray.kill(self.cluster.collector_actors[shares[1].index], no_restart=True)
            killed.append(shares[1].index)
            more, lost = gather(self, key, blob, shares[1:])
            return {**refs_sent[0], **more}, [*refs_sent[1], *lost]
        return gather(self, key, blob, shares)

    monkeypatch.setattr(labellers.RayLabellers, "_gather", kill_first)
    cfg = load_config(None, [*SETTINGS, "deploy.max_restarts=2"])
    cfg = dataclasses.replace(cfg, store=dataclasses.replace(cfg.store, url=str(tmp_path / "store")))
    training.start(ray_mode.mode, cfg, tmp_path / "ray", baseline=False)
    assert killed == [1]
    _same(reference, final_weights(tmp_path / "ray"))
    first = read_metrics(tmp_path / "ray" / "metrics.jsonl")[0]
    assert first["dcl_label_requeued"] == 1
