"""Fixed staleness (collect.staleness = N, collect/staleness.py) in every mode: iteration k is
collected with exactly version max(0, k - N), so decoupled (gRPC collectors, the
behaviour version published to the wire from the weight history) and ray (the behaviour
version put into the Ray weight slot) train bit for bit as colocated does. Bounded
staleness (collect/bounded.py) runs in both: no update trains a rollout more than N behind."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_decoupled import assert_same_training, tiny

from skurl.modes import colocated
from skurl.modes.decoupled import wiring as decoupled
from skurl.modes.decoupled.supervisor import InProcessRoles
from skurl.telemetry.logger import read_metrics
from skurl.train import run as training


def behaviour_versions(run_dir: Path) -> list[float]:
    return [r["behaviour_version"] for r in read_metrics(run_dir / "metrics.jsonl")]


def assert_bounded(run_dir: Path, n: int, iterations: int) -> None:
    """Every update trained a rollout at most `n` versions behind it, and the run finished."""
    records = read_metrics(run_dir / "metrics.jsonl")
    lags = [r["policy_lag_versions"] for r in records]
    assert len(lags) == iterations and all(0 <= lag <= n for lag in lags), lags
    assert max(lags) >= 1  # collected while the learner trained
    assert all(r["behaviour_version"] == r["policy_version"] - 1 - r["policy_lag_versions"] for r in records)
    assert (run_dir / "report.md").is_file()


@pytest.mark.slow
def test_decoupled_fixed_staleness_equals_colocated(tmp_path: Path, redis_url: str, unique_name: str) -> None:
    cfg = tiny("sync.backend=redis", f"sync.redis_url={redis_url}", f"sync.key={unique_name}", "collect.staleness=1")
    training.start(colocated.mode, cfg, tmp_path / "colocated", baseline=False)
    roles = InProcessRoles(cfg)  # collectors as servers in this process: the same gRPC services
    try:
        decoupled.run_with_collectors(roles.cfg, tmp_path / "decoupled", roles.collector_addresses, baseline=False)
    finally:
        roles.close()
    assert behaviour_versions(tmp_path / "decoupled") == [0, 0, 1]  # max(0, k - 1), no warm start
    assert_same_training(tmp_path / "colocated", tmp_path / "decoupled")


@pytest.mark.slow
def test_ray_fixed_staleness_equals_colocated_and_bounded_runs(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    import ray
    from test_ray_mode import config, final_weights

    from skurl.config import RayConfig
    from skurl.modes.ray import wiring as ray_mode
    from skurl.modes.ray.cluster import start_ray

    started = start_ray(RayConfig(num_cpus=2))
    try:
        cfg = config("collect.staleness=1")
        training.start(colocated.mode, cfg, tmp_path / "colocated", baseline=False)
        training.start(ray_mode.mode, cfg, tmp_path / "ray", baseline=False)
        training.start(ray_mode.mode, config("collect.staleness=1", "collect.staleness_mode=bounded"), tmp_path / "bounded",
                       baseline=False)
    finally:
        if started:
            ray.shutdown()
    assert behaviour_versions(tmp_path / "ray") == [0, 0, 1]  # max(0, k - 1)
    want, got = final_weights(tmp_path / "colocated"), final_weights(tmp_path / "ray")
    for k in want:
        assert torch.equal(want[k], got[k]), k
    assert_bounded(tmp_path / "bounded", 1, len(behaviour_versions(tmp_path / "ray")))

