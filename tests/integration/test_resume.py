"""Checkpoints and exact resume: stopping after iteration k and resuming gives the very
same weights at iteration n as a run that never stopped."""

from __future__ import annotations

import json
import random
import shutil
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch

from skurl.config import Config, load_config
from skurl.errors import UserError
from skurl.learn.checkpoint import (
    CheckpointError,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    restore_learner,
    save_checkpoint,
)
from skurl.learn.learner import Learner
from skurl.modes.colocated import mode as colocated_mode
from skurl.train import run as training
from skurl.train.evaluation import Evaluator

TINY = [
    "catalog.kind=uniform", "catalog.skus=48", "catalog.lead_time=2", "sim.days=12", "sim.reward=cost",
    "sim.substitution=false", "policy.actions.kind=units", "policy.actions.n=8", "policy.hidden=[16,16]",
    "ppo.epochs=2", "ppo.minibatch=100", "train.iterations=4", "train.checkpoint_every=2",
    "train.eval_every=0", "train.torch_threads=1", "eval.days=6", "eval.warmup=2", "eval.skus=16",
]

train = partial(training.start, colocated_mode)
resume = partial(training.resume, colocated_mode)


def tiny(*extra: str) -> Config:
    return load_config(None, TINY + list(extra))


def trained_tensors(run_dir: Path, iteration: int) -> dict[str, torch.Tensor]:
    tensors, meta = load_checkpoint(run_dir / "checkpoints" / f"iter_{iteration:06d}")
    assert meta["iteration"] == iteration
    return {k: v for k, v in tensors.items() if not k.startswith("rng/")}


@pytest.mark.parametrize("extra", [(), ("ppo.average_reward=true", "ppo.preserve_values=true",
                                        "ppo.preserve_obs_norm=true"),
                                   ("train.warm_start=base-stock", "train.warm_start_episodes=1",
                                    "train.warm_start_steps=20", "train.warm_start_critic=1"),
                                   ("policy.actions.kind=cover", "policy.actions.z_center=tuned",
                                    "policy.actions.z_min=-1", "policy.actions.z_max=1", "policy.actions.n=5",
                                    "train.warm_start=forecast-base-stock", "train.warm_start_episodes=1",
                                    "train.warm_start_steps=20", "train.warm_start_critic=1")],
                         ids=["default", "preserving", "warm_start", "tuned_cover"])
def test_resume_continues_bit_exactly(tmp_path: Path, extra: tuple[str, ...]) -> None:
    cfg = tiny(*extra)
    straight = train(cfg, tmp_path / "straight", baseline=False)
    assert straight.iterations == 4
    stopped = train(cfg, tmp_path / "stopped", stop_after=2, baseline=False)
    assert stopped.iterations == 2
    assert [p.name for p in list_checkpoints(tmp_path / "stopped")] == ["iter_000002"]
    resumed = resume(tmp_path / "stopped", baseline=False)
    assert resumed.iterations == 4
    a, b = trained_tensors(tmp_path / "straight", 4), trained_tensors(tmp_path / "stopped", 4)
    assert set(a) == set(b) and any(k.startswith("optim/") for k in a)
    for k in a:
        assert torch.equal(a[k], b[k]), k
    logs = [(tmp_path / d / "metrics.jsonl").read_text().splitlines() for d in ("straight", "stopped")]
    assert [json.loads(x)["iteration"] for x in logs[1]] == [0, 1, 2, 3]
    for x, y in zip(logs[0], logs[1], strict=True):
        assert json.loads(x)["reward_mean"] == json.loads(y)["reward_mean"]
    assert (tmp_path / "stopped" / "report.md").is_file()


def _crash_evaluating(m: pytest.MonkeyPatch, at: int) -> None:
    evaluate = Evaluator.evaluate

    def crash(self: Evaluator, it: int) -> dict:
        if it == at:
            raise RuntimeError("simulated crash")
        return evaluate(self, it)

    m.setattr(Evaluator, "evaluate", crash)


