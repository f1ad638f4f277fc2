"""Warm start by imitation (learn/imitate.py): nearest grid actions, soft targets, cloning
a known mapping, and recording a tuned baseline on the real simulator."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from skurl.catalog import load_catalog
from skurl.collect.evaluate import make_env
from skurl.config import ActionsConfig, load_config
from skurl.learn.imitate import (
    Demonstrations,
    clone,
    nearest_actions,
    record,
    recorded_rows,
    soft_targets,
)
from skurl.policy.actions import ActionGrid
from skurl.policy.baselines import make_policy
from skurl.policy.nets import ActorCritic
from skurl.sim.api import RawState


def _raw(forecast: list[float]) -> RawState:
    n = len(forecast)
    zero = np.zeros(n, np.int64)
    return RawState(zero, np.zeros((n, 1), np.int64), zero, np.asarray(forecast, np.float32)[:, None], 0)


def test_nearest_unit_action_rounds_and_clips_to_the_grid() -> None:
    grid = ActionGrid.from_config(ActionsConfig(kind="units", n=5, step=2))  # 0 2 4 6 8
    got = nearest_actions(grid, _raw([1.0] * 6), np.array([0.0, 2.0, 2.9, 3.0, 7.2, 40.0]))
    # 3.0 is as near 2 as 4: the first of ties, the smaller order
    assert got.tolist() == [0, 1, 1, 1, 4, 4]


def test_nearest_multiplier_action_depends_on_the_forecast() -> None:
    grid = ActionGrid.from_config(ActionsConfig(kind="multiplier", n=5, max=2.0))  # 0 .5 1 1.5 2
    raw = _raw([10.0, 10.0, 0.2])  # units 0 5 10 15 20; the last SKU (base max(0.2, 1)) 0 1 1 2 2
    got = nearest_actions(grid, raw, np.array([10.0, 14.0, 2.0]))
    assert got.tolist() == [2, 3, 3]
    units, _ = grid.orders_for(got, raw)
    assert units.tolist() == [10.0, 15.0, 2.0]


def test_nan_orders_of_a_grid_are_never_nearest() -> None:
    grid = ActionGrid.from_config(ActionsConfig(kind="units", n=3, step=1))
    assert nearest_actions(grid, _raw([1.0]), np.array([np.nan])).tolist() == [0]


def test_soft_targets_put_the_smoothing_on_the_neighbours() -> None:
    t = soft_targets(torch.tensor([0, 2, 4]), 5, 0.2)
    assert torch.allclose(t.sum(1), torch.ones(3))
    assert t[0].tolist() == pytest.approx([0.8, 0.2, 0, 0, 0])
    assert t[1].tolist() == pytest.approx([0, 0.1, 0.8, 0.1, 0])
    assert t[2].tolist() == pytest.approx([0, 0, 0, 0.2, 0.8])
    assert soft_targets(torch.tensor([1]), 3, 0.0).tolist() == [[0.0, 1.0, 0.0]]


def test_recorded_rows_are_a_seeded_sorted_sample() -> None:
    assert recorded_rows(5, 10, 0).tolist() == [0, 1, 2, 3, 4]
    a, b = recorded_rows(100, 10, 3), recorded_rows(100, 10, 3)
    assert a.tolist() == b.tolist() and len(set(a.tolist())) == 10 and np.all(np.diff(a) > 0)
    assert recorded_rows(100, 10, 4).tolist() != a.tolist()


def test_clone_learns_a_mapping_and_leaves_the_value_net_alone() -> None:
    gen = np.random.default_rng(0)
    obs = gen.normal(size=(4000, 3)).astype(np.float32)
    labels = np.clip(np.floor(obs[:, 0] * 2 + 3), 0, 5).astype(np.int64)  # 6 ordered actions
    torch.manual_seed(0)
    model = ActorCritic(3, 6, (32, 32))
    value_before = {k: v.clone() for k, v in model.value.state_dict().items()}
    demos = Demonstrations(obs, labels, 0.0, 1.0)
    fit = clone(model, demos, steps=600, smoothing=0.0, seed=0, normalize_obs=True, stats_decay=1.0,
                max_grad_norm=0.5, device=torch.device("cpu"))
    assert fit["warm_start_accuracy"] > 0.95
    assert float(model.obs_norm.count) == 4000
    for k, v in model.value.state_dict().items():
        assert torch.equal(v, value_before[k]), k
    smooth = ActorCritic(3, 6, (32, 32))
    fit_smooth = clone(smooth, demos, steps=600, smoothing=0.2, seed=0, normalize_obs=True, stats_decay=1.0,
                       max_grad_norm=0.5, device=torch.device("cpu"))
    assert fit_smooth["warm_start_accuracy"] > 0.9
    assert fit_smooth["warm_start_entropy"] > fit["warm_start_entropy"] + 0.3


def test_record_maps_a_tuned_base_stock_onto_the_unit_grid_exactly() -> None:
    cfg = load_config(None, ["catalog.kind=uniform", "catalog.skus=30", "catalog.lead_time=2", "sim.days=15",
                             "sim.reward=cost", "sim.substitution=false", "policy.actions.kind=units",
                             "policy.actions.n=30"])
    catalog = load_catalog(cfg.catalog)
    env = make_env(catalog, cfg.sim)
    teacher = make_policy("base-stock", catalog, cfg.sim, {"S": 20.0})
    grid = ActionGrid.from_config(cfg.policy.actions)
    demos = record(env, teacher, grid, seed=5, episodes=2, max_skus=12)
    assert demos.obs.shape == (2 * 15 * 12, env.schema.dim) and demos.labels.shape == (360,)
    assert demos.exact == 1.0 and demos.reward_mean < 0
    # base stock orders S - inventory position, so the labels are exactly its orders
    again = record(env, teacher, grid, seed=5, episodes=2, max_skus=12)
    assert np.array_equal(demos.labels, again.labels) and np.array_equal(demos.obs, again.obs)
    assert demos.labels.max() <= 20 and demos.labels.min() >= 0 and len(set(demos.labels.tolist())) > 2
    narrow = dataclasses.replace(grid, values=grid.values[:5])  # orders beyond 4 units: nearest is 4
    clipped = record(env, teacher, narrow, seed=5, episodes=1, max_skus=12)
    assert clipped.exact < 1.0 and clipped.labels.max() == 4
