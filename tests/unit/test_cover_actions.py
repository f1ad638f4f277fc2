"""The cover action grid (policy.actions.kind=cover): index k orders what ForecastBaseStock
orders with z = z_k, through the grid, the collector and LearnedPolicy; bad settings and
envs that cannot run it fail with one clear line."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from skurl.catalog import load_catalog
from skurl.cli import main
from skurl.collect.collector import Collector
from skurl.collect.evaluate import make_env, run_episode
from skurl.config import ActionsConfig, Config, load_config
from skurl.errors import ConfigError
from skurl.policy.actions import ActionGrid, bind_to_env
from skurl.policy.baselines import default_z, make_policy
from skurl.policy.learned import LearnedPolicy, grid_for
from skurl.policy.nets import ActorCritic
from skurl.sim.api import Obs, RawState

DAYS = 12
# Small heterogeneous catalog: fast and slow movers, lead times 1.., supplier delays,
# perishables, negative-binomial demand (every branch of the variance formula).
SETTINGS = ["catalog.skus=120", f"sim.days={DAYS}", "policy.actions.kind=cover", "policy.hidden=[8]",
            "train.torch_threads=1"]


def config(*extra: str) -> Config:
    return load_config(None, [*SETTINGS, *extra])


def forced_model(obs_dim: int, n: int, k: int) -> ActorCritic:
    """A model that picks action k with probability ~1 whatever the state."""
    model = ActorCritic(obs_dim, n, [8])
    with torch.no_grad():
        model.policy.net[-1].weight.zero_()
        bias = torch.zeros(n)
        bias[k] = 60.0
        model.policy.net[-1].bias.copy_(bias)
    return model


def test_orders_equal_forecast_base_stock_for_a_constant_z() -> None:
    cfg = config()
    catalog = load_catalog(cfg.catalog)
    grid = grid_for(cfg, catalog)
    assert grid.kind == "cover" and grid.n == 20 and grid.values[0] == -1.0 and grid.values[-1] == 4.0
    env = make_env(catalog, cfg.sim)
    for k in (0, 7, 19):  # z = -1, ~0.84, 4
        baseline = make_policy("forecast-base-stock", catalog, cfg.sim, {"z": grid.values[k]})
        obs = env.reset(seed=5, episode=0)
        total = 0.0
        for _ in range(DAYS):
            expected = baseline.orders(obs)
            got, clipped = grid.orders_for(np.full(len(catalog), k), obs.raw)
            np.testing.assert_array_equal(got, expected)
            assert not clipped.any()
            table = grid.unit_table(obs.raw, slice(10, 40))  # every index at once
            np.testing.assert_array_equal(table[:, k], expected[10:40])
            assert np.all(np.diff(table, axis=1) >= 0)  # larger z never orders less
            total += float(expected.sum())
            obs = env.step(expected).obs
        assert total > 0


def test_review_days_order_only_on_review_days() -> None:
    cfg = config("sim.review_days=3")
    catalog = load_catalog(cfg.catalog)
    grid = grid_for(cfg, catalog)
    baseline = make_policy("forecast-base-stock", catalog, cfg.sim, {"z": grid.values[9]})
    env = make_env(catalog, cfg.sim)
    obs = env.reset(seed=1, episode=0)
    for day in range(6):
        got = grid.orders_for(np.full(len(catalog), 9), obs.raw)[0]
        np.testing.assert_array_equal(got, baseline.orders(obs))
        assert (day % 3 == 0) == bool(got.sum() > 0)
        obs = env.step(got).obs


def test_collector_round_trip_matches_the_baseline_episode() -> None:
    cfg = config()
    catalog = load_catalog(cfg.catalog)
    env = make_env(catalog, cfg.sim)
    k = 11
    model = forced_model(env.schema.dim, 20, k)
    collector = Collector(env, model, grid_for(cfg), infer_dtype="float32")  # binds to env.catalog
    assert collector.grid.cover is not None
    rollout = collector.collect(seed=3, episode=0)
    assert rollout is not None and np.all(rollout.actions == k)
    # The same episode driven by the baseline at z_k: same rewards every day.
    baseline = make_policy("forecast-base-stock", catalog, cfg.sim, {"z": collector.grid.values[k]})
    replay = make_env(catalog, cfg.sim)
    obs = replay.reset(seed=3, episode=0)
    for t in range(DAYS):
        result = replay.step(baseline.orders(obs))
        np.testing.assert_array_equal(rollout.rewards[t], result.reward)
        obs = result.obs


def test_a_collector_on_a_tuned_centre_waits_for_it_then_orders_from_it() -> None:
    """Remote collectors get the centre after they are built (modes/decoupled/remote_grid.py)."""
    from skurl.errors import UserError
    from skurl.policy.grid_center import GridCenter

    cfg = config("policy.actions.z_center=tuned", "policy.actions.z_min=-1.5", "policy.actions.z_max=1.5",
                 "policy.actions.n=21")
    catalog = load_catalog(cfg.catalog)
    env = make_env(catalog, cfg.sim)
    collector = Collector(env, forced_model(env.schema.dim, 21, 3), grid_for(cfg), infer_dtype="float32",
                          catalog=catalog)
    with pytest.raises(UserError, match="no tuned centre"):
        collector.collect(seed=3, episode=0)
    z = np.linspace(-0.5, 0.5, len(catalog))
    collector.use_center(GridCenter(np.sort(catalog.sku_id), z[np.argsort(np.argsort(catalog.sku_id))], 0.0))
    assert collector.grid.cover is not None
    np.testing.assert_array_equal(collector.grid.cover.z0, z)
    assert collector.collect(seed=3, episode=0) is not None


def test_learned_policy_scores_like_the_baseline() -> None:
    cfg = config()
    catalog = load_catalog(cfg.catalog)
    sim = dataclasses.replace(cfg.sim, days=DAYS)
    env = make_env(catalog, sim)
    k = 4
    policy = LearnedPolicy(forced_model(env.schema.dim, 20, k), grid_for(cfg, catalog))
    baseline = make_policy("forecast-base-stock", catalog, cfg.sim, {"z": policy.grid.values[k]})
    got, _ = run_episode(env, policy, seed=9, episode=0, days=DAYS - 2, warmup=2)
    want, _ = run_episode(make_env(catalog, sim), baseline, seed=9, episode=0, days=DAYS - 2, warmup=2)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)


def test_greedy_pools_safety_factors_that_order_the_same() -> None:
    """Stock at the z=1 level: z=0 and z=1 both order 0 (probability 0.3 + 0.3), z=2 orders
    more (0.4): greedy orders 0, the most probable quantity, not index 2's."""
    catalog = load_catalog(config("catalog.skus=2").catalog)
    grid = ActionGrid(kind="cover", values=np.array([0.0, 1.0, 2.0]), review_days=1).bind(catalog)
    assert grid.cover is not None
    width = int(grid.cover.cover_days.max())
    empty = RawState(np.zeros(2, np.int64), np.zeros((2, 1), np.int64), np.zeros(2, np.int64),
                     np.full((2, width), 30.0, np.float32), 0)
    levels = grid.unit_table(empty, slice(None))  # IP = 0: the levels themselves
    assert np.all(np.diff(levels, axis=1) > 0)
    raw = dataclasses.replace(empty, on_hand=np.array([0, int(levels[1, 1])]))
    model = ActorCritic(3, 3, [8])
    with torch.no_grad():
        model.policy.net[-1].weight.zero_()
        model.policy.net[-1].bias.copy_(torch.tensor([0.0, 0.0, float(np.log(0.4 / 0.3))]))
    policy = LearnedPolicy(model, grid)
    obs = Obs(np.zeros((2, 3), np.float32), raw, None)  # type: ignore[arg-type]
    idx = policy.action_indices(obs)
    assert idx[0] == 2  # distinct quantities: the most probable index
    assert idx[1] in (0, 1)
    np.testing.assert_array_equal(policy.orders(obs), [levels[0, 2], 0.0])


