"""Supply networks (catalog.synthetic.network=dc: a DC feeding 2-10 stores per item) in every
mode: colocated, decoupled (2 sim servers, 2 collectors as processes on loopback) and ray
(2 simulator workers) train bit for bit alike, and a resumed colocated run ends where an
unbroken one does. A network is one partition unit, so each shard holds whole networks."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from skurl.catalog import load_catalog
from skurl.config import Config, load_config
from skurl.learn.checkpoint import latest_checkpoint, load_checkpoint
from skurl.modes import colocated
from skurl.modes.decoupled import wiring as decoupled
from skurl.telemetry.logger import read_metrics
from skurl.train import run as training

NETWORK = [
    "catalog.kind=synthetic", "catalog.synthetic.network=dc", "catalog.skus=160", "catalog.seed=5",
    "sim.days=8", "policy.hidden=[16,16]", "ppo.epochs=2", "ppo.minibatch=256", "train.iterations=3",
    "train.checkpoint_every=1", "train.eval_every=0", "eval.days=4", "eval.warmup=2",
    "train.torch_threads=1", "sim.threads=1", "collect.infer_dtype=float32",
    "deploy.sim_servers=2", "deploy.collectors=2", "sync.timeout_s=20", "ray.num_workers=2",
]


def network(*extra: str) -> Config:
    return load_config(None, NETWORK + list(extra))


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    path = latest_checkpoint(run_dir)
    assert path is not None and path.name == "iter_000003", path
    tensors, _ = load_checkpoint(path)
    return {k: v for k, v in tensors.items() if not k.startswith("rng/")}


def assert_same(a: Path, b: Path) -> None:
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k
    ra = [r["reward_mean"] for r in read_metrics(a / "metrics.jsonl")]
    assert ra == [r["reward_mean"] for r in read_metrics(b / "metrics.jsonl")] and len(ra) == 3


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cat = load_catalog(network().catalog)
    assert cat.has_network and (cat.upstream >= 0).sum() > len(cat) // 2  # mostly stores under DCs
    run_dir = tmp_path_factory.mktemp("colocated") / "run"
    training.start(colocated.mode, network(), run_dir, baseline=False)
    return run_dir


def test_a_resumed_network_run_ends_where_an_unbroken_one_does(reference: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    training.start(colocated.mode, network(), run_dir, baseline=False, stop_after=2)
    training.resume(colocated.mode, run_dir, [], baseline=False)
    assert_same(reference, run_dir)


def test_decoupled_network_training_equals_colocated(reference: Path, tmp_path: Path) -> None:
    training.start(decoupled.launched, network("sync.backend=grpc"), tmp_path / "run", baseline=False)
    assert_same(reference, tmp_path / "run")


def test_ray_network_training_equals_colocated(reference: Path, tmp_path: Path) -> None:
    pytest.importorskip("ray")
    import ray

    from skurl.modes.ray import wiring as ray_mode

    try:
        training.start(ray_mode.mode, network("ray.num_cpus=2"), tmp_path / "run", baseline=False)
    finally:
        if ray.is_initialized():
            ray.shutdown()
    assert_same(reference, tmp_path / "run")
