"""Regressions of three training/evaluation bugs:
1. a subset of a catalog (eval.skus, a training shard) showed features as wide as its own
   SKUs need, not as wide as the whole catalog's, and the trained network crashed on it;
2. a SKU whose forecast exploded made a multiplier-grid order exceed the env's cap and the
   env rejected the whole batch;
3. the in-training evaluation scored the weights from before the iteration's update while
   labelling them with the new version."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from skurl.catalog import load_catalog
from skurl.cli import main
from skurl.collect.evaluate import eval_subset, make_env
from skurl.config import ActionsConfig, load_config
from skurl.errors import UserError
from skurl.modes import colocated
from skurl.policy.actions import ActionGrid
from skurl.policy.learned import LearnedPolicy
from skurl.policy.nets import ActorCritic
from skurl.sim.api import Obs, RawState
from skurl.sim.env import MAX_ORDER
from skurl.sim.layout import catalog_widths
from skurl.train.loop import Trainer

# A synthetic catalog whose first SKUs need fewer pipeline columns than the whole.
SYNTH = ["catalog.kind=synthetic", "catalog.skus=300", "sim.days=6", "policy.hidden=[8,8]",
         "ppo.epochs=1", "ppo.minibatch=256", "train.torch_threads=1", "train.checkpoint_every=1",
         "train.eval_every=1", "eval.days=4", "eval.warmup=1", "eval.skus=5", "train.warm_start=none",
         "train.keep_best=false"]


def _narrow_prefix() -> int:
    """eval.skus of SYNTH, checked to be a subset narrower than the whole catalog (else the
    regression tests below would not exercise the bug)."""
    cfg = load_config(None, SYNTH)
    full = load_catalog(cfg.catalog)
    assert catalog_widths(eval_subset(full, cfg.eval.skus)) < catalog_widths(full)
    return cfg.eval.skus


def test_subset_env_shows_the_whole_catalogs_columns() -> None:
    cfg = load_config(None, SYNTH)
    full = load_catalog(cfg.catalog)
    k = _narrow_prefix()
    whole = make_env(full, cfg.sim).reset(3, 0).features[:k]
    part_env = make_env(eval_subset(full, k), cfg.sim, catalog_widths(full))
    part = part_env.reset(3, 0).features
    assert part.shape == whole.shape
    np.testing.assert_array_equal(part, whole)  # zeros where the subset needs no columns


def test_eval_run_on_a_narrower_subset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    k = _narrow_prefix()
    run = tmp_path / "run"
    argv = [a for item in SYNTH for a in ("--set", item)]
    assert main(["train", "--run-dir", str(run), "--iterations", "1", "--no-baseline", *argv]) == 0
    capsys.readouterr()
    assert main(["eval", "--run", str(run), "--skus", str(k), "--days", "3", "--warmup", "1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["skus"] == k and result["failed_skus"] == 0


def test_mismatched_features_are_a_user_error() -> None:
    grid = ActionGrid.from_config(ActionsConfig(kind="units", n=4))
    policy = LearnedPolicy(ActorCritic(7, 4, [8]), grid)
    raw = RawState(np.zeros(2), np.zeros((2, 1)), np.zeros(2), np.ones((2, 2), np.float32), 0)
    with pytest.raises(UserError, match="network expects 7"):
        policy.orders(Obs(np.zeros((2, 5), np.float32), raw, None))  # type: ignore[arg-type]


def test_exploding_forecast_clips_only_that_sku() -> None:
    grid = ActionGrid.from_config(ActionsConfig(kind="multiplier", n=5, max=4.0))
    forecast = np.array([2.0, 1e12, np.nan, np.inf, 3.0])
    orders, clipped = grid.to_orders_checked(np.array([1, 4, 4, 2, 4]), forecast)
    np.testing.assert_array_equal(orders, [2.0, MAX_ORDER, 0.0, MAX_ORDER, 12.0])
    np.testing.assert_array_equal(clipped, [False, True, True, True, False])
    np.testing.assert_array_equal(grid.to_orders(np.array([1, 4]), forecast[:2]), [2.0, MAX_ORDER])


def test_learned_policy_clips_and_counts_exploded_orders(caplog: pytest.LogCaptureFixture) -> None:
    grid = ActionGrid.from_config(ActionsConfig(kind="multiplier", n=4, max=3.0))
    model = ActorCritic(3, 4, [8])
    with torch.no_grad():  # always the largest multiplier
        model.policy.net[-1].bias.copy_(torch.tensor([0.0, 0.0, 0.0, 50.0]))
    policy = LearnedPolicy(model, grid)
    forecast = np.array([[1.0], [1e15], [2.0]], np.float32)
    raw = RawState(np.zeros(3), np.zeros((3, 1)), np.zeros(3), forecast, 4)
    with caplog.at_level("WARNING"):
        orders = policy.orders(Obs(np.zeros((3, 3), np.float32), raw, None))  # type: ignore[arg-type]
    np.testing.assert_array_equal(orders, [3.0, MAX_ORDER, 6.0])
    assert policy.clipped_orders == 1 and "1 SKU order(s) clipped" in caplog.text


def test_in_training_eval_scores_the_weights_it_labels(tmp_path: Path) -> None:
    cfg = load_config(None, ["catalog.kind=uniform", "catalog.skus=30", "sim.days=5", "sim.reward=cost",
                             "policy.actions.kind=units", "policy.hidden=[8,8]", "ppo.epochs=2",
                             "ppo.minibatch=50", "ppo.lr=0.01", "train.torch_threads=1",
                             "eval.days=3", "eval.warmup=1"])
    run = Trainer(cfg, tmp_path / "run", colocated.Colocated(), baseline=False)
    assert run.evaluator is not None
    scored: list[LearnedPolicy] = []
    score = run.evaluator._score
    run.evaluator._score = lambda policy: (scored.append(policy), score(policy))[1]  # type: ignore[method-assign]
    version0 = ActorCritic.from_state(run.learner.weights())  # what the collectors held before the update
    run.iteration(0)
    run.evaluator.evaluate(0)
    policy = scored[0]
    assert policy.info["version"] == run.learner.version == 1
    x = torch.randn(16, run.learner.model.obs_dim)
    with torch.no_grad():
        expected = run.learner.model.policy(run.learner.model.normalize(x))
        stale = version0.policy(version0.normalize(x))
    assert not torch.allclose(stale, expected)
    torch.testing.assert_close(policy.nets.logits(x), expected)
