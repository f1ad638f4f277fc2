"""Fixed staleness in --mode colocated (collect/staleness.py): iteration k trains on rollouts
of version max(0, k - N), deterministically and across a resume; N = 0 is today's loop."""

from __future__ import annotations

import json
import threading
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from skurl.buffer.rollout import Rollout
from skurl.collect.collectors import Collected, LocalCollectors
from skurl.collect.staleness import HISTORY_DIR, FixedStaleness, refuse_unbuilt
from skurl.config import Config, load_config
from skurl.errors import UserError
from skurl.learn.checkpoint import load_checkpoint
from skurl.learn.learner import Learner
from skurl.modes.colocated import Colocated
from skurl.modes.colocated import mode as colocated_mode
from skurl.sync.history import WeightHistory
from skurl.sync.inproc import InProcWeights
from skurl.telemetry.metrics import get_metrics
from skurl.train import run as training
from skurl.train.core import RunCore
from skurl.train.loop import Trainer
from skurl.train.mode import Wiring, collector_model, in_process_weights

TINY = [
    "catalog.kind=uniform", "catalog.skus=48", "catalog.lead_time=2", "sim.days=12", "sim.reward=cost",
    "sim.substitution=false", "policy.actions.kind=units", "policy.actions.n=8", "policy.hidden=[16,16]",
    "ppo.epochs=2", "ppo.minibatch=100", "train.iterations=5", "train.checkpoint_every=1",
    "train.eval_every=0", "train.torch_threads=1", "eval.days=6", "eval.warmup=2", "eval.skus=16",
]
WARM = ("train.warm_start=base-stock", "train.warm_start_episodes=1", "train.warm_start_steps=20",
        "train.warm_start_critic=1")

train = partial(training.start, colocated_mode)
resume = partial(training.resume, colocated_mode)


def tiny(*extra: str) -> Config:
    return load_config(None, TINY + list(extra))


def final_weights(run_dir: Path, iteration: int = 5) -> dict[str, torch.Tensor]:
    tensors, meta = load_checkpoint(run_dir / "checkpoints" / f"iter_{iteration:06d}")
    assert meta["iteration"] == iteration
    return {k: v for k, v in tensors.items() if not k.startswith("rng/")}


def assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert set(a) == set(b)
    for k in a:
        assert torch.equal(a[k], b[k]), k


