"""Fixed staleness (train.staleness = N, collect/staleness.py) in every mode: iteration k is
collected with exactly version max(0, k - N), so decoupled (gRPC collector processes, the
behaviour version published to the wire from the weight history) and ray (the behaviour
version put into the Ray weight slot) train bit for bit as colocated does."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_decoupled import assert_same_training, tiny

from skurl.deploy import colocated, decoupled
from skurl.telemetry.logger import read_metrics


def behaviour_versions(run_dir: Path) -> list[float]:
    return [r["behaviour_version"] for r in read_metrics(run_dir / "metrics.jsonl")]


@pytest.mark.slow
def test_decoupled_fixed_staleness_equals_colocated(tmp_path: Path) -> None:
    cfg = tiny("sync.backend=grpc", "train.staleness=1")
    colocated.train(cfg, tmp_path / "colocated", baseline=False)
    decoupled.train(cfg, tmp_path / "decoupled", baseline=False)
    assert behaviour_versions(tmp_path / "decoupled") == [0, 0, 1]  # max(0, k - 1), no warm start
    assert_same_training(tmp_path / "colocated", tmp_path / "decoupled")


@pytest.mark.slow
def test_ray_fixed_staleness_equals_colocated(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    import ray
    from test_ray_mode import config, final_weights

    from skurl.config import RayConfig
    from skurl.deploy import ray_mode
    from skurl.raycluster.cluster import start_ray

    started = start_ray(RayConfig(num_cpus=2))
    try:
        cfg = config("train.staleness=1")
        colocated.train(cfg, tmp_path / "colocated", baseline=False)
        ray_mode.train(cfg, tmp_path / "ray", baseline=False)
    finally:
        if started:
            ray.shutdown()
    assert behaviour_versions(tmp_path / "ray") == [0, 0, 1]  # max(0, k - 1)
    want, got = final_weights(tmp_path / "colocated"), final_weights(tmp_path / "ray")
    for k in want:
        assert torch.equal(want[k], got[k]), k
