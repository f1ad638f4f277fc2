"""skurl.gym.SkuVectorEnv against the gymnasium.vector.VectorEnv contract (Gymnasium has no
checker for vector envs): spaces, shapes and dtypes, determinism by seed, the three
autoreset modes, the info layout, and equality with the single-SKU env sub-env by sub-env."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from skurl.errors import ConfigError
from skurl.gym import ENV_ID, SkuEnv, SkuVectorEnv
from skurl.sim.api import EnvStateError
from skurl.sim.state import METRIC_FIELDS

DAYS = 8
SKUS = 32
# No substitution groups: a sub-env then equals the same SKU simulated alone (SkuEnv).
OVERRIDES = [f"catalog.skus={SKUS}", "catalog.seed=2", f"sim.days={DAYS}", "sim.threads=1",
             "catalog.synthetic.substitution_share=0"]


def rollout(envs: SkuVectorEnv, seed: int | None, days: int = DAYS, action_seed: int = 0) -> list[tuple]:
    """(obs, reward, truncated) of every step from reset(seed), with seeded random actions."""
    envs.action_space.seed(action_seed)
    obs, _ = envs.reset(seed=seed)
    out = [(obs, None, None)]
    for _ in range(days):
        obs, reward, _, truncated, _ = envs.step(envs.action_space.sample())
        out.append((obs, reward, truncated))
    return out


def test_spaces_shapes_and_dtypes_over_an_episode() -> None:
    envs = SkuVectorEnv(overrides=OVERRIDES, seed=0)
    assert envs.num_envs == SKUS and envs.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    dim = envs.sim.env.schema.dim
    assert envs.single_observation_space.shape == (dim,)
    assert envs.observation_space.shape == (SKUS, dim)
    assert envs.single_action_space == gymnasium.spaces.Discrete(20)
    assert envs.action_space == gymnasium.spaces.MultiDiscrete(np.full(SKUS, 20))
    for day, (obs, reward, truncated) in enumerate(rollout(envs, 0)):
        assert obs.dtype == np.float32 and obs.shape == (SKUS, dim)
        assert obs in envs.observation_space, f"day {day}: observation outside the space"
        if reward is not None:
            assert reward.shape == (SKUS,) and reward.dtype == np.float64 and np.isfinite(reward).all()
            assert truncated.dtype == np.bool_ and truncated.all() == (day == DAYS) and truncated.any() == truncated.all()


def test_same_seed_same_trajectory_other_seed_other_one() -> None:
    a, b = SkuVectorEnv(overrides=OVERRIDES), SkuVectorEnv(overrides=OVERRIDES)
    run_a, run_b = rollout(a, 3), rollout(b, 3)
    for (oa, ra, _), (ob, rb, _) in zip(run_a, run_b, strict=True):
        np.testing.assert_array_equal(oa, ob)
        np.testing.assert_array_equal(ra, rb)
    again = rollout(a, 3)  # the same env, reseeded, replays
    np.testing.assert_array_equal(again[-1][0], run_a[-1][0])
    other = rollout(a, 4)
    assert not np.array_equal(np.stack([r for _, r, _ in other[1:]]), np.stack([r for _, r, _ in run_a[1:]]))


def test_returned_arrays_are_not_reused() -> None:
    envs = SkuVectorEnv(overrides=OVERRIDES, seed=0)
    obs0, _ = envs.reset()
    kept = obs0.copy()
    obs1, reward1, _, _, info1 = envs.step(np.zeros(SKUS, np.int64))
    kept_info = {k: v.copy() for k, v in info1.items()}
    obs2, reward2, _, _, _ = envs.step(np.full(SKUS, 19))
    np.testing.assert_array_equal(obs0, kept)
    assert not np.shares_memory(obs1, obs2) and not np.shares_memory(reward1, reward2)
    for key, value in kept_info.items():
        np.testing.assert_array_equal(info1[key], value)


def test_next_step_autoreset_starts_the_next_episode() -> None:
    envs = SkuVectorEnv(overrides=OVERRIDES, seed=5)
    last = rollout(envs, None)[-1]
    assert last[2].all()
    obs, reward, terminated, truncated, info = envs.step(np.full(SKUS, 3))
    assert not reward.any() and not terminated.any() and not truncated.any() and info == {}
    fresh = SkuVectorEnv(overrides=OVERRIDES, seed=5)
    fresh.reset()
    np.testing.assert_array_equal(obs, fresh.reset()[0])  # episode 1 of seed 5


def test_same_step_autoreset_returns_final_obs_and_info() -> None:
    same = SkuVectorEnv(overrides=OVERRIDES, seed=6, autoreset_mode="SameStep")
    assert same.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    nxt = SkuVectorEnv(overrides=OVERRIDES, seed=6)
    run_same, run_next = rollout(same, None), rollout(nxt, None)
    for (os_, rs, _), (on, rn, _) in zip(run_same[:-1], run_next[:-1], strict=True):
        np.testing.assert_array_equal(os_, on)
        np.testing.assert_array_equal(rs, rn)
    obs, reward, truncated = run_same[-1]
    np.testing.assert_array_equal(reward, run_next[-1][1])
    assert truncated.all()
    np.testing.assert_array_equal(obs, nxt.step(np.zeros(SKUS, np.int64))[0])  # the next episode's day 0
    # the truncating step's own observation and info
    same.reset(seed=6)
    same.action_space.seed(0)
    for _ in range(DAYS):
        _, _, _, _, info = same.step(same.action_space.sample())
    np.testing.assert_array_equal(info["final_obs"], run_next[-1][0])
    assert info["_final_obs"].all() and info["_final_info"].all()
    assert set(METRIC_FIELDS) <= set(info["final_info"])


def test_disabled_autoreset_needs_a_full_reset() -> None:
    envs = SkuVectorEnv(overrides=OVERRIDES, seed=0, autoreset_mode=AutoresetMode.DISABLED)
    rollout(envs, None)
    with pytest.raises(EnvStateError, match="call reset"):
        envs.step(np.zeros(SKUS, np.int64))
    with pytest.raises(ValueError, match="reset_mask"):
        envs.reset(options={"reset_mask": np.arange(SKUS) < 3})
    obs, _ = envs.reset(options={"reset_mask": np.ones(SKUS, bool)})
    assert obs.shape == (SKUS, envs.sim.env.schema.dim)


def test_info_carries_the_cost_breakdown_with_masks() -> None:
    envs = SkuVectorEnv(overrides=OVERRIDES, seed=0)
    envs.reset()
    _, reward, _, _, info = envs.step(np.full(SKUS, 4))
    for key in (*METRIC_FIELDS, "failed"):
        assert info[key].shape == (SKUS,) and info[f"_{key}"].all()
    costs = sum(info[k] for k in ("holding_cost", "penalty_cost", "purchase_cost", "order_cost", "waste_cost"))
    np.testing.assert_allclose(reward, info["revenue"] - costs, rtol=1e-5, atol=1e-3)  # reward is float32
    quiet = SkuVectorEnv(overrides=OVERRIDES, seed=0, info_metrics=False)
    quiet.reset()
    assert quiet.step(np.full(SKUS, 4))[4] == {}


def test_each_sub_env_equals_its_sku_alone() -> None:
    envs = SkuVectorEnv(overrides=OVERRIDES, seed=9)
    run = rollout(envs, None)
    envs.action_space.seed(0)  # the actions rollout() took
    batches = [envs.action_space.sample() for _ in range(DAYS)]
    for sku in (0, 13, SKUS - 1):
        single = SkuEnv(overrides=OVERRIDES, sku=sku, seed=9)
        obs, _ = single.reset()
        np.testing.assert_array_equal(obs, run[0][0][sku])
        for day in range(DAYS):
            obs, reward, _, truncated, _ = single.step(batches[day][sku])
            np.testing.assert_array_equal(obs, run[day + 1][0][sku])
            assert reward == run[day + 1][1][sku] and truncated == run[day + 1][2][sku]


def test_make_vec_builds_one_simulator_for_num_envs_skus() -> None:
    envs = gymnasium.make_vec(ENV_ID, num_envs=5, overrides=OVERRIDES)
    assert isinstance(envs, SkuVectorEnv) and envs.num_envs == 5 and envs.sim.num_skus == 5
    assert envs.spec is not None and envs.spec.id == ENV_ID
    obs, _ = envs.reset(seed=0)
    assert obs.shape == (5, envs.sim.env.schema.dim)
    envs.close()


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"num_envs": 0}, ConfigError, "num_envs = 0: expected an integer >= 1"),
    ({"autoreset_mode": "Sometimes"}, ValueError, "Sometimes"),
    ({"render_mode": "human"}, ValueError, "do not render"),
])
def test_bad_construction(kwargs: dict, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        SkuVectorEnv(overrides=OVERRIDES, **kwargs)


def test_more_sub_envs_than_catalog_skus_is_refused() -> None:
    envs = SkuVectorEnv(overrides=OVERRIDES)
    with pytest.raises(ConfigError, match=f"num_envs = {SKUS + 1}: the catalog has only {SKUS}"):
        SkuVectorEnv(overrides=OVERRIDES, catalog=envs.sim.env.catalog, num_envs=SKUS + 1)
    with pytest.raises(ValueError, match="one integer"):
        envs.reset(seed=[1, 2])


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_gymnasium_episode_statistics_wrapper_reads_whole_episodes(mode: AutoresetMode) -> None:
    """Gymnasium's own vector wrappers read the declared autoreset mode: episode returns are
    the sum of the simulator's rewards over sim.days steps, in both modes."""
    envs = gymnasium.wrappers.vector.RecordEpisodeStatistics(
        SkuVectorEnv(overrides=OVERRIDES, seed=1, autoreset_mode=mode, info_metrics=False))
    envs.reset(seed=1)
    total = np.zeros(SKUS)
    for _ in range(DAYS):
        _, reward, _, _, info = envs.step(np.full(SKUS, 6))
        total += reward
    assert info["_episode"].all()
    np.testing.assert_array_equal(info["episode"]["l"], np.full(SKUS, DAYS))
    np.testing.assert_allclose(info["episode"]["r"], total, rtol=1e-6)
