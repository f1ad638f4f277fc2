"""Rollouts of SKUs in substitution groups and of mixed horizons (policy/rollout_q.py): a
grouped row's rollout on the env's own episode replays its future with its group, and
states of several horizons rolled out together get the Q each horizon gets alone."""

from __future__ import annotations

import numpy as np

from skurl.config import SimConfig
from skurl.policy.baselines import make_policy
from skurl.policy.rollout_q import RolloutSpec, baseline_rollout, estimate_q, rollout_returns
from skurl.sim import VectorEnv
from skurl.sim.testing import random_catalog


def _env(n: int, days: int = 40) -> tuple[VectorEnv, object]:
    catalog = random_catalog(n, 9, group_share=0.7)
    sim = SimConfig(days=days, threads=1)
    base = make_policy("capped-base-stock", catalog, sim)
    env = VectorEnv(catalog, sim)
    obs = env.reset(seed=2, episode=4)
    for _ in range(5):
        obs = env.step(base.orders(obs)).obs
    return env, base


def test_a_grouped_rows_rollout_replays_the_envs_own_future() -> None:
    env, base = _env(16, days=17)
    grouped = np.flatnonzero(env.catalog.group >= 0)
    assert grouped.size >= 4
    obs = env.observe()
    first = np.asarray(base.orders(obs), np.float64)
    returns, row_days = rollout_returns(env, grouped, first[grouped], np.full(grouped.size, 4), baseline_rollout(base),
                                        RolloutSpec(horizon=12, budget=1))
    sizes = np.bincount(env.catalog.group[env.catalog.group >= 0])
    assert row_days == int(sizes[env.catalog.group[grouped]].sum()) * 12  # each clone brings its whole group
    want = np.zeros(grouped.size)
    while not env.done:  # the rollout sums the day's float32 rewards the same way
        res = env.step(base.orders(obs))
        obs, want = res.obs, want + res.reward[grouped]
    np.testing.assert_array_equal(returns, want)


def test_mixed_horizons_match_each_horizon_alone() -> None:
    env, base = _env(24)
    rows = np.arange(24)
    first = np.tile([0.0, 3.0, 8.0, 15.0], (24, 1))
    horizons = np.array([2, 5, 9][:1] * 4 + [5] * 10 + [9] * 10)
    policy = baseline_rollout(base)
    spec = RolloutSpec(horizon=9, budget=12, episode_base=30, seed=5)
    together = estimate_q(env, rows, first, policy, spec, horizons)
    assert together.sku_days == int((together.reps.sum(1) * horizons).sum())
    # every clone steps the longest horizon, grouped ones with their groups
    width = np.where(env.catalog.group >= 0, np.bincount(np.maximum(env.catalog.group, 0))[np.maximum(env.catalog.group, 0)], 1)
    assert together.row_days == int((together.reps.sum(1) * width).sum()) * 9 > together.sku_days
    for h in np.unique(horizons):
        part = np.flatnonzero(horizons == h)
        alone = estimate_q(env, rows[part], first[part], policy, RolloutSpec(int(h), 12, episode_base=30, seed=5))
        np.testing.assert_array_equal(together.q[part], alone.q)
        np.testing.assert_array_equal(together.best[part], alone.best)