def trained_versions(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """(learner version, rollout's policy version) of every update from here on."""
    seen: list[tuple[int, int]] = []
    update = Learner.update

    def spy(self: Learner, rollout, train_policy: bool = True):
        seen.append((self.version, rollout.policy_version))
        return update(self, rollout, train_policy)

    monkeypatch.setattr(Learner, "update", spy)
    return seen


def lag_sum() -> float:
    return get_metrics().registry.get_sample_value("policy_lag_versions_sum") or 0.0


class TodaysMode(Colocated):
    """The loop as it was before collect.staleness: LocalCollectors on the learner's weights."""

    def build(self, core: RunCore, learner: Learner) -> Wiring:
        weights = in_process_weights(learner)
        return Wiring(LocalCollectors(core.local_env, len(core.shards), collector_model(learner), core.grid,
                                      weights, core.timer, collect=core.cfg.collect), weights)


def test_staleness_zero_is_todays_loop(tmp_path: Path) -> None:
    train(tiny(), tmp_path / "zero", baseline=False)
    Trainer(tiny(), tmp_path / "today", TodaysMode(), baseline=False).run()
    assert_same(final_weights(tmp_path / "zero"), final_weights(tmp_path / "today"))
    assert not (tmp_path / "zero" / HISTORY_DIR).exists()


@pytest.mark.slow  # three tiny runs: ~15-30 s on 2 cores
@pytest.mark.parametrize("n", [1, 2])
def test_fixed_staleness_trains_on_version_k_minus_n_deterministically(tmp_path: Path, n: int,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    seen = trained_versions(monkeypatch)
    lag_before = lag_sum()
    train(tiny(f"collect.staleness={n}"), tmp_path / "a", baseline=False)
    assert seen == [(k, max(0, k - n)) for k in range(5)]  # no warm start: version k at iteration k
    train(tiny(f"collect.staleness={n}"), tmp_path / "b", baseline=False)
    assert_same(final_weights(tmp_path / "a"), final_weights(tmp_path / "b"))
    records = [json.loads(x) for x in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    assert [r["behaviour_version"] for r in records] == [max(0, k - n) for k in range(5)]
    assert [r["policy_lag_versions"] for r in records] == [min(k, n) for k in range(5)]
    assert [r["sample_freshness"] for r in records] == [float(k == 0) for k in range(5)]
    assert all(r["is_ratio_mean"] > 0 for r in records[1:]) and "is_ratio_mean" not in records[0]
    assert lag_sum() - lag_before == 2 * sum(min(k, n) for k in range(5))
    if n > 1:
        return
    train(tiny(), tmp_path / "strict", baseline=False)  # stale rollouts did change the update
    assert not torch.equal(final_weights(tmp_path / "a")["model/policy.net.0.weight"],
                           final_weights(tmp_path / "strict")["model/policy.net.0.weight"])


@pytest.mark.slow  # three tiny runs: ~15-30 s on 2 cores
@pytest.mark.parametrize("extra", [(), WARM], ids=["default", "warm_start"])
def test_resume_in_the_middle_is_bit_identical(tmp_path: Path, extra: tuple[str, ...],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tiny("collect.staleness=2", *extra)
    seen = trained_versions(monkeypatch)
    train(cfg, tmp_path / "straight", baseline=False)
    v0 = 1 if extra else 0  # the warm start's clone is version 1
    assert seen == [(v0 + k, v0 + max(0, k - 2)) for k in range(5)]
    train(cfg, tmp_path / "stopped", stop_after=3, baseline=False)
    # the pending old weights are on disk; the in-memory ones die with the process
    assert sorted(p.name for p in (tmp_path / "stopped" / HISTORY_DIR).iterdir())[-1] == f"v{v0 + 2:09d}.safetensors"
    resume(tmp_path / "stopped", baseline=False)
    assert_same(final_weights(tmp_path / "straight"), final_weights(tmp_path / "stopped"))


def test_weight_history_is_exact_kept_and_pruned(tmp_path: Path) -> None:
    history = WeightHistory(2, tmp_path, keep_back=3)
    for v in range(6):
        history.put(v, {"w": torch.full((2,), float(v))})
    version, tensors = history.wait_for(4)
    assert version == 4 and torch.equal(tensors["w"], torch.full((2,), 4.0))  # exactly 4, though 5 is newer
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"v{v:09d}.safetensors" for v in (2, 3, 4, 5)]
    assert torch.equal(history.wait_for(2)[1]["w"], torch.full((2,), 2.0))  # from disk
    with pytest.raises(UserError, match=r"version 1 are not kept"):
        history.wait_for(1)
    history.clear_directory()
    assert not list(tmp_path.iterdir())


def test_unbuilt_modes_are_one_line(tmp_path: Path) -> None:
    for mode in ("colocated", "decoupled", "ray"):  # fixed staleness is built in every mode
        refuse_unbuilt(tiny("collect.staleness=1").collect, mode)
    with pytest.raises(UserError, match=r"collect.staleness = 1: .* not built for ddp"):
        refuse_unbuilt(tiny("collect.staleness=1").collect, "ddp")
    refuse_unbuilt(tiny().collect, "ddp")  # staleness 0 runs everywhere
    for mode in ("colocated", "decoupled", "ray"):  # and so does bounded staleness
        refuse_unbuilt(tiny("collect.staleness=1", "collect.staleness_mode=bounded").collect, mode)


def test_collecting_ahead_in_a_thread_changes_no_bit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[str] = []
    collect = LocalCollectors.collect

    def spy(self: LocalCollectors, *args: Any) -> Any:
        threads.append(threading.current_thread().name)
        return collect(self, *args)

    monkeypatch.setattr(LocalCollectors, "collect", spy)
    # evaluations (every 2nd iteration) simulate while the next rollout is collected ahead
    train(tiny("collect.staleness=1", "train.eval_every=2", "collect.ahead=false"), tmp_path / "sync",
          baseline=False)
    assert threads == ["MainThread"] * 5
    threads.clear()
    train(tiny("collect.staleness=1", "train.eval_every=2"), tmp_path / "ahead", baseline=False)
    # iteration 0 in the loop's thread, 1..4 collected ahead while the learner trained
    assert threads[0] == "MainThread" and all(t.startswith("collect-ahead") for t in threads[1:]), threads
    assert len(threads) == 5  # none past the last iteration
    assert_same(final_weights(tmp_path / "sync"), final_weights(tmp_path / "ahead"))
    records = [json.loads(x) for x in (tmp_path / "ahead" / "metrics.jsonl").read_text().splitlines()]
    strict = [json.loads(x) for x in (tmp_path / "sync" / "metrics.jsonl").read_text().splitlines()]
    assert [r.get("eval_cost") for r in records] == [r.get("eval_cost") for r in strict]
    assert records[1]["eval_cost"] is not None
    assert all(r["learner_idle_seconds"] >= 0 and r["collector_idle_seconds"] >= 0 for r in records)


def test_collecting_ahead_draws_the_next_iterations_sku_sample(tmp_path: Path) -> None:
    # ppo.sample_skus: collectors keep the observations of the learner's sample, drawn per
    # iteration; collecting k + 1 ahead asks for update k + 1's (Learner.sample_index).
    sampled = ("collect.staleness=1", "ppo.sample_skus=20")
    train(tiny(*sampled, "collect.ahead=false"), tmp_path / "sync", baseline=False)
    train(tiny(*sampled), tmp_path / "ahead", baseline=False)
    assert_same(final_weights(tmp_path / "sync"), final_weights(tmp_path / "ahead"))


class _Echo:
    """Collectors whose rollout records the job and the SKU sample it was asked for."""

    def __init__(self) -> None:
        self.jobs: list[tuple[int, int, Any]] = []

    def collect(self, iteration: int, seed: int, version: int, sample: Any) -> Collected:
        self.jobs.append((iteration, version, sample(10)))
        rollout = Rollout.allocate(2, np.arange(10), 1)
        rollout.policy_version = version
        return Collected(rollout)

    def close(self) -> None:
        pass


def test_a_sample_drawn_ahead_that_differs_is_collected_again(caplog: pytest.LogCaptureFixture) -> None:
    weights = InProcWeights("t")
    history = WeightHistory(2, None, keep_back=0)
    echo = _Echo()
    stale = FixedStaleness(echo, weights, history, 1, ahead=True)
    draws = iter(range(100))
    sample = lambda n: np.array([next(draws)])  # noqa: E731 (every draw differs)
    with caplog.at_level("WARNING", logger="skurl.collect.staleness"):
        for k in range(3):
            weights.publish(k, {"w": torch.zeros(1)})
            batch = stale.collect(k, 0, k, sample)
            assert batch.rollout.policy_version == max(0, k - 1)
    stale.close()
    # 0 in the loop, 1 ahead (refused: another sample), 1 again in the loop, then no more ahead
    assert [(it, v) for it, v, _ in echo.jobs] == [(0, 0), (1, 0), (1, 0), (2, 1)]
    assert "collecting in the loop from here on" in caplog.text
