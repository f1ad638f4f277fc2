"""forecast-s-S (forecast-driven (s, S) with a per-SKU lot) and the cover grid centred on it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save

from skurl.catalog import Catalog, load_catalog
from skurl.collect.evaluate import make_env
from skurl.config import Config, load_config
from skurl.errors import UserError
from skurl.learn.imitate import record
from skurl.policy.baselines import inventory_position, lot_size, make_policy
from skurl.policy.grid_center import (
    CENTER_FILE,
    GridCenter,
    ensure_center,
    load_center,
    save_center,
    tune_center,
)
from skurl.policy.learned import grid_for
from skurl.policy.tuning import tune

DAYS = 12
SETTINGS = ["catalog.skus=120", f"sim.days={DAYS}", "eval.warmup=5", "policy.actions.kind=cover",
            "policy.actions.z_center=tuned", "policy.actions.n=7", "policy.actions.z_min=-1.5",
            "policy.actions.z_max=1.5", "policy.actions.center_policy=forecast-s-S",
            "catalog.synthetic.order_cost_share=0.5"]


def config(*extra: str) -> Config:
    return load_config(None, [*SETTINGS, *extra])


@pytest.fixture(scope="module")
def tuned() -> tuple[Config, Catalog, GridCenter]:
    cfg = config()
    catalog = load_catalog(cfg.catalog)
    return cfg, catalog, tune_center(cfg, catalog)


def test_a_zero_lot_orders_as_forecast_base_stock_and_a_lot_batches() -> None:
    cfg = config()
    catalog = load_catalog(cfg.catalog)
    z = np.full(len(catalog), 1.0)
    fbs = make_policy("forecast-base-stock", catalog, cfg.sim, {"z": z})
    plain = make_policy("forecast-s-S", catalog, cfg.sim, {"z": z, "lot": np.zeros(len(catalog))})
    lot = np.arange(len(catalog), dtype=np.float64) % 7
    batched = make_policy("forecast-s-S", catalog, cfg.sim, {"z": z, "lot": lot})
    env, env_plain = make_env(catalog, cfg.sim), make_env(catalog, cfg.sim)
    obs, obs_plain = env.reset(seed=5, episode=0), env_plain.reset(seed=5, episode=0)
    orders_plain = orders_batched = 0
    for _ in range(DAYS):
        want = fbs.orders(obs_plain)
        np.testing.assert_array_equal(plain.orders(obs_plain), want)
        got = batched.orders(obs)
        level = fbs.level(obs.raw)
        below = inventory_position(obs.raw) < level
        np.testing.assert_array_equal(got, np.where(below, level + lot - inventory_position(obs.raw), 0.0))
        orders_plain += int((want > 0).sum())
        orders_batched += int((got > 0).sum())
        obs, obs_plain = env.step(got).obs, env_plain.step(want).obs
    assert orders_batched < orders_plain  # the same level, reached with bigger, rarer orders


def test_the_lot_is_zero_without_an_order_cost_and_lasts_a_shelf_life_at_most() -> None:
    catalog = load_catalog(config().catalog)
    lot = lot_size(catalog, 1.0)
    free = catalog.order_cost == 0
    assert free.any() and (~free).any()
    np.testing.assert_array_equal(lot[free], 0.0)
    assert np.all(lot == np.round(lot)) and np.all(lot >= 0)
    perishable = catalog.shelf_life > 0
    from skurl.policy.baselines import long_run_mean

    cap = long_run_mean(catalog) * catalog.shelf_life
    assert np.all(lot[perishable] <= np.round(cap[perishable]) + 1e-9)
    np.testing.assert_array_equal(lot_size(catalog, 0.0), 0.0)
    free_holding = catalog.subset(np.flatnonzero(~free))
    free_holding.holding_cost[:] = 0.0  # EOQ without bound: at most two years of demand
    assert np.all(lot_size(free_holding, 1.0) <= np.round(730 * long_run_mean(free_holding)) + 1e-9)


def test_tuning_batches_the_skus_with_an_order_cost_and_beats_forecast_base_stock(
        tuned: tuple[Config, Catalog, GridCenter]) -> None:
    cfg, catalog, _ = tuned
    kw = {"eval_seed": cfg.eval.seed, "days": cfg.eval.days, "warmup": cfg.eval.warmup}
    fss = tune("forecast-s-S", catalog, cfg.sim, **kw)
    fbs = tune("forecast-base-stock", catalog, cfg.sim, **kw)
    assert set(fss.params) == {"z", "lot"}
    costly = catalog.order_cost > 1.0
    assert np.median(fss.params["lot"][costly]) > 0
    np.testing.assert_array_equal(fss.params["lot"][catalog.order_cost == 0], 0.0)
    assert fss.objective < fbs.objective  # on the tuning seeds: the lots save order costs


def test_offset_zero_is_the_tuned_forecast_s_s_and_the_clone_is_exact(
        tuned: tuple[Config, Catalog, GridCenter]) -> None:
    cfg, catalog, center = tuned
    assert center.lot is not None and center.lot.max() > 0
    grid = grid_for(cfg).with_center(center).bind(catalog)
    middle = int(np.flatnonzero(grid.values == 0.0)[0])
    ids = catalog.sku_id
    teacher = make_policy("forecast-s-S", catalog, cfg.sim,
                          {"z": center.lookup(ids, np.zeros(len(catalog))), "lot": center.lots(ids)})
    env = make_env(catalog, cfg.sim)
    obs = env.reset(seed=3, episode=0)
    for _ in range(DAYS):
        expected = teacher.orders(obs)
        got, clipped = grid.orders_for(np.full(len(catalog), middle), obs.raw)
        np.testing.assert_array_equal(got, expected)
        assert not clipped.any()
        table = grid.unit_table(obs.raw, slice(0, len(catalog)))
        ordering = table > 0  # every action that orders at all orders its level + the lot
        lots = np.broadcast_to(center.lots(ids)[:, None], table.shape)
        assert np.all(table[ordering] >= lots[ordering])
        obs = env.step(expected).obs
    demos = record(make_env(catalog, cfg.sim), teacher, grid, seed=1, episodes=1, max_skus=len(catalog))
    assert demos.exact == 1.0 and np.all(demos.labels == middle)


def test_the_lots_round_trip_and_a_bad_lot_is_one_clear_line(tmp_path: Path) -> None:
    center = GridCenter(np.array([3, 8], np.int64), np.array([0.5, 1.0]), -2.0, np.array([0.0, 12.0]))
    save_center(tmp_path, center)
    back = load_center(tmp_path)
    assert back is not None and back.lot is not None
    np.testing.assert_array_equal(back.lot, center.lot)
    np.testing.assert_array_equal(back.lots(np.array([8, 3, 99])), [12.0, 0.0, 0.0])
    plain = GridCenter(np.array([3], np.int64), np.array([0.5]), 0.0)
    np.testing.assert_array_equal(plain.lots(np.array([3, 4])), 0.0)
    merged = plain.merged(GridCenter(np.array([3, 5], np.int64), np.array([9.0, 9.0]), 0.0, np.array([4.0, 6.0])))
    np.testing.assert_array_equal(merged.lot, [0.0, 6.0])
    for lot, message in [(np.array([1.5, 0.0]), "whole units"), (np.array([-1.0, 0.0]), "whole units"),
                         (np.array([1.0]), "float64")]:
        tensors = {"sku_id": np.array([1, 2], np.int64), "z": np.zeros(2), "objective": np.zeros(1), "lot": lot}
        (tmp_path / CENTER_FILE).write_bytes(save(tensors))
        with pytest.raises(UserError, match=message) as err:
            load_center(tmp_path)
        assert len(str(err.value).splitlines()) == 1


def test_a_run_resumed_with_another_centre_policy_is_refused(tmp_path: Path) -> None:
    catalog = load_catalog(config().catalog)
    ids = np.sort(catalog.sku_id.astype(np.int64))
    save_center(tmp_path, GridCenter(ids, np.zeros(ids.size), 0.0))  # a forecast-base-stock centre
    with pytest.raises(UserError, match=r"policy\.actions\.center_policy: forecast-s-S, but .* forecast-base-stock"):
        ensure_center(config(), tmp_path, catalog)
    plain = config("policy.actions.center_policy=forecast-base-stock")
    assert ensure_center(plain, tmp_path, catalog).lot is None


def test_forecast_s_s_is_a_baseline_only_where_some_sku_has_an_order_cost() -> None:
    from skurl.policy.baselines import applies

    with_costs = load_catalog(config().catalog)
    without = load_catalog(config("catalog.synthetic.order_cost_share=0").catalog)
    assert applies("forecast-s-S", with_costs) and not applies("forecast-s-S", without)
    assert applies("forecast-base-stock", without)
