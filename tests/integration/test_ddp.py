"""The DDP learner on 2 CPU ranks (gloo over loopback, torch.multiprocessing): one update
on 2 ranks equals the update one rank makes on the same data; global advantage
normalization differs measurably from per-rank normalization on skewed data; a rank that
gets no SKU (N < ranks) still joins every collective."""

from __future__ import annotations

import json
import socket
import time
import traceback
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from safetensors.numpy import load_file as load_np
from safetensors.numpy import save_file as save_np
from safetensors.torch import load_file, save_file

from skurl.buffer.rollout import Rollout
from skurl.config import Config, load_config
from skurl.learn.ddp import DDPLearner, rank_slice
from skurl.learn.learner import Learner
from skurl.modes.ddp.learner import ENTRY, main

OBS, ACTIONS, DAYS = 6, 5, 12
TIMEOUT_S = 120
SETTINGS = ["policy.hidden=[16,16]", "ppo.minibatch=50", "ppo.epochs=3", "train.iterations=10",
            "train.torch_threads=1"]
# (name, SKUs, reward skew between the SKU halves, advantage normalization, extra settings)
PRESERVING = ("ppo.preserve_values=true", "ppo.preserve_obs_norm=true")
SCENARIOS = (("even", 30, 1.0, "global", ()), ("skewed", 30, 200.0, "global", ()),
             ("skewed_per_rank", 30, 200.0, "per_rank", ()), ("one_sku", 1, 1.0, "global", ()),
             ("preserving", 30, 1.0, "global", PRESERVING))


def cfg(*extra: str) -> Config:
    return load_config(None, [*SETTINGS, *extra])


def make_rollout(skus: int, skew: float, seed: int) -> Rollout:
    """Random obs/actions; rewards of the first half of the SKUs scaled by `skew`, so
    per-rank advantage statistics (rank 0 holds that half) differ from the global ones."""
    rng = np.random.default_rng(seed)
    r = Rollout.allocate(DAYS, np.arange(skus), OBS)
    r.obs[:] = rng.normal(size=r.obs.shape).astype(np.float32)
    r.actions[:] = rng.integers(0, ACTIONS, size=r.actions.shape)
    r.logp[:] = np.log(1.0 / ACTIONS)
    r.values[:] = 0.0
    rewards = rng.normal(loc=r.obs[..., 0], size=r.rewards.shape)
    rewards[:, : (skus + 1) // 2] *= skew
    r.rewards[:] = rewards.astype(np.float32)
    r.dones[-1] = True
    r.last_obs[:] = r.obs[-1]
    r.bootstrap[:] = 0.0
    return r


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rank_main(rank: int, world: int, port: int, out: str) -> None:
    """One rank: every scenario's update (2 iterations), weights to out/<name>.rank<r>."""
    try:
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world, timeout=timedelta(seconds=TIMEOUT_S))
        for name, skus, skew, norm, extra in SCENARIOS:
            learner = DDPLearner(cfg(*extra), OBS, ACTIONS, "cpu", advantage_norm=norm)
            stats = {}
            for it in range(2):
                stats = learner.update(make_rollout(skus, skew, it))
            save_file(learner.weights(), f"{out}/{name}.rank{rank}.safetensors")
            save_np({k: np.asarray([v]) for k, v in stats.items()}, f"{out}/{name}.rank{rank}.stats")
            learner.close()
        dist.destroy_process_group()
    except BaseException:
        Path(f"{out}/error.rank{rank}").write_text(traceback.format_exc())
        raise


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ddp")
    ctx = mp.start_processes(_rank_main, args=(2, free_port(), str(out)), nprocs=2, join=False,
                             start_method="spawn")
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while not ctx.join(timeout=1):
            if time.monotonic() > deadline:
                for proc in ctx.processes:
                    proc.kill()
                pytest.fail(f"DDP ranks still running after {TIMEOUT_S} s")
    except (mp.ProcessRaisedException, mp.ProcessExitedException):
        errors = [p.read_text() for p in out.glob("error.rank*")]
        pytest.fail(f"a DDP rank failed: {errors or 'no traceback written'}")
    return out


def one_rank(skus: int, skew: float, *extra: str) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    torch.set_num_threads(1)
    learner = Learner(cfg(*extra), OBS, ACTIONS, "cpu")
    stats: dict[str, float] = {}
    for it in range(2):
        stats = learner.update(make_rollout(skus, skew, it))
    return learner.weights(), stats


def max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)


def weights(out: Path, name: str, rank: int) -> dict[str, torch.Tensor]:
    return load_file(str(out / f"{name}.rank{rank}.safetensors"))