def test_a_crash_while_evaluating_loses_no_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash in the evaluation of a checkpointed iteration (here the last, 3) must leave
    no checkpoint past the last logged record: the resumed run redoes the iteration, so its
    metrics, eval history and train.keep_best choice match a run that never crashed."""
    cfg = tiny("train.eval_every=2", "train.keep_best=true")
    train(cfg, tmp_path / "straight", baseline=False)
    with monkeypatch.context() as m:
        _crash_evaluating(m, 3)
        with pytest.raises(RuntimeError, match="simulated crash"):
            train(cfg, tmp_path / "crashed", baseline=False)
    assert latest_checkpoint(tmp_path / "crashed") == tmp_path / "crashed" / "checkpoints" / "iter_000002"
    resume(tmp_path / "crashed", baseline=False)
    logs = [[json.loads(x) for x in (tmp_path / d / "metrics.jsonl").read_text().splitlines()]
            for d in ("straight", "crashed")]
    assert [r["iteration"] for r in logs[1]] == [0, 1, 2, 3]
    for a, b in zip(*logs, strict=True):
        assert (a["reward_mean"], a.get("eval_cost"), a.get("validation_score")) == (
            b["reward_mean"], b.get("eval_cost"), b.get("validation_score"))
    assert logs[1][3]["eval_cost"] is not None
    evals = [json.loads((tmp_path / d / "eval.json").read_text()) for d in ("straight", "crashed")]
    assert evals[0]["history"] == evals[1]["history"] and evals[0]["policies"] == evals[1]["policies"]
    assert [e["iteration"] for e in evals[1]["history"]] == [1, 3]
    best = [json.loads(next((tmp_path / d / "best" / "checkpoints").iterdir()).joinpath("meta.json").read_text())
            for d in ("straight", "crashed")]
    assert best[0]["iteration"] == best[1]["iteration"]
    assert best[0]["validation_score"] == best[1]["validation_score"]


def test_a_fresh_run_in_a_crashed_runs_dir_starts_clean(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An attempt that crashed before its first checkpoint leaves records, eval.json, a kept
    best policy and a baseline cache; a fresh run in that dir must not double the records or
    inherit the best policy, and a torn baseline cache is redone."""
    cfg = tiny("train.eval_every=1", "train.keep_best=true", "train.checkpoint_every=10")
    straight = train(cfg, tmp_path / "straight")
    with monkeypatch.context() as m:
        _crash_evaluating(m, 2)
        with pytest.raises(RuntimeError, match="simulated crash"):
            train(cfg, tmp_path / "crashed")
    run = tmp_path / "crashed"
    assert latest_checkpoint(run) is None and (run / "best").is_dir()
    (run / "baseline.json").write_text((run / "baseline.json").read_text()[:40])  # torn
    again = train(cfg, run)
    assert again.baseline == straight.baseline
    logs = [[json.loads(x) for x in (tmp_path / d / "metrics.jsonl").read_text().splitlines()]
            for d in ("straight", "crashed")]
    assert [r["iteration"] for r in logs[1]] == [0, 1, 2, 3]
    assert [r["validation_score"] for r in logs[0]] == [r["validation_score"] for r in logs[1]]
    evals = [json.loads((tmp_path / d / "eval.json").read_text()) for d in ("straight", "crashed")]
    assert evals[0] == evals[1]


