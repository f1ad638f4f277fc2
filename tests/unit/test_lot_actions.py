"""The joint (lot factor, offset) cover grid of policy.actions.lot_factors: its decoding is a
scalar reference's and each block is forecast-s-S with that block's lot; [] is today's grid;
bad settings are one line naming the key."""

from __future__ import annotations

import math

import numpy as np
import pytest

from skurl.catalog import Catalog, load_catalog
from skurl.cli import main
from skurl.collect.evaluate import make_env
from skurl.config import ActionsConfig, Config, load_config
from skurl.errors import ConfigError
from skurl.policy.actions import ActionGrid
from skurl.policy.baselines import make_policy, protection_moments
from skurl.policy.grid_center import GridCenter
from skurl.policy.learned import grid_for
from skurl.sim.api import RawState

DAYS = 10
FACTORS = [0.0, 0.5, 1.0, 2.0]
SETTINGS = ["catalog.skus=90", f"sim.days={DAYS}", "policy.actions.kind=cover", "policy.actions.z_center=tuned",
            "policy.actions.n=7", "policy.actions.z_min=-1.5", "policy.actions.z_max=1.5",
            "policy.actions.center_policy=forecast-s-S", "catalog.synthetic.order_cost_share=0.5"]


def config(*extra: str) -> Config:
    return load_config(None, [*SETTINGS, *extra])


def center_of(catalog: Catalog) -> GridCenter:
    """A centre with varied factors and odd lots (so half lots round), no tuning needed."""
    ids = np.sort(catalog.sku_id)
    z = np.linspace(-0.7, 1.3, ids.size)
    lot = (np.arange(ids.size) * 5 % 13).astype(np.float64)
    return GridCenter(ids, z, 0.0, lot)


def bound(cfg: Config, catalog: Catalog) -> ActionGrid:
    return grid_for(cfg).with_center(center_of(catalog)).bind(catalog)


def states(cfg: Config, catalog: Catalog, days: int = DAYS) -> list[RawState]:
    """Raw states of an episode that forecast-s-S drives (with lots: positions above and below)."""
    center = center_of(catalog)
    ids = catalog.sku_id
    policy = make_policy("forecast-s-S", catalog, cfg.sim,
                         {"z": center.lookup(ids, np.zeros(len(catalog))), "lot": center.lots(ids)})
    env = make_env(catalog, cfg.sim)
    obs = env.reset(seed=4, episode=0)
    out = []
    for _ in range(days):
        out.append(obs.raw)
        obs = env.step(policy.orders(obs)).obs
    return out


def reference_units(grid: ActionGrid, raw: RawState, i: int, k: int) -> float:
    """Action k's order for SKU row i, one scalar at a time: the block's factor f and offset,
    up to ceil(mean + (z0 + offset) sigma), plus round(f x lot) where that orders at all."""
    assert grid.cover is not None and grid.cover.lot is not None and grid.lot_scale is not None
    c = grid.cover
    mean, var = protection_moments(raw.forecast[i:i + 1], c.cover_days[i:i + 1], c.dist[i:i + 1],
                                   c.dispersion[i:i + 1])
    z = float(grid.values[k]) + float(c.z0[i])
    level = max(0.0, math.ceil(float(mean[0]) + z * math.sqrt(float(var[0])) - 1e-9))
    position = float(raw.on_hand[i]) + float(raw.pipeline[i].sum()) - float(raw.backlog[i])
    units = max(0.0, level - position)
    if units > 0:
        units += math.floor(float(grid.lot_scale[k]) * float(c.lot[i]) + 0.5)
    return units


def test_joint_grid_decodes_as_the_scalar_reference() -> None:
    cfg = config(f"policy.actions.lot_factors={FACTORS}")
    catalog = load_catalog(cfg.catalog)
    grid = bound(cfg, catalog)
    assert grid.n == 7 * len(FACTORS)
    np.testing.assert_array_equal(grid.lot_scale, np.repeat(FACTORS, 7))
    rng = np.random.default_rng(0)
    for raw in states(cfg, catalog, 6):
        table = grid.unit_table(raw, slice(0, len(catalog)))
        for i in rng.choice(len(catalog), 12, replace=False):
            for k in range(grid.n):
                assert table[i, k] == reference_units(grid, raw, int(i), k), (i, k)
        idx = rng.integers(0, grid.n, len(catalog))
        got, clipped = grid.orders_for(idx, raw)
        np.testing.assert_array_equal(got, table[np.arange(len(catalog)), idx])
        assert not clipped.any()


