"""train.algo=dcl on a small embedded catalog (the cover grid centred on tuned forecast-s-S,
substitution groups, promotions, perishables): --mode decoupled (2 sim servers, 2 collectors)
and --mode ray (2 collector actors) label on their collectors and train the colocated
weights bit for bit; the collectors' labellers take the run's tuned grid centre."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from test_decoupled import final_weights

from skurl.commands.common import embedded_overrides
from skurl.config import RayConfig, load_config
from skurl.modes import colocated
from skurl.modes.decoupled import wiring as decoupled
from skurl.telemetry.logger import read_metrics
from skurl.train import run as training

EMBEDDED_DCL = [
    *embedded_overrides(), "catalog.skus=120", "ppo.sample_skus=0", "train.iterations=2", "train.eval_every=0",
    "train.keep_best=false", "train.checkpoint_every=1", "train.algo=dcl", "sim.days=30", "eval.days=10",
    "eval.warmup=2", "dcl.states=120", "dcl.budget=8", "dcl.warmup=5", "dcl.spread=3", "dcl.fit_steps=20",
    "dcl.check_episodes=1", "train.warm_start_steps=30", "train.torch_threads=1", "sim.threads=1",
    "policy.hidden=[32,32]", "collect.infer_dtype=float32", "sync.timeout_s=60",
]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.Tensor]:
    run_dir = tmp_path_factory.mktemp("colocated")
    cfg = load_config(None, EMBEDDED_DCL)
    assert (cfg.policy.actions.kind, cfg.policy.actions.z_center) == ("cover", "tuned")
    training.start(colocated.mode, cfg, run_dir, baseline=False)
    return final_weights(run_dir)


def _same(want: dict[str, torch.Tensor], run_dir: Path) -> None:
    got = final_weights(run_dir)
    assert set(want) == set(got)
    for k in want:
        assert torch.equal(want[k], got[k]), k
    for r in read_metrics(run_dir / "metrics.jsonl"):
        assert r["dcl_label_collector_seconds_max"] > 0  # the collectors labelled


@pytest.mark.slow
def test_decoupled_collectors_label_the_embedded_catalog_as_colocated(reference, tmp_path: Path) -> None:
    cfg = load_config(None, [*EMBEDDED_DCL, "sync.backend=grpc", "deploy.sim_servers=2", "deploy.collectors=2",
                             f"store.url={tmp_path / 'store'}"])
    training.start(decoupled.launched, cfg, tmp_path / "decoupled", baseline=False)
    _same(reference, tmp_path / "decoupled")


@pytest.fixture()
def local_ray() -> Iterator[None]:
    ray = pytest.importorskip("ray")
    from skurl.modes.ray.cluster import start_ray

    started = start_ray(RayConfig(num_cpus=2))
    yield
    if started:
        ray.shutdown()


@pytest.mark.slow
def test_ray_collectors_label_the_embedded_catalog_as_colocated(reference, tmp_path: Path, local_ray: None) -> None:
    from skurl.modes.ray import wiring as ray_mode

    cfg = load_config(None, [*EMBEDDED_DCL, "ray.num_workers=2", "ray.collectors=2", "ray.cpus_per_worker=0.25",
                             "ray.cpus_per_collector=0.25", "ray.get_timeout_s=120"])
    training.start(ray_mode.mode, cfg, tmp_path / "ray", baseline=False)
    _same(reference, tmp_path / "ray")
