"""learn/dcl.py: states sampled under the policy, labelled by the CRN rollout operator."""

from __future__ import annotations

import numpy as np
import pytest
from test_rollout_q import _lost_sales  # tests/unit is on sys.path

from skurl.config import ActionsConfig
from skurl.learn.dcl import DclSpec, label_states, sampled_days
from skurl.policy.actions import ActionGrid
from skurl.policy.baselines import make_policy
from skurl.policy.rollout_q import baseline_rollout
from skurl.sim import VectorEnv


class Constant:
    """A policy that always takes action `k` of a units grid (step 1: k units)."""

    def __init__(self, k: int) -> None:
        self.k = k

    def action_indices(self, obs) -> np.ndarray:
        return np.full(obs.features.shape[0], self.k, np.int64)


def _setup(skus: int = 30):
    catalog, sim = _lost_sales(skus, lead=2, init_days=1.0, days=40)
    grid = ActionGrid.from_config(ActionsConfig(kind="units", n=12, step=1))
    rollout = baseline_rollout(make_policy("capped-base-stock", catalog, sim,
                                           {"S": np.full(skus, 16.0), "r": np.full(skus, 8.0)}))
    return VectorEnv(catalog, sim), grid, rollout


def test_labels_improve_on_a_policy_that_orders_nothing() -> None:
    # With no orders the stock runs out: every state's best first order is positive, and
    # Q(best) beats Q(0) on the paired replications.
    env, grid, rollout = _setup()
    spec = DclSpec(states=60, horizon=6, budget=24, warmup=5, spread=2)
    out = label_states(env, Constant(0), rollout, grid, spec, seed=3, iteration=0)
    assert out.demos.obs.shape == (60, env.observe().features.shape[1]) and out.demos.labels.shape == (60,)
    assert (out.demos.labels > 0).all() and out.changed == 1.0 and out.q_gap > 0
    assert out.sku_days > 0


def test_labels_are_a_function_of_seed_and_iteration() -> None:
    env, grid, rollout = _setup()
    spec = DclSpec(states=40, horizon=5, budget=16, warmup=3, spread=4)
    a = label_states(env, Constant(5), rollout, grid, spec, seed=3, iteration=1)
    b = label_states(VectorEnv(env.catalog, env.cfg), Constant(5), rollout, grid, spec, seed=3, iteration=1)
    c = label_states(env, Constant(5), rollout, grid, spec, seed=3, iteration=2)
    assert np.array_equal(a.demos.labels, b.demos.labels) and np.array_equal(a.demos.obs, b.demos.obs)
    assert not np.array_equal(a.demos.obs, c.demos.obs)


def test_sampled_days_and_bad_specs() -> None:
    assert sampled_days(40, DclSpec(states=100, horizon=5, budget=8, warmup=10, every=2), 30) == [10, 12, 14, 16]
    with pytest.raises(ValueError, match="leaves no day"):
        sampled_days(10, DclSpec(states=10, horizon=5, budget=8, warmup=10), 5)
    with pytest.raises(ValueError, match="DclSpec"):
        DclSpec(states=0, horizon=5, budget=8, warmup=0)


def test_candidates_window_stays_on_the_grid() -> None:
    from skurl.learn.dcl import candidates

    own = np.array([0, 5, 11])
    assert candidates(own, 12, 2).tolist() == [[0, 1, 2, 3, 4], [3, 4, 5, 6, 7], [7, 8, 9, 10, 11]]
    assert candidates(own, 4, 2).shape == (3, 4)  # the window covers the grid: every action
    env, grid, rollout = _setup()
    spec = DclSpec(states=30, horizon=6, budget=24, warmup=5, spread=1, window=2)
    out = label_states(env, Constant(0), rollout, grid, spec, seed=3, iteration=0)
    assert ((out.demos.labels >= 0) & (out.demos.labels <= 4)).all() and (out.demos.labels > 0).any()
