"""The cover grid centred on tuned echelon base-stock (policy/echelon_cover.py): offset 0
orders exactly what the tuned echelon base-stock orders, on every row of a network, in the
unit table, the collectors' decode and the greedy decode; the centre round-trips with its
kind; a catalog without networks is a one-line error."""

from __future__ import annotations

import numpy as np
import pytest

from skurl.catalog import Catalog, load_catalog
from skurl.collect.evaluate import make_env
from skurl.config import Config, load_config
from skurl.errors import ConfigError, UserError
from skurl.policy.baselines import make_policy
from skurl.policy.cover_decode import cover_greedy
from skurl.policy.echelon_cover import center_levels
from skurl.policy.grid_center import (
    GridCenter,
    center_bytes,
    center_from_bytes,
    check_center_policy,
    tune_center,
)
from skurl.policy.learned import grid_for

SETTINGS = ["catalog.kind=serial", "catalog.skus=40", "catalog.serial.lead_times=[1,0,2]",
            "catalog.serial.holding=[3,2,1]", "sim.backorders=true", "sim.reward=cost", "sim.days=30",
            "eval.days=40", "eval.warmup=10", "policy.actions.kind=cover", "policy.actions.z_center=tuned",
            "policy.actions.center_policy=echelon-base-stock", "policy.actions.n=9",
            "policy.actions.z_min=-1", "policy.actions.z_max=1"]


@pytest.fixture(scope="module")
def tuned() -> tuple[Config, Catalog, GridCenter]:
    cfg = load_config(None, SETTINGS)
    catalog = load_catalog(cfg.catalog)
    return cfg, catalog, tune_center(cfg, catalog)


def test_offset_zero_is_the_tuned_echelon_base_stock(tuned: tuple[Config, Catalog, GridCenter]) -> None:
    cfg, catalog, center = tuned
    assert center.echelon and center.lot is None
    grid = grid_for(cfg).with_center(center).bind(catalog)
    levels = center_levels(catalog, center.lookup(catalog.sku_id, np.zeros(len(catalog))))
    teacher = make_policy("echelon-base-stock", catalog, cfg.sim, {"S": levels})
    middle = int(np.flatnonzero(grid.values == 0.0)[0])
    env = make_env(catalog, cfg.sim)
    obs = env.reset(seed=5, episode=0)
    n = len(catalog)
    logits = np.full((n, grid.n), -5.0, np.float32)
    logits[:, middle] = 5.0
    ordered = 0.0
    for _ in range(25):
        want = teacher.orders(obs)
        units, _ = grid.orders_for(np.full(n, middle), obs.raw)
        np.testing.assert_array_equal(units, want)
        np.testing.assert_array_equal(grid.unit_table(obs.raw, slice(0, n))[:, middle], want)
        _, greedy_units = cover_greedy(grid, obs.raw, slice(10, n), logits[10:])
        np.testing.assert_array_equal(greedy_units, want[10:])
        ordered += float(want.sum())
        obs = env.step(units).obs
    assert ordered > 0  # the states were ones where the teacher orders


def test_offsets_move_the_echelon_level(tuned: tuple[Config, Catalog, GridCenter]) -> None:
    cfg, catalog, center = tuned
    grid = grid_for(cfg).with_center(center).bind(catalog)
    obs = make_env(catalog, cfg.sim).reset(seed=5, episode=0)
    table = grid.unit_table(obs.raw, slice(0, len(catalog)))
    assert np.all(np.diff(table, axis=1) >= 0) and np.any(table[:, -1] > table[:, 0])


def test_the_centre_round_trips_with_its_kind(tuned: tuple[Config, Catalog, GridCenter]) -> None:
    _, _, center = tuned
    back = center_from_bytes(center_bytes(center), "centre")
    assert back.echelon and np.array_equal(back.z, center.z) and back.objective == center.objective
    check_center_policy(back, "echelon-base-stock", "centre")
    with pytest.raises(UserError, match="tuned for echelon-base-stock"):
        check_center_policy(back, "forecast-base-stock", "centre")


def test_a_catalog_without_networks_is_one_line() -> None:
    cfg = load_config(None, ["catalog.skus=20", *SETTINGS[7:]])
    with pytest.raises(ConfigError) as err:
        tune_center(cfg, load_catalog(cfg.catalog))
    assert "\n" not in str(err.value) and "policy.actions.center_policy" in str(err.value)


def test_clones_order_as_their_source_rows(tuned: tuple[Config, Catalog, GridCenter]) -> None:
    """DCL's rollouts on networks (policy/rollout_q.py): the grid taken at a clone env's rows
    (grid_rows with the clones' upstreams) orders what the source rows order, every action;
    the candidates of sampled rows are their rows of the whole-network unit table; the
    greedy rollout policy on the clones picks the source rows' actions."""
    import torch

    from skurl.policy.learned import LearnedPolicy
    from skurl.policy.nets import ActorCritic
    from skurl.policy.rollout_q import candidate_orders, grid_rows, learned_rollout

    cfg, catalog, center = tuned
    grid = grid_for(cfg).with_center(center).bind(catalog)
    env = make_env(catalog, cfg.sim)
    obs = env.reset(seed=3, episode=0)
    rng = np.random.default_rng(0)
    for _ in range(6):
        obs = env.step(rng.poisson(3.0, len(catalog)).astype(float)).obs
    rows = np.array([0, 5, 6, 6, 31])
    clone = env.clone(rows, whole_groups=True)
    ex = clone.cloned
    assert ex is not None and ex.parent is not None
    n, r = len(catalog), ex.src.size
    want = grid.unit_table(obs.raw, slice(0, n))
    np.testing.assert_array_equal(grid_rows(grid, ex.src, ex.parent).unit_table(clone.observe().raw, slice(0, r)),
                                  want[ex.src])
    np.testing.assert_array_equal(candidate_orders(grid, env, rows), want[rows])
    torch.manual_seed(0)
    policy = LearnedPolicy(ActorCritic(env.layout.dim, grid.n, (16, 16)), grid)
    on_clones = learned_rollout(policy)(ex)
    np.testing.assert_array_equal(on_clones.action_indices(clone.observe()), policy.action_indices(obs)[ex.src])
    np.testing.assert_array_equal(on_clones.orders(clone.observe()), policy.orders(obs)[ex.src])
    with pytest.raises(ValueError, match="upstreams"):
        grid_rows(grid, ex.src)