def test_rank_slices_cover_every_column_once() -> None:
    for total in (1, 2, 5, 30):
        for world in (1, 2, 3, 4):
            slices = [rank_slice(total, r, world) for r in range(world)]
            real = [s for s in slices if not s.padded]
            assert sum(s.width for s in real) == total
            assert [c for s in real for c in range(s.start, s.stop)] == list(range(total))
            assert all(s.width == 1 and 0 <= s.start < total for s in slices if s.padded)


@pytest.mark.parametrize("name", ["even", "skewed", "one_sku", "preserving"])
def test_two_ranks_update_like_one_rank(two_ranks: Path, name: str) -> None:
    _, skus, skew, _, extra = next(s for s in SCENARIOS if s[0] == name)
    ref, ref_stats = one_rank(skus, skew, *extra)
    w0, w1 = weights(two_ranks, name, 0), weights(two_ranks, name, 1)
    assert max_diff(w0, w1) == 0.0  # DDP keeps the ranks identical (stats all-reduced too)
    assert max_diff(w0, ref) < 2e-5, max_diff(w0, ref)
    moved = max_diff(ref, Learner(cfg(), OBS, ACTIONS, "cpu").weights())
    assert moved > 1e-3  # the update did something, so the equality above means something
    stats = {k: float(v[0]) for k, v in load_np(str(two_ranks / f"{name}.rank0.stats")).items()}
    for key in ("policy_loss", "value_loss", "entropy", "approx_kl", "grad_norm", "explained_variance",
                "return_mean", "reward_scale", "transitions", "epochs"):
        assert stats[key] == pytest.approx(ref_stats[key], rel=1e-4, abs=1e-6), key


def test_global_advantage_normalization_differs_from_per_rank(two_ranks: Path) -> None:
    ref, _ = one_rank(30, 200.0)
    global_norm = weights(two_ranks, "skewed", 0)
    per_rank = weights(two_ranks, "skewed_per_rank", 0)
    assert max_diff(global_norm, ref) < 2e-5
    # Per-rank statistics rescale the small-reward half's advantages by ~200x: a
    # measurably different update, far beyond float noise.
    assert max_diff(per_rank, ref) > 100 * max(max_diff(global_norm, ref), 1e-6)


LEARNER_SETTINGS = [*SETTINGS, "catalog.kind=uniform", "catalog.skus=9", "sim.days=12",
                    "deploy.collectors=2", "train.checkpoint_every=1", "eval.days=20", "eval.warmup=5"]


def stored_rollouts(config: Config, root: Path, iterations: int) -> tuple[list[Rollout], int, int]:
    """Random rollouts of `iterations` iterations in a local store at `root`, each as 2
    collectors' shards (SKUs 0-3 and 4-8); the rollouts, obs width and action count."""
    from skurl.catalog import load_catalog
    from skurl.sim.layout import layout_for
    from skurl.store.local import LocalRolloutStore

    dim = layout_for(load_catalog(config.catalog), config.sim.review_days).schema.dim
    n_actions = config.policy.actions.n
    store = LocalRolloutStore(root)
    full = []
    for it in range(iterations):
        r = _dim_rollout(config.catalog.skus, dim, n_actions, seed=it)
        r.policy_version = it
        full.append(r)
        for k, cols in enumerate((np.arange(0, 4), np.arange(4, 9))):
            part = r.select_skus(cols)
            store.put_shard(it, f"c{k}", part.arrays(), {"policy_version": it, "sku_start": int(cols[0]),
                                                        "sku_count": cols.size, "rows": part.transitions})
    return full, dim, n_actions


@pytest.mark.slow
def test_torchrun_learner_reads_the_store_and_matches_one_rank(tmp_path: Path) -> None:
    """`python -m skurl.modes.ddp.learner --nproc 2` (torchrun, gloo): 2 iterations from a
    local rollout store of 2 collector shards; the checkpointed model equals one rank's."""
    import subprocess
    import sys

    from skurl.learn.checkpoint import latest_checkpoint, model_state

    config = load_config(None, [*LEARNER_SETTINGS, "train.iterations=2"])  # as --iterations 2
    full, dim, n_actions = stored_rollouts(config, tmp_path / "rollouts", 2)
    run_dir = tmp_path / "learner"
    cmd = [sys.executable, "-m", ENTRY, "--nproc", "2", "--rollouts", str(tmp_path / "rollouts"),
           "--run-dir", str(run_dir), "--iterations", "2", "--wait-s", "30", "--no-baseline",
           *[a for s in LEARNER_SETTINGS for a in ("--set", s)]]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=5 * TIMEOUT_S, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert '"world": 2' in summary[-1] and '"iterations": 2' in summary[-1]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == [0, 1]  # rank 0's records only, once each
    assert "eval_profit" in records[-1] and (run_dir / "eval.json").is_file()
    path = latest_checkpoint(run_dir)
    assert path is not None and path.name == "iter_000002"
    got, meta = model_state(path)
    ref = Learner(config, dim, n_actions, "cpu")
    for r in full:
        ref.update(r)
    assert meta["version"] == 2
    assert max_diff(got, ref.weights()) < 2e-5


