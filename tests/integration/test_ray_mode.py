"""--mode ray on a local Ray instance (small synthetic catalog, 2 simulator workers): the
same config and seed give bit-identical weights to --mode colocated, also across a
resume through `skurl train --mode ray --resume`; resource and sync checks. Helpers are
shared with test_ray_store.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

ray = pytest.importorskip("ray")

from skurl.cli import main  # noqa: E402
from skurl.config import Config, RayConfig, load_config  # noqa: E402
from skurl.errors import ConfigError  # noqa: E402
from skurl.learn.checkpoint import latest_checkpoint, model_state  # noqa: E402
from skurl.modes import colocated  # noqa: E402
from skurl.modes.ray import wiring as ray_mode  # noqa: E402
from skurl.modes.ray.cluster import start_ray  # noqa: E402
from skurl.train import run as training  # noqa: E402

ITERATIONS = 3
SETTINGS = ["catalog.skus=300", "catalog.seed=3", "sim.days=10", "policy.hidden=[16,16]", "ppo.epochs=2",
            "ppo.minibatch=256", f"train.iterations={ITERATIONS}", "train.checkpoint_every=1",
            "train.eval_every=0", "train.torch_threads=1", "eval.days=5", "eval.warmup=1",
            "ray.num_workers=2"]


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Iterator[None]:
    started = start_ray(RayConfig(num_cpus=2))
    yield
    if started:
        ray.shutdown()


def config(*extra: str) -> Config:
    return load_config(None, [*SETTINGS, *extra])


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    path = latest_checkpoint(run_dir)
    assert path is not None and path.name == f"iter_{ITERATIONS:06d}"
    return model_state(path)[0]


def last_record(run_dir: Path) -> dict[str, float]:
    return json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("colocated")
    training.start(colocated.mode, config(), run_dir, baseline=False)
    return run_dir


def test_ray_mode_equals_colocated_bit_for_bit_across_a_resume(reference: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "ray"
    training.start(ray_mode.mode, config(), run_dir, baseline=False, stop_after=2)
    assert main(["train", "--mode", "ray", "--resume", str(run_dir), "--no-baseline"]) == 0
    want, got = final_weights(reference), final_weights(run_dir)
    assert want.keys() == got.keys()
    for k in want:
        assert torch.equal(want[k], got[k]), k
    ours, theirs = last_record(run_dir), last_record(reference)
    for key in ("reward_mean", "policy_loss", "eval_cost"):
        assert ours[key] == theirs[key], key
    assert ours["failed_skus"] == 0 and ours["worker_recoveries"] == 0
    assert main(["train", "--mode", "ray", "--resume", str(run_dir), "--run-dir", "x"]) == 2  # one line


def test_a_warm_started_ray_training_equals_colocated(tmp_path: Path) -> None:
    warm = ("train.warm_start=forecast-base-stock", "train.warm_start_episodes=1", "train.warm_start_steps=20",
            "train.warm_start_critic=1", "train.keep_best=true", "train.eval_every=1")
    training.start(colocated.mode, config(*warm), tmp_path / "colocated", baseline=False)
    training.start(ray_mode.mode, config(*warm), tmp_path / "ray", baseline=False)
    want, got = final_weights(tmp_path / "colocated"), final_weights(tmp_path / "ray")
    for k in want:
        assert torch.equal(want[k], got[k]), k
    first = json.loads((tmp_path / "ray" / "metrics.jsonl").read_text().splitlines()[0])
    assert first["warm_start_rows"] == 300 * 10 and first["approx_kl"] == 0.0
    evals = [json.loads((tmp_path / mode / "eval.json").read_text()) for mode in ("colocated", "ray")]
    assert evals[0]["policies"] == evals[1]["policies"]  # the same policy kept (train.keep_best)
    assert "warm_start_validation_score" in first and "validation_score" in first  # the clone is a candidate too


def test_a_cover_grid_ray_training_equals_colocated(tmp_path: Path) -> None:
    """The embedded defaults' grid (order-up-to, centred on the tuned baseline) in the
    collector actors: the shards' catalog rows, lean days with the raw state and the
    driver's centre give the co-located orders, bit for bit."""
    cover = ("policy.actions.kind=cover", "policy.actions.z_center=tuned", "policy.actions.n=5",
             "policy.actions.z_min=-1", "policy.actions.z_max=1", "train.warm_start=forecast-base-stock",
             "train.warm_start_episodes=1", "train.warm_start_steps=20", "train.warm_start_critic=1",
             "ray.collectors=2")
    training.start(colocated.mode, config(*cover), tmp_path / "colocated", baseline=False)
    training.start(ray_mode.mode, config(*cover), tmp_path / "ray", baseline=False)
    want, got = final_weights(tmp_path / "colocated"), final_weights(tmp_path / "ray")
    for k in want:
        assert torch.equal(want[k], got[k]), k
    ours, theirs = last_record(tmp_path / "ray"), last_record(tmp_path / "colocated")
    assert ours["reward_mean"] == theirs["reward_mean"]


def test_actors_that_do_not_fit_the_cluster_are_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"ray\.cpus_per_worker.*8 workers x 1"):
        training.start(ray_mode.mode, config("ray.num_workers=8", "ray.cpus_per_worker=1"), tmp_path / "x", baseline=False)
    with pytest.raises(ConfigError, match=r"sync\.backend"):
        training.start(ray_mode.mode, config("sync.backend=redis"), tmp_path / "y", baseline=False)


def test_train_command_takes_mode_ray_and_an_address() -> None:
    from skurl.cli import build_parser

    args = build_parser().parse_args(["train", "--mode", "ray", "--address", "10.0.0.5:6379"])
    assert (args.mode, args.address) == ("ray", "10.0.0.5:6379")
    cfg = ray_mode.with_address(config(), args.address)
    assert cfg.ray.address == "10.0.0.5:6379" and ray_mode.with_address(cfg, None) is cfg
