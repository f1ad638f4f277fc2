"""learn/dcl_check.py: the paired test a DCL candidate must pass, and label_states' sampler
(the states of one policy labelled around another's actions)."""

from __future__ import annotations

import numpy as np
import pytest
from test_dcl import Constant, _setup  # tests/unit is on sys.path

from skurl.learn.dcl import DclSpec
from skurl.learn.dcl_check import episode_reward, paired_gain
from skurl.learn.dcl_parts import label_states
from skurl.policy.baselines import make_policy


class Units:
    """Constant(k) as a Policy: k units a day."""

    name = "units"

    def __init__(self, k: int) -> None:
        self.k = k

    def orders(self, obs) -> np.ndarray:
        return np.full(obs.features.shape[0], float(self.k))

    def params(self) -> dict:
        return {}


def _base_stock(env):
    n = env.num_skus
    return make_policy("capped-base-stock", env.catalog, env.cfg, {"S": np.full(n, 16.0), "r": np.full(n, 8.0)})


def test_a_worse_candidate_fails_and_a_better_one_passes() -> None:
    env, _, _ = _setup()
    tuned, starve = _base_stock(env), Units(0)
    down = paired_gain(env, tuned, starve, seed=3, iteration=0, episodes=2, skip=5)
    up = paired_gain(env, starve, tuned, seed=3, iteration=0, episodes=2, skip=5)
    assert down.samples == 2 * env.num_skus and down.se > 0
    assert down.worse(2.0) and not up.worse(2.0)
    assert up.gain == pytest.approx(-down.gain)  # the same episodes for both: common random numbers


def test_the_gain_is_the_paired_mean_of_per_sku_episode_rewards_by_hand() -> None:
    env, _, _ = _setup()
    from skurl.learn.dcl_check import CHECK_EPISODE0

    a, b = Units(4), Units(6)
    d = np.concatenate([episode_reward(env, b, seed=1, episode=CHECK_EPISODE0 + 3 * 2 + e, skip=2)
                        - episode_reward(env, a, seed=1, episode=CHECK_EPISODE0 + 3 * 2 + e, skip=2)
                        for e in range(2)])
    got = paired_gain(env, a, b, seed=1, iteration=3, episodes=2, skip=2)
    assert got.gain == pytest.approx(d.mean()) and got.se == pytest.approx(d.std(ddof=1) / np.sqrt(d.size))
    with pytest.raises(ValueError, match="leaves nothing"):
        episode_reward(env, a, seed=1, episode=0, skip=1000)


def test_identical_policies_are_never_worse() -> None:
    env, _, _ = _setup()
    same = paired_gain(env, Units(5), Units(5), seed=0, iteration=0, episodes=1, skip=0)
    assert same.gain == 0.0 and same.se == 0.0 and not same.worse(2.0)


def test_a_sampler_gives_the_states_and_the_policy_the_candidates() -> None:
    env, grid, rollout = _setup()
    spec = DclSpec(states=40, horizon=6, budget=24, warmup=5, spread=2, window=1)
    # States of a policy that orders 11 a day (stock piles up), labelled around 0's action:
    # candidates 0..2, and with that much stock ordering nothing is best.
    out = label_states(env, Constant(0), rollout, grid, spec, seed=3, iteration=0, sampler=Constant(11), part=1)
    assert (out.demos.labels <= 2).all() and out.changed < 0.5
    mine = label_states(env, Constant(0), rollout, grid, spec, seed=3, iteration=0)
    assert mine.changed == 1.0  # its own states run out of stock: every label orders more
    assert not np.array_equal(out.demos.obs, mine.demos.obs)
    on_hand = env.schema.slices()["on_hand"]
    assert out.demos.obs[:, on_hand].mean() > mine.demos.obs[:, on_hand].mean()


def test_rows_of_each_horizon_are_labelled_as_with_that_horizon_alone() -> None:
    # Per-row horizons (dcl.horizon=0 on a catalog of mixed lead times): each row's label is
    # the one a run with its horizon for every row gives (the rollouts are shard-invariant).
    env, grid, rollout = _setup()
    spec = DclSpec(states=40, horizon=5, budget=24, warmup=5, spread=2, window=2)
    horizons = np.where(np.arange(env.num_skus) % 2 == 0, 5, 9)
    mixed = label_states(env, Constant(3), rollout, grid, spec, seed=3, iteration=0, horizons=horizons)
    short = label_states(env, Constant(3), rollout, grid, spec, seed=3, iteration=0)
    long = label_states(env, Constant(3), rollout, grid, spec, seed=3, iteration=0, horizons=np.full(env.num_skus, 9))
    assert np.array_equal(mixed.rows, short.rows) and np.array_equal(mixed.rows, long.rows)
    even = mixed.rows % 2 == 0
    assert 0 < even.sum() < even.size
    assert np.array_equal(mixed.demos.labels[even], short.demos.labels[even])
    assert np.array_equal(mixed.demos.labels[~even], long.demos.labels[~even])
    assert not np.array_equal(short.demos.labels, long.demos.labels)  # the horizon matters here
    per_state = short.sku_days / (5 * even.size)  # rollouts per state, each of H days
    assert mixed.sku_days == per_state * (5 * even.sum() + 9 * (~even).sum())
