"""The echelon-centred grid (policy.actions.center_policy=echelon-base-stock, configs/serial.yaml)
in every mode: colocated, decoupled (2 sim servers, 2 collectors on loopback) and ray (2
simulator workers) train bit for bit alike. It reads the raw state's `owed` (the echelon
position counts what the upstream owes a row), which remote envs carry on supply networks
(rpc/env_wire.py, modes/ray/actors.py LeanDay); each shard holds whole networks. With
train.algo=dcl the collectors label too, every rollout clone bringing its network."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from skurl.catalog import load_catalog
from skurl.config import Config, load_config
from skurl.learn.checkpoint import latest_checkpoint, load_checkpoint
from skurl.modes import colocated
from skurl.modes.decoupled import wiring as decoupled
from skurl.sim.env import VectorEnv
from skurl.telemetry.logger import read_metrics
from skurl.train import run as training

pytestmark = pytest.mark.slow  # six trainings: about a minute and a half here

SERIAL = Path(__file__).resolve().parents[2] / "configs" / "serial.yaml"
SMALL = [
    "catalog.skus=40", "catalog.seed=5", "sim.days=8", "policy.hidden=[16,16]", "ppo.epochs=2",
    "ppo.minibatch=64", "train.iterations=3", "train.checkpoint_every=1", "train.eval_every=0",
    "train.keep_best=false", "eval.days=4", "eval.warmup=2", "eval.skus=40", "eval.baselines=[]",
    "train.torch_threads=1", "sim.threads=1", "collect.infer_dtype=float32",
    "deploy.sim_servers=2", "deploy.collectors=2", "sync.timeout_s=20", "ray.num_workers=2",
]


def serial(*extra: str) -> Config:
    return load_config(SERIAL, SMALL + list(extra))


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    path = latest_checkpoint(run_dir)
    assert path is not None and path.name == "iter_000003", path
    tensors, _ = load_checkpoint(path)
    return {k: v for k, v in tensors.items() if not k.startswith("rng/")}


def assert_same(a: Path, b: Path, figure: str = "reward_mean") -> None:
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k
    ra = [r[figure] for r in read_metrics(a / "metrics.jsonl")]
    assert ra == [r[figure] for r in read_metrics(b / "metrics.jsonl")] and len(ra) == 3


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cfg = serial()
    assert cfg.policy.actions.center_policy == "echelon-base-stock" and cfg.policy.actions.kind == "cover"
    run_dir = tmp_path_factory.mktemp("colocated") / "run"
    training.start(colocated.mode, cfg, run_dir, baseline=False)
    return run_dir


def test_the_episode_owes_units_so_owed_matters() -> None:
    """Without units owed, a run that dropped `owed` would train alike too: not here."""
    cfg = serial()
    env = VectorEnv(load_catalog(cfg.catalog), cfg.sim)
    obs, owed = env.reset(1, 0), 0
    for _ in range(cfg.sim.days):
        assert obs.raw.owed is not None
        obs = env.step(np.full(env.num_skus, 3.0 * float(obs.raw.forecast[:, 0].max()))).obs
        owed += int(obs.raw.owed.sum())
    assert owed > 0


def test_decoupled_echelon_grid_training_equals_colocated(reference: Path, tmp_path: Path) -> None:
    training.start(decoupled.launched, serial("sync.backend=grpc"), tmp_path / "run", baseline=False)
    assert_same(reference, tmp_path / "run")


def test_ray_echelon_grid_training_equals_colocated(reference: Path, tmp_path: Path) -> None:
    pytest.importorskip("ray")
    import ray

    from skurl.modes.ray import wiring as ray_mode

    try:
        training.start(ray_mode.mode, serial("ray.num_cpus=2"), tmp_path / "run", baseline=False)
    finally:
        if ray.is_initialized():
            ray.shutdown()
    assert_same(reference, tmp_path / "run")


DCL = ["train.algo=dcl", "train.warm_start=echelon-base-stock", "train.warm_start_steps=20", "dcl.states=40",
       "dcl.budget=6", "dcl.horizon=6", "dcl.warmup=3", "dcl.spread=2", "dcl.fit_steps=10", "dcl.check_episodes=1"]


@pytest.fixture(scope="module")
def reference_dcl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """DCL labels in the collectors (learn/labelling.py): each rollout clone brings its network."""
    run_dir = tmp_path_factory.mktemp("colocated-dcl") / "run"
    training.start(colocated.mode, serial(*DCL), run_dir, baseline=False)
    assert all(r["dcl_rollout_sku_days"] > 0 for r in read_metrics(run_dir / "metrics.jsonl"))
    return run_dir


def test_decoupled_dcl_on_networks_equals_colocated(reference_dcl: Path, tmp_path: Path) -> None:
    training.start(decoupled.launched, serial(*DCL, "sync.backend=grpc"), tmp_path / "run", baseline=False)
    assert_same(reference_dcl, tmp_path / "run", "dcl_q_gap")


def test_ray_dcl_on_networks_equals_colocated(reference_dcl: Path, tmp_path: Path) -> None:
    pytest.importorskip("ray")
    import ray

    from skurl.modes.ray import wiring as ray_mode

    try:
        training.start(ray_mode.mode, serial(*DCL, "ray.num_cpus=2"), tmp_path / "run", baseline=False)
    finally:
        if ray.is_initialized():
            ray.shutdown()
    assert_same(reference_dcl, tmp_path / "run", "dcl_q_gap")