def test_a_kept_policy_past_the_restart_point_is_dropped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A best policy kept after the checkpoint a run restarts from belongs to the part that is
    redone: with other settings it must not stay the run's result (here the crashed attempt
    scored absurdly high, so only dropping it lets the fresh run keep its own)."""
    cfg = tiny("train.eval_every=1", "train.keep_best=true", "train.checkpoint_every=10")
    with monkeypatch.context() as m:
        _crash_evaluating(m, 2)
        m.setattr("skurl.train.evaluation.validation_score", lambda result, reward: 1e9)
        with pytest.raises(RuntimeError, match="simulated crash"):
            train(cfg, tmp_path / "crashed", baseline=False)
    other = tiny("train.eval_every=1", "train.keep_best=true", "train.checkpoint_every=10", "train.seed=1")
    train(other, tmp_path / "crashed", baseline=False)
    train(other, tmp_path / "clean", baseline=False)
    best = [json.loads(next((tmp_path / d / "best" / "checkpoints").iterdir()).joinpath("meta.json").read_text())
            for d in ("clean", "crashed")]
    assert best[1]["validation_score"] < 1e9
    assert (best[0]["iteration"], best[0]["validation_score"]) == (best[1]["iteration"], best[1]["validation_score"])
    evals = [json.loads((tmp_path / d / "eval.json").read_text()) for d in ("clean", "crashed")]
    assert evals[0] == evals[1]


def test_a_run_dir_with_checkpoints_is_not_overwritten(tmp_path: Path) -> None:
    train(tiny("train.iterations=2"), tmp_path / "run", baseline=False)
    with pytest.raises(Exception, match="already holds checkpoints"):
        train(tiny(), tmp_path / "run", baseline=False)


def test_checkpoint_round_trip_restores_everything(tmp_path: Path) -> None:
    cfg = tiny()
    learner = Learner(cfg, 6, 8, "cpu")
    learner.model.obs_norm.update(torch.randn(50, 6))
    learner.reward_scaler.update(torch.randn(4, 3), torch.zeros(4, 3, dtype=torch.bool))
    loss = learner.model(torch.randn(10, 6))[0].sum()
    loss.backward()
    learner.optimizer.step()  # Adam moments and step count exist now
    learner.iteration, learner.version = 7, 9
    torch.manual_seed(123)
    np.random.seed(5)
    random.seed(6)
    path = save_checkpoint(tmp_path, learner, meta={"note": "x"})
    expected = (torch.rand(3), np.random.rand(3), [random.random() for _ in range(3)])
    other = Learner(tiny("train.seed=1"), 6, 8, "cpu")
    meta = restore_learner(other, path)
    assert meta["note"] == "x" and (other.iteration, other.version) == (7, 9)
    got = (torch.rand(3), np.random.rand(3), [random.random() for _ in range(3)])
    assert torch.equal(expected[0], got[0]) and np.array_equal(expected[1], got[1]) and expected[2] == got[2]
    for (k, v), w in zip(learner.model.state_dict().items(), other.model.state_dict().values(), strict=True):
        assert torch.equal(v, w), k
    for k, v in learner.reward_scaler.state_dict().items():
        assert torch.equal(v, other.reward_scaler.state_dict()[k])
    sa, sb = learner.optimizer.state_dict()["state"], other.optimizer.state_dict()["state"]
    for pid in sa:
        for key in sa[pid]:
            assert torch.equal(sa[pid][key], sb[pid][key]), (pid, key)


def test_only_the_last_checkpoints_are_kept_and_no_temporaries_remain(tmp_path: Path) -> None:
    learner = Learner(tiny(), 6, 8, "cpu")
    for it in range(1, 6):
        learner.iteration = it
        save_checkpoint(tmp_path, learner, keep=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["iter_000004", "iter_000005"]
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoints" / "iter_000005"
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["iter_000004", "iter_000005"]


def test_broken_checkpoints_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"expected state\.safetensors"):
        load_checkpoint(tmp_path)
    learner = Learner(tiny(), 6, 8, "cpu")
    path = save_checkpoint(tmp_path, learner)
    meta = json.loads((path / "meta.json").read_text())
    (path / "meta.json").write_text(json.dumps({**meta, "format": "other"}))
    with pytest.raises(CheckpointError, match="format"):
        load_checkpoint(path)


def _damage(path: Path) -> None:
    """Zero 64 bytes in the middle of a file (what safetensors' header check cannot see)."""
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    data[mid:mid + 64] = bytes(64)
    path.write_bytes(bytes(data))


def test_a_damaged_checkpoint_is_refused_and_resume_uses_the_one_before(tmp_path: Path) -> None:
    straight = tmp_path / "straight"
    train(tiny("train.iterations=6"), straight, baseline=False)
    run = tmp_path / "run"
    train(tiny("train.iterations=6"), run, stop_after=4, baseline=False)  # checkpoints after 2 and 4
    _damage(run / "checkpoints" / "iter_000004" / "state.safetensors")
    with pytest.raises(CheckpointError, match=r"iter_000004'.*state\.safetensors is damaged \(sha256"):
        load_checkpoint(run / "checkpoints" / "iter_000004")
    resume(run, baseline=False)
    assert (run / "checkpoints" / "damaged.iter_000004").is_dir()  # kept for inspection
    a, b = trained_tensors(straight, 6), trained_tensors(run, 6)
    for k in a:
        assert torch.equal(a[k], b[k]), k
    records = [json.loads(x)["iteration"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert records == list(range(6))


def test_resume_with_every_checkpoint_damaged_is_one_error(tmp_path: Path) -> None:
    run = tmp_path / "run"
    train(tiny(), run, baseline=False)
    _damage(run / "checkpoints" / "iter_000004" / "state.safetensors")
    (run / "checkpoints" / "iter_000002" / "state.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(CheckpointError, match="all 2 checkpoints are damaged"):
        resume(run, baseline=False)


def test_checkpoint_directories_without_meta_are_named_not_called_none(tmp_path: Path) -> None:
    """iter_XXXXXX directories that lost meta.json are not checkpoints; resume and eval say
    which ones they found instead of "no checkpoint yet"."""
    from skurl.learn.run_policy import policy_of_run

    run = tmp_path / "run"
    train(tiny(), run, baseline=False)
    for it in (2, 4):
        (run / "checkpoints" / f"iter_00000{it}" / "meta.json").unlink()
    want = r"no complete checkpoint in .*checkpoints \(iter_000002, iter_000004 lack meta\.json"
    with pytest.raises(CheckpointError, match=want):
        resume(run, baseline=False)
    with pytest.raises(CheckpointError, match=want):
        policy_of_run(run)
    with pytest.raises(UserError, match="already holds checkpoints"):  # a new run would replace them
        train(tiny(), run, baseline=False)
    assert (run / "checkpoints" / "iter_000004" / "state.safetensors").is_file()  # nothing removed
    shutil.rmtree(run / "checkpoints")
    with pytest.raises(CheckpointError, match=r"--resume .*: no checkpoint yet \(expected .*iter_XXXXXX\)$"):
        resume(run, baseline=False)


def test_training_with_a_warm_start_is_the_same_on_1_and_2_simulator_threads(tmp_path: Path) -> None:
    """Determinism across the simulator's thread count, warm start included. torch's count
    (train.torch_threads) is held: on some CPUs 1 and 2 threads round GEMMs differently, so
    it belongs to the configuration a result is reproduced with (docs/internals.md, learn/threads.py)."""
    warm = ("train.warm_start=capped-base-stock", "train.warm_start_episodes=1", "train.warm_start_steps=30",
            "train.warm_start_critic=1", "train.torch_threads=2")
    for threads in (1, 2):
        train(tiny(*warm, f"sim.threads={threads}"), tmp_path / f"t{threads}", baseline=False)
    a, b = trained_tensors(tmp_path / "t1", 4), trained_tensors(tmp_path / "t2", 4)
    for k in a:
        assert torch.equal(a[k], b[k]), k
