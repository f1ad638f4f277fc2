"""Tiny trained runs for the serving tests, trained once per session (cached under the
session's base temp dir, so every test module that asks reuses them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from skurl.cli import main

COMMON = ["policy.hidden=[32,32]", "ppo.epochs=1", "ppo.minibatch=512", "train.iterations=1", "train.eval_every=1",
          "train.torch_threads=1", "eval.days=8", "eval.warmup=2", "train.keep_best=false", "sim.days=100"]
# The embedded defaults' grid: order-up-to offsets around the per-SKU tuned centre.
SYNTHETIC = ["catalog.skus=200", "ppo.sample_skus=200", "policy.actions.kind=cover", "policy.actions.z_center=tuned",
             "policy.actions.n=21", "policy.actions.z_min=-1.5", "policy.actions.z_max=1.5",
             "policy.actions.center_policy=forecast-s-S", "train.warm_start=forecast-s-S",
             "train.warm_start_episodes=1", "train.warm_start_steps=50"]
# The classic lost-sales family (configs/lost_sales.yaml): identical SKUs, units grid; one
# PPO iteration (the config's DCL labels 20,000 states an iteration: a minute, not a fixture).
LOST_SALES = ["catalog.skus=200", "train.warm_start=none", "train.algo=ppo"]
LOST_SALES_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "lost_sales.yaml"


def sets(items: list[str]) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


def trained(factory: pytest.TempPathFactory, name: str, args: list[str]) -> Path:
    run = factory.getbasetemp() / "serve_runs" / name
    if not (run / "checkpoints").is_dir():
        run.parent.mkdir(parents=True, exist_ok=True)
        assert main(["train", "--run-dir", str(run), *args]) == 0
    return run


def exported(run: Path) -> Path:
    """The run's policy as RUN/policy.onnx, exported once."""
    from skurl.serve.export import export_run

    out = run / "policy.onnx"
    return out if out.is_file() else export_run(run, out)


@pytest.fixture(scope="session")
def synthetic_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return trained(tmp_path_factory, "synthetic", sets(COMMON + SYNTHETIC))


@pytest.fixture(scope="session")
def lost_sales_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return trained(tmp_path_factory, "lost_sales", ["--config", str(LOST_SALES_CONFIG), *sets(COMMON + LOST_SALES)])


@pytest.fixture(scope="session")
def synthetic_onnx(synthetic_run: Path) -> Path:
    return exported(synthetic_run)


@pytest.fixture(scope="session")
def lost_sales_onnx(lost_sales_run: Path) -> Path:
    return exported(lost_sales_run)


# The embedded grid made joint (policy.actions.lot_factors): 4 lot blocks of 21 offsets.
JOINT = [*SYNTHETIC, "policy.actions.lot_factors=[0, 0.5, 1, 2]"]


@pytest.fixture(scope="session")
def joint_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return trained(tmp_path_factory, "joint", sets(COMMON + JOINT))


@pytest.fixture(scope="session")
def joint_onnx(joint_run: Path) -> Path:
    return exported(joint_run)


# The embedded grid on a `dc` supply network (docs/networks.md): one DC and 2-10 stores an item.
NETWORK = [*SYNTHETIC, "catalog.synthetic.network=dc"]


@pytest.fixture(scope="session")
def network_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return trained(tmp_path_factory, "network", sets(COMMON + NETWORK))


@pytest.fixture(scope="session")
def network_onnx(network_run: Path) -> Path:
    return exported(network_run)


# The echelon-centred grid on a `dc` network (policy/echelon_cover.py): offsets -2..2 around the
# tuned echelon base-stock level, on the echelon position, with the skip action; random weights
# (no warm start), so the greedy choice spreads over the offsets instead of cloning offset 0.
ECHELON = ["catalog.synthetic.network=dc", "catalog.skus=120", "ppo.sample_skus=120", "policy.actions.kind=cover",
           "policy.actions.z_center=tuned", "policy.actions.center_policy=echelon-base-stock",
           "policy.actions.n=10", "policy.actions.z_min=-2", "policy.actions.z_max=2", "policy.actions.skip=true",
           "sim.backorders=false", "train.warm_start=none"]


@pytest.fixture(scope="session")
def echelon_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return trained(tmp_path_factory, "echelon", sets(COMMON + ECHELON))


@pytest.fixture(scope="session")
def echelon_onnx(echelon_run: Path) -> Path:
    return exported(echelon_run)
