"""Episodes of raw-state rules without feature rows (VectorEnv.observe_features, run_episode
for a `raw_only` rule): the same days to the bit, features of width 0 while off, and the
next episode of a rule that reads features sees what a fresh env shows."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from skurl.catalog.synthetic import synthetic_catalog
from skurl.config import load_config
from skurl.policy.baselines import make_policy
from skurl.sim.env import VectorEnv
from skurl.sim.episode import run_episode

DAYS, WARMUP = 30, 5


def setup(network: str = "none") -> tuple[VectorEnv, object]:
    cfg = load_config(None, ["catalog.skus=300", "catalog.synthetic.substitution_share=0.4",
                             f"catalog.synthetic.network={network}", "sim.threads=2"])
    catalog = synthetic_catalog(cfg.catalog)
    env = VectorEnv(catalog, dataclasses.replace(cfg.sim, days=DAYS + WARMUP))
    return env, make_policy("forecast-s-S", catalog, cfg.sim)


class Reading:
    """forecast-s-S that also reads the features (as a learned policy does)."""

    def __init__(self, inner: object) -> None:
        self.inner, self.widths = inner, []

    def orders(self, obs):
        self.widths.append(obs.features.shape[1])
        return self.inner.orders(obs)


def test_a_raw_only_rule_runs_the_same_days_without_feature_rows() -> None:
    env, policy = setup()
    assert policy.raw_only is True
    reading = Reading(policy)
    want, want_failed = run_episode(env, reading, seed=3, episode=1, days=DAYS, warmup=WARMUP)
    assert set(reading.widths) == {env.schema.dim}
    seen = []
    env.observe_features(False)
    obs = env.reset(3, 1)
    seen.append(obs.features.shape)
    env.observe_features(True)  # takes effect at the next reset, not mid-episode
    for _ in range(3):
        obs = env.step(policy.orders(obs)).obs
        seen.append(obs.features.shape)
    assert set(seen) == {(env.num_skus, 0)}
    blind = Reading(policy)
    blind.raw_only = True
    got, got_failed = run_episode(env, blind, seed=3, episode=1, days=DAYS, warmup=WARMUP)
    assert set(blind.widths) == {0}
    assert want.keys() == got.keys() and np.array_equal(want_failed, got_failed)
    for key in want:
        assert np.array_equal(want[key], got[key]), key
    # after the blind episode, a rule that reads features sees a fresh env's rows, day by day
    fresh, _ = setup()
    a, b = env.reset(4, 0), fresh.reset(4, 0)
    for _ in range(DAYS):
        assert np.array_equal(a.features, b.features)
        orders = policy.orders(a)
        a, b = env.step(orders).obs, fresh.step(orders).obs


def test_a_clone_of_a_blind_env_is_blind() -> None:
    env, policy = setup()
    env.observe_features(False)
    obs = env.reset(0, 0)
    env.step(policy.orders(obs))
    clone = env.clone(np.arange(5))
    assert clone.observe().features.shape == (5, 0)


@pytest.mark.parametrize("rule", ["echelon-base-stock", "installation-base-stock"])
def test_supply_networks_run_the_same_days_without_feature_rows(rule: str) -> None:
    """dc networks: the kernel keeps the state's echelon positions without the feature rows."""
    env, _ = setup("dc")
    policy = make_policy(rule, env.catalog, env.cfg)
    assert policy.raw_only is True
    reading = Reading(policy)
    want, want_failed = run_episode(env, reading, seed=2, episode=0, days=DAYS, warmup=WARMUP)
    blind = Reading(policy)
    blind.raw_only = True
    got, got_failed = run_episode(env, blind, seed=2, episode=0, days=DAYS, warmup=WARMUP)
    assert set(reading.widths) == {env.schema.dim} and set(blind.widths) == {0}
    assert np.array_equal(want_failed, got_failed)
    for key in want:
        assert np.array_equal(want[key], got[key]), key
    fresh, _ = setup("dc")
    a, b = env.reset(4, 0), fresh.reset(4, 0)
    for _ in range(5):
        assert np.array_equal(a.features, b.features)
        orders = policy.orders(a)
        a, b = env.step(orders).obs, fresh.step(orders).obs


@pytest.mark.parametrize("flag", [False, None, 1])
def test_only_a_true_raw_only_skips_the_rows(flag: object) -> None:
    env, policy = setup()
    reading = Reading(policy)
    if flag is not None:
        reading.raw_only = flag
    run_episode(env, reading, seed=0, episode=0, days=3, warmup=0)
    assert set(reading.widths) == {env.schema.dim}
