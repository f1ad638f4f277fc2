"""skurl.gym.SkuEnv: Gymnasium's own checker, truncation, and equality with the simulator
it composes (a one-SKU VectorEnv driven by the same grid)."""

from __future__ import annotations

import warnings

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from skurl.catalog import load_catalog
from skurl.config import load_config
from skurl.errors import ConfigError, UserError
from skurl.gym import ENV_ID, SkuEnv
from skurl.policy.actions import ActionGrid
from skurl.policy.grid_center import GridCenter
from skurl.sim.api import ActionError, EnvStateError
from skurl.sim.env import VectorEnv
from skurl.sim.layout import catalog_widths
from skurl.sim.state import METRIC_FIELDS

DAYS = 12
# Synthetic SKUs: perishables, promotions and supplier delays give every feature block width.
OVERRIDES = ["catalog.skus=24", "catalog.seed=5", f"sim.days={DAYS}", "sim.threads=1"]


def test_gymnasium_check_env_passes_without_warnings() -> None:
    env = gymnasium.make(ENV_ID, overrides=OVERRIDES, sku=3).unwrapped
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the checker reports soft problems as warnings
        check_env(env)
    assert env.spec is not None and env.spec.id == ENV_ID


def test_episode_truncates_on_the_last_day_and_then_needs_reset() -> None:
    env = SkuEnv(overrides=OVERRIDES, sku=0, seed=1)
    obs, info = env.reset()
    assert obs.dtype == np.float32 and obs in env.observation_space and info == {}
    for day in range(DAYS):
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        assert obs in env.observation_space
        assert isinstance(reward, float) and np.isfinite(reward)
        assert terminated is False and truncated is (day == DAYS - 1)
    with pytest.raises(EnvStateError, match="call reset"):
        env.step(0)


GRIDS = {
    "multiplier": [],
    "units": ["policy.actions.kind=units", "policy.actions.step=2"],
    "cover-newsvendor": ["policy.actions.kind=cover", "policy.actions.z_center=newsvendor"],
    "cover-tuned": ["policy.actions.kind=cover", "policy.actions.z_center=tuned", "policy.actions.z_min=-1.5",
                    "policy.actions.z_max=1.5", "policy.actions.n=21"],
}


@pytest.mark.parametrize("grid_kind", sorted(GRIDS))
def test_steps_equal_the_simulator_it_wraps(grid_kind: str) -> None:
    """Observations, rewards and the cost breakdown are the simulator's own, bit for bit,
    driven by the action grid's orders (a tuned cover grid on the centre it is given)."""
    sku, seed, overrides = 7, 4, OVERRIDES + GRIDS[grid_kind]
    cfg = load_config(None, overrides)
    catalog = load_catalog(cfg.catalog)
    row = catalog.subset(np.array([sku]))
    center = GridCenter(np.sort(catalog.sku_id), np.linspace(-0.5, 1.0, len(catalog)), 0.0)
    env = SkuEnv(overrides=overrides, sku=sku, seed=seed, grid_center=center)
    sim = VectorEnv(row, cfg.sim, catalog_widths(catalog))
    grid = ActionGrid.from_config(cfg.policy.actions, cfg.sim.review_days, reward=cfg.sim.reward)
    grid = grid.with_center(center).bind(row)
    assert env.action_space.n == grid.n
    obs, _ = env.reset(seed=seed)
    ref = sim.reset(seed, 0)
    np.testing.assert_array_equal(obs, ref.features[0])
    rng = np.random.default_rng(0)
    ordered = 0.0
    for _ in range(DAYS):
        action = int(rng.integers(grid.n))
        obs, reward, _, truncated, info = env.step(action)
        orders, _ = grid.orders_for(np.array([action]), ref.raw)
        res = sim.step(orders)
        ref = res.obs
        np.testing.assert_array_equal(obs, ref.features[0])
        assert reward == float(res.reward[0]) and truncated == res.done
        assert {k: info[k] for k in METRIC_FIELDS} == {
            k: float(getattr(res.metrics, k)[0]) for k in METRIC_FIELDS}
        ordered += info["ordered"]
    assert ordered > 0  # the grid's orders reached the simulator


def test_seeded_reset_replays_and_unseeded_reset_moves_on() -> None:
    env = SkuEnv(overrides=OVERRIDES, sku=2)

    def episode(seed: int | None) -> np.ndarray:
        env.reset(seed=seed)
        return np.array([env.step(5)[1] for _ in range(DAYS)])

    first = episode(11)
    second = episode(None)
    assert not np.array_equal(first, second)  # episode 1 draws other demand
    np.testing.assert_array_equal(episode(11), first)
    np.testing.assert_array_equal(episode(None), second)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"sku": 24}, "sku = 24: expected a row index in \\[0, 23\\]"),
    ({"sku": -1}, "sku = -1"),
    ({"overrides": [*OVERRIDES, "sim.dayz=3"]}, "unknown config key 'sim.dayz'"),
    ({"config": "/nonexistent/skurl.yaml"}, "config file '/nonexistent/skurl.yaml': not found"),
])
def test_bad_construction_is_one_user_error(kwargs: dict, message: str) -> None:
    args = {"overrides": OVERRIDES, **kwargs}
    with pytest.raises(UserError, match=message):
        SkuEnv(**args)


@pytest.mark.parametrize(("action", "message"), [
    (20, "indices must lie in \\[0, 19\\]"),
    (-1, "indices must lie in"),
    (1.5, "dtype float64, expected integer"),
    ([1, 2], "shape \\(2,\\), expected \\(1,\\)"),
])
def test_bad_actions_are_action_errors(action: object, message: str) -> None:
    env = SkuEnv(overrides=OVERRIDES)
    env.reset(seed=0)
    with pytest.raises(ActionError, match=message):
        env.step(action)


def test_config_object_with_overrides_and_a_given_catalog() -> None:
    cfg = load_config(None, ["catalog.kind=uniform", "catalog.skus=3", "sim.threads=1"])
    catalog = load_catalog(cfg.catalog)
    env = SkuEnv(cfg, ["sim.days=4", "policy.actions.n=7"], catalog=catalog, sku=2)
    assert env.action_space == gymnasium.spaces.Discrete(7)
    assert env.sim.cfg.sim.days == 4 and int(env.sim.env.catalog.sku_id[0]) == int(catalog.sku_id[2])
    with pytest.raises(ConfigError, match=r"policy\.actions\.n"):
        SkuEnv(cfg, ["policy.actions.n=1"], catalog=catalog)


def test_a_bad_seed_is_refused_and_forgotten() -> None:
    env, fresh = SkuEnv(overrides=OVERRIDES, seed=3), SkuEnv(overrides=OVERRIDES, seed=3)
    env.reset()
    with pytest.raises(EnvStateError, match="seed = -1"):
        env.sim.reset(-1)
    fresh.reset()
    np.testing.assert_array_equal(env.reset()[0], fresh.reset()[0])  # episode 1 of seed 3