def test_each_block_at_offset_zero_is_forecast_s_s_with_that_blocks_lot() -> None:
    cfg = config(f"policy.actions.lot_factors={FACTORS}")
    catalog = load_catalog(cfg.catalog)
    grid = bound(cfg, catalog)
    center = center_of(catalog)
    ids = catalog.sku_id
    z0, lot = center.lookup(ids, np.zeros(len(catalog))), center.lots(ids)
    env = make_env(catalog, cfg.sim)
    obs = env.reset(seed=2, episode=0)
    saw_lots = set()
    for _ in range(DAYS):
        for b, f in enumerate(FACTORS):
            k = b * 7 + 3  # offset 0 of block b
            assert grid.values[k] == 0.0 and grid.lot_scale is not None and grid.lot_scale[k] == f
            want = make_policy("forecast-s-S", catalog, cfg.sim, {"z": z0, "lot": np.floor(f * lot + 0.5)})
            got = grid.orders_for(np.full(len(catalog), k), obs.raw)[0]
            np.testing.assert_array_equal(got, want.orders(obs))
            saw_lots.add(float(got.sum()))
        obs = env.step(grid.orders_for(np.full(len(catalog), 3 + 7 * (obs.raw.day % 4)), obs.raw)[0]).obs
    assert len(saw_lots) > len(FACTORS)  # the blocks order different amounts


def test_empty_list_is_todays_grid_and_factor_one_alone_orders_the_same() -> None:
    cfg = config()
    assert cfg.policy.actions.lot_factors == ()
    catalog = load_catalog(cfg.catalog)
    today = bound(cfg, catalog)
    assert today.lot_scale is None and today.n == 7
    one = bound(config("policy.actions.lot_factors=[1]"), catalog)
    assert one.lot_scale is not None and one.n == 7
    assert one.neutral_index == today.neutral_index == 3
    for raw in states(cfg, catalog, 5):
        np.testing.assert_array_equal(one.unit_table(raw, slice(0, len(catalog))),
                                      today.unit_table(raw, slice(0, len(catalog))))


def test_neutral_action_is_factor_one_offset_zero_and_skip_stays_once() -> None:
    cfg = config("policy.actions.lot_factors=[2, 0, 1]", "policy.actions.skip=true", "policy.actions.n=8")
    catalog = load_catalog(cfg.catalog)
    grid = bound(cfg, catalog)
    assert grid.n == 1 + 3 * 7 and grid.lot_scale is not None
    k = grid.neutral_index
    assert k is not None and grid.values[k] == 0.0 and grid.lot_scale[k] == 1.0
    assert np.isneginf(grid.values[0]) and not np.isneginf(grid.values[1:]).any()
    for raw in states(cfg, catalog, 3):
        assert not grid.unit_table(raw, slice(0, len(catalog)))[:, 0].any()


@pytest.mark.parametrize(("sets", "message"), [
    (["policy.actions.lot_factors=[1, -0.5]"], "numbers >= 0"),
    (["policy.actions.lot_factors=[1, 1]"], "distinct"),
    (["policy.actions.lot_factors=[0, 1, 2, 3, 4, 5, 6, 7, 8]"], "at most 8"),
    (["policy.actions.lot_factors=[0, 1]", "policy.actions.center_policy=forecast-base-stock"], "center_policy"),
])
def test_bad_lot_factors_are_one_line_naming_the_key(capsys: pytest.CaptureFixture[str], sets: list[str],
                                                      message: str) -> None:
    args = ["config", "show"]
    for s in [*SETTINGS, *sets]:
        args += ["--set", s]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "policy.actions.lot_factors" in err and message in err and len(err.splitlines()) == 1, err
    with pytest.raises(ConfigError, match=r"policy\.actions\.lot_factors"):
        ActionsConfig(kind="multiplier", lot_factors=[0.0, 1.0])  # type: ignore[arg-type]


def test_a_centre_without_lots_is_refused_on_a_joint_grid() -> None:
    cfg = config("policy.actions.lot_factors=[0, 1]")
    catalog = load_catalog(cfg.catalog)
    ids = np.sort(catalog.sku_id)
    plain = GridCenter(ids, np.zeros(ids.size), 0.0)  # a forecast-base-stock centre
    with pytest.raises(ConfigError, match=r"policy\.actions\.lot_factors"):
        grid_for(cfg).with_center(plain).bind(catalog)
