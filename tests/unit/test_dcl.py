"""learn/dcl.py: states sampled under the policy, labelled by the CRN rollout operator."""

from __future__ import annotations

import numpy as np
import pytest
from test_rollout_q import _lost_sales  # tests/unit is on sys.path

from skurl.config import ActionsConfig
from skurl.learn.dcl import DclSpec, sampled_days
from skurl.learn.dcl_parts import label_states
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


def test_soft_q_targets_by_hand() -> None:
    from skurl.learn.dcl import soft_q_targets

    q = np.array([[1.0, 2.0, 0.0], [5.0, 5.0, 1.0], [3.0, 1.0, 2.0]])
    se = np.array([[1.0, 1.0, 1.0], [np.nan, np.nan, np.nan], [0.5, np.nan, 0.5]])
    cand = np.array([[0, 1, 2], [3, 4, 5], [1, 2, 3]])
    out = soft_q_targets(q, se, cand, 6, temperature=2.0)
    # row 0: softmax([1, 2, 0] / (2 x 1)); row 1: errors unknown, the argmax (ties share);
    # row 2: scale 2 x 0.5 (the mean of the known errors), softmax([3, 1, 2])
    e = np.exp([-0.5, 0.0, -1.0])
    assert np.allclose(out[0, :3], e / e.sum()) and (out[0, 3:] == 0).all()
    assert out[1].tolist() == [0, 0, 0, 0.5, 0.5, 0]
    e = np.exp([0.0, -2.0, -1.0])
    assert np.allclose(out[2, 1:4], e / e.sum()) and out[2, 0] == 0 and (out[2, 4:] == 0).all()
    assert np.allclose(out.sum(axis=1), 1.0) and out.dtype == np.float32


def test_soft_labels_carry_targets_the_clone_fits() -> None:
    import torch

    from skurl.learn.imitate import clone
    from skurl.policy.nets import ActorCritic

    env, grid, rollout = _setup()
    spec = DclSpec(states=60, horizon=6, budget=24, warmup=5, spread=2, window=2, temperature=1.0)
    out = label_states(env, Constant(3), rollout, grid, spec, seed=3, iteration=0)
    t = out.demos.targets
    assert t is not None and t.shape == (60, grid.n) and np.allclose(t.sum(axis=1), 1.0)
    # The label is the halving's survivor: never without weight (a dropped action's mean over
    # its fewer rollouts can end above the survivor's, so it need not be the targets' mode).
    assert (t[np.arange(60), out.demos.labels] > 0).all()
    assert ((t > 0).sum(axis=1) > 1).any()  # actions within the noise share the weight
    torch.manual_seed(0)
    model = ActorCritic(out.demos.obs.shape[1], grid.n, [16, 16])
    fit = clone(model, out.demos, steps=200, smoothing=0.0, seed=1, normalize_obs=True, stats_decay=0.99,
                max_grad_norm=1.0, device=torch.device("cpu"))
    # fitted to distributions, not one-hot labels: the entropy stays near the targets'
    target_entropy = float(-(t * np.log(np.where(t > 0, t, 1.0))).sum(axis=1).mean())
    assert abs(fit["warm_start_entropy"] - target_entropy) < 0.5, (fit, target_entropy)


def test_confirmation_keeps_the_own_action_unless_the_gain_is_significant() -> None:
    env, grid, rollout = _setup()
    # Ordering nothing is clearly worse: every change passes. Near the tuned policy's own
    # order the halving's winners are mostly noise: most do not.
    base = DclSpec(states=60, horizon=6, budget=24, warmup=5, spread=2, window=3)
    strict = DclSpec(states=60, horizon=6, budget=24, warmup=5, spread=2, window=3, confirm=16, confirm_z=2.0)
    clear = label_states(env, Constant(0), rollout, grid, strict, seed=3, iteration=0)
    assert clear.changed > 0.9
    loose = label_states(env, Constant(5), rollout, grid, base, seed=3, iteration=0)
    tested = label_states(env, Constant(5), rollout, grid, strict, seed=3, iteration=0)
    assert tested.changed < loose.changed and tested.sku_days > loose.sku_days
    kept = tested.demos.labels == 5
    assert kept.any() and ((tested.demos.labels == loose.demos.labels) | kept).all()  # a change or the own action
    with pytest.raises(ValueError, match="confirm"):
        DclSpec(states=1, horizon=1, budget=1, warmup=0, confirm=1)