@pytest.mark.slow
def test_one_rank_resumes_its_run_dir_and_is_the_single_process_learner(tmp_path: Path) -> None:
    """A run dir with checkpoints is resumed: 1 iteration, then again up to 2, gives the
    weights a Learner makes on the two rollouts, bit for bit (one rank is that Learner)."""
    from skurl.learn.checkpoint import latest_checkpoint, model_state

    settings = [*LEARNER_SETTINGS, "ppo.lr_schedule=constant"]  # the same lr whatever train.iterations
    full, dim, n_actions = stored_rollouts(load_config(None, settings), tmp_path / "rollouts", 2)
    run_dir = tmp_path / "run"
    for iterations in (1, 2):
        assert main(["--rollouts", str(tmp_path / "rollouts"), "--run-dir", str(run_dir), "--iterations",
                     str(iterations), "--wait-s", "30", "--no-baseline",
                     *[a for s in settings for a in ("--set", s)]]) == 0
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == [0, 1]
    path = latest_checkpoint(run_dir)
    assert path is not None and path.name == "iter_000002"
    from skurl.train.loop import recorded_mode

    assert recorded_mode(run_dir) == "ddp"  # `skurl train --resume` names the DDP learner for it
    ref = Learner(load_config(None, settings), dim, n_actions, "cpu")
    for r in full:
        ref.update(r)
    got, _ = model_state(path)
    assert max_diff(got, ref.weights()) == 0.0


def test_learner_entry_reports_missing_shards_in_one_line(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--rollouts", str(tmp_path / "empty"), "--run-dir", str(tmp_path / "run"),
                 "--iterations", "1", "--wait-s", "0.2", "--poll-s", "0.05", "--no-baseline",
                 *[a for s in LEARNER_SETTINGS for a in ("--set", s)]])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "iteration 0 has 0 shards" in errors[0], errors


@pytest.mark.parametrize(("setting", "key"), [("collect.skus=3", "collect.skus"),
                                            ("deploy.collector_addresses=[127.0.0.1:1]", "sync.backend")])
def test_learner_entry_refuses_what_it_cannot_do_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], setting: str, key: str) -> None:
    code = main(["--rollouts", str(tmp_path / "empty"), "--run-dir", str(tmp_path / "run"),
                 *[a for s in [*LEARNER_SETTINGS, setting] for a in ("--set", s)]])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and key in errors[0], errors
    assert not (tmp_path / "run").exists()  # nothing written


def _dim_rollout(skus: int, dim: int, n_actions: int, seed: int) -> Rollout:
    rng = np.random.default_rng(seed)
    r = Rollout.allocate(DAYS, np.arange(skus), dim)
    r.obs[:] = rng.normal(size=r.obs.shape).astype(np.float32)
    r.actions[:] = rng.integers(0, n_actions, size=r.actions.shape)
    r.logp[:] = np.log(1.0 / n_actions)
    r.values[:] = 0.0
    r.rewards[:] = rng.normal(loc=r.obs[..., 0], size=r.rewards.shape).astype(np.float32)
    r.dones[-1] = True
    r.last_obs[:] = r.obs[-1]
    r.bootstrap[:] = 0.0
    return r


def test_learner_entry_checks_the_config_before_torchrun(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Defect 9 of issue 42: with --nproc K a config error reached each rank under torchrun
    (K errors, ~40 lines of ChildFailedError, exit 1). It is one line and exit 2 before."""
    import subprocess

    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("torchrun started"))
    code = main(["--nproc", "2", "--run-dir", str(tmp_path / "run"),
                 "--set", "deploy.collector_addresses=[127.0.0.1:1]"])
    errors = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(errors) == 1 and "sync.backend" in errors[0], errors
    assert "DDP learner" in errors[0] and "--mode decoupled" not in errors[0]


def test_train_resume_of_a_ddp_run_names_the_ddp_learner(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from skurl.cli import main as skurl_main

    (tmp_path / "mode.json").write_text('{"mode": "ddp"}\n')
    code = skurl_main(["train", "--resume", str(tmp_path)])
    errors = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(errors) == 1 and "skurl.modes.ddp.learner" in errors[0], errors