def test_bad_cover_settings_are_one_line_config_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match=r"policy\.actions\.z_max"):
        ActionsConfig(kind="cover", z_min=2.0, z_max=1.0)
    assert main(["config", "show", "--set", "policy.actions.kind=cover", "--set", "policy.actions.z_max=-3"]) == 2
    err = capsys.readouterr().err.strip()
    assert "policy.actions.z_max" in err and len(err.splitlines()) == 1


def test_cover_grid_refuses_envs_and_states_it_cannot_use() -> None:
    cfg = config()
    catalog = load_catalog(cfg.catalog)

    class NoCatalogEnv:  # a remote / multi-shard env: no catalog attribute
        pass

    with pytest.raises(ConfigError, match="does not expose its catalog"):
        bind_to_env(grid_for(cfg), NoCatalogEnv())
    bound = bind_to_env(grid_for(cfg), NoCatalogEnv(), catalog)  # its rows, given (remote collectors)
    assert bound.cover is not None and bound.cover.cover_days.shape == (len(catalog),)
    with pytest.raises(ConfigError, match="not bound"):
        grid_for(cfg).orders_for(np.zeros(2, np.int64), _lean_raw(2))
    # Lean replies carry today's forecast only (rpc/env_wire.py): refused, not zeros ordered.
    with pytest.raises(ConfigError, match="forecast day"):
        grid_for(cfg, catalog).orders_for(np.zeros(len(catalog), np.int64), _lean_raw(len(catalog)))
    with pytest.raises(ValueError, match="orders_for"):
        grid_for(cfg, catalog).to_orders_checked(np.zeros(2, np.int64), np.ones(2))
    unbound_multiplier = grid_for(load_config(None, ["policy.actions.kind=multiplier"]))
    assert bind_to_env(unbound_multiplier, NoCatalogEnv()) is unbound_multiplier


def _lean_raw(n: int) -> RawState:
    zero = np.zeros(n, np.int64)
    return RawState(zero, np.zeros((n, 1), np.int64), zero, np.ones((n, 1), np.float32), 0)


def test_skip_action_orders_nothing_and_the_rest_span_z_range() -> None:
    cfg = config("policy.actions.skip=true", "policy.actions.n=6", "policy.actions.z_min=0",
                 "policy.actions.z_max=2")
    catalog = load_catalog(cfg.catalog)
    grid = grid_for(cfg, catalog)
    np.testing.assert_array_equal(grid.values, [-np.inf, 0.0, 0.5, 1.0, 1.5, 2.0])
    env = make_env(catalog, cfg.sim)
    obs = env.reset(seed=2, episode=0)  # empty stock: every z > -inf orders something somewhere
    table = grid.unit_table(obs.raw, slice(None))
    assert not np.isnan(table).any() and np.all(table[:, 0] == 0.0) and table[:, 1].sum() > 0
    got, clipped = grid.orders_for(np.zeros(len(catalog), np.int64), obs.raw)
    assert np.all(got == 0.0) and not clipped.any()
    baseline = make_policy("forecast-base-stock", catalog, cfg.sim, {"z": 1.5})
    np.testing.assert_array_equal(grid.orders_for(np.full(len(catalog), 4), obs.raw)[0], baseline.orders(obs))


def test_newsvendor_centre_offsets_each_skus_critical_ratio_factor() -> None:
    cfg = config("policy.actions.z_center=newsvendor", "policy.actions.z_min=-2", "policy.actions.z_max=2",
                 "policy.actions.n=5")
    catalog = load_catalog(cfg.catalog)
    grid = grid_for(cfg, catalog)
    z0 = default_z(catalog, cfg.sim)
    assert grid.cover is not None and np.ptp(z0) > 0
    np.testing.assert_array_equal(grid.cover.z0, z0)
    env = make_env(catalog, cfg.sim)
    obs = env.reset(seed=4, episode=0)
    for k in (0, 2, 4):
        baseline = make_policy("forecast-base-stock", catalog, cfg.sim, {"z": z0 + grid.values[k]})
        np.testing.assert_array_equal(grid.orders_for(np.full(len(catalog), k), obs.raw)[0], baseline.orders(obs))
