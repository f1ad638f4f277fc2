"""VectorEnv: bookkeeping identities, seeds, bounds, errors, isolation, totals, schema."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from numba import njit

from skurl.catalog.schema import Catalog
from skurl.config import SimConfig
from skurl.errors import CatalogError, UserError
from skurl.sim import VectorEnv
from skurl.sim.api import ActionError, Env, EnvStateError
from skurl.sim.sku_ops import write_features
from skurl.sim.state import METRIC_FIELDS
from skurl.sim.testing import order_up_to, random_catalog


def _policy(obs, catalog: Catalog) -> np.ndarray:
    raw = obs.raw
    out = np.zeros(len(catalog))
    order_up_to(raw.on_hand, raw.pipeline, raw.backlog, raw.forecast,
                catalog.lead_time.astype(np.float64), out)
    return out


def _run(catalog: Catalog, cfg: SimConfig, seed: int = 0, episode: int = 0) -> list[dict]:
    """Per day: the observation's raw state (copied) and the day's metrics and reward."""
    env = VectorEnv(catalog, cfg)
    obs = env.reset(seed, episode)
    days = []
    for _ in range(cfg.days):
        before = {"on_hand": obs.raw.on_hand.copy(), "pipeline": obs.raw.pipeline.copy(),
                  "backlog": obs.raw.backlog.copy(), "features": obs.features.copy()}
        res = env.step(_policy(obs, catalog))
        m = {name: getattr(res.metrics, name).copy() for name in METRIC_FIELDS}
        days.append({"before": before, "metrics": m, "reward": res.reward.copy()})
        obs = res.obs
    days.append({"before": {"on_hand": obs.raw.on_hand.copy(), "pipeline": obs.raw.pipeline.copy(),
                            "backlog": obs.raw.backlog.copy(), "features": obs.features.copy()}})
    return days


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return random_catalog(40, seed=11)


@pytest.mark.parametrize("backorders", [False, True])
@pytest.mark.parametrize("issuing", ["fifo", "lifo"])
def test_stock_backlog_and_pipeline_bookkeeping(catalog: Catalog, backorders: bool, issuing: str) -> None:
    cfg = SimConfig(days=30, backorders=backorders, issuing=issuing, threads=1)
    days = _run(catalog, cfg)
    groups = catalog.group
    for t in range(cfg.days):
        b, m, after = days[t]["before"], days[t]["metrics"], days[t + 1]["before"]
        # stock: on hand after today's arrivals - sales - waste = end of day
        assert np.array_equal(b["on_hand"] - m["sales"] - m["waste"], m["on_hand_end"])
        if t > 0:
            prev = days[t - 1]["metrics"]
            assert np.array_equal(prev["on_hand_end"] + m["arrived"], b["on_hand"])
        # pipeline: what was due plus what was ordered = what arrived tomorrow + still due
        arrived_next = after["on_hand"] - m["on_hand_end"]
        assert np.array_equal(b["pipeline"].sum(1) + m["ordered"],
                              arrived_next + after["pipeline"].sum(1))
        # demand: every unit owed is sold from own stock, served by a substitute, lost or
        # (backorders) still owed: backlog + demand = own sales + substituted + lost/backlog
        if backorders:
            own = b["backlog"] + m["demand"] - m["substituted"] - after["backlog"]
            # today's unmet demand joins the backlog, older backlog is served first
            backlog_served = m["lost"] - (after["backlog"] - b["backlog"])
            assert (backlog_served >= 0).all() and (backlog_served <= b["backlog"]).all()
        else:
            own = m["demand"] - m["substituted"] - m["lost"]
            assert not after["backlog"].any()
        served_for_others = m["sales"] - own
        assert (own >= 0).all() and (served_for_others >= 0).all()
        for g in np.unique(groups[groups >= 0]):
            members = groups == g
            assert served_for_others[members].sum() == m["substituted"][members].sum()
        assert not served_for_others[groups < 0].any() and not m["substituted"][groups < 0].any()
    # the identities above were exercised, not vacuous
    total = {k: sum(d["metrics"][k].sum() for d in days[:-1]) for k in ("substituted", "waste", "lost")}
    assert total["substituted"] > 0 and total["waste"] > 0 and total["lost"] > 0
    assert not backorders or any(d["before"]["backlog"].any() for d in days)


def test_costs_and_reward_follow_the_metrics(catalog: Catalog) -> None:
    for reward_mode in ("profit", "cost"):
        cfg = SimConfig(days=12, reward=reward_mode, threads=1)
        for day in _run(catalog, cfg)[:-1]:
            m = day["metrics"]
            assert np.array_equal(m["holding_cost"], catalog.holding_cost.astype(np.float64) * m["on_hand_end"])
            assert np.array_equal(m["purchase_cost"], catalog.unit_cost.astype(np.float64) * m["ordered"])
            assert np.array_equal(m["order_cost"], np.where(m["ordered"] > 0, catalog.order_cost.astype(np.float64), 0))
            assert np.array_equal(m["revenue"], catalog.price.astype(np.float64) * m["sales"])
            cost = m["holding_cost"] + m["penalty_cost"] + m["purchase_cost"] + m["order_cost"] + m["waste_cost"]
            want = -cost if reward_mode == "cost" else m["revenue"] - cost
            assert np.array_equal(day["reward"], want.astype(np.float32))


def test_same_seed_same_trajectory_other_seed_or_episode_differs(catalog: Catalog) -> None:
    cfg = SimConfig(days=8, threads=1)
    a, b = _run(catalog, cfg, seed=3), _run(catalog, cfg, seed=3)
    for x, y in zip(a[:-1], b[:-1], strict=True):
        assert np.array_equal(x["before"]["features"], y["before"]["features"])
        assert np.array_equal(x["reward"], y["reward"])
    for other in (_run(catalog, cfg, seed=4), _run(catalog, cfg, seed=3, episode=1)):
        demand = np.array([d["metrics"]["demand"] for d in other[:-1]])
        assert not np.array_equal(demand, np.array([d["metrics"]["demand"] for d in a[:-1]]))


def test_values_stay_in_bounds(catalog: Catalog) -> None:
    cfg = SimConfig(days=25, backorders=True, threads=1)
    env = VectorEnv(catalog, cfg)
    obs = env.reset(5)
    sl = env.schema.slices()
    for _ in range(cfg.days):
        f = obs.features
        assert np.isfinite(f).all()
        assert (obs.raw.on_hand >= 0).all() and (obs.raw.pipeline >= 0).all() and (obs.raw.backlog >= 0).all()
        assert (f[:, sl["day_of_week"]].sum(1) == 1).all()
        assert np.isin(f[:, sl["promo_today"]], (0, 1)).all() and np.isin(f[:, sl["promo_ahead"]], (0, 1)).all()
        assert (obs.raw.forecast >= 0).all()
        res = env.step(_policy(obs, catalog) * 1.5)
        for name in ("demand", "sales", "lost", "waste", "ordered", "arrived", "on_hand_end"):
            assert (getattr(res.metrics, name) >= 0).all()
        obs = res.obs
    # perishables expire: nothing sits in stock beyond its shelf life
    life = catalog.shelf_life
    expiring = obs.features[:, sl["expiring"]]
    assert not expiring[life[:, None] <= np.arange(expiring.shape[1])[None, :]].any()


def test_schema_is_available_before_reset_and_sizes_the_features(catalog: Catalog) -> None:
    env = VectorEnv(catalog, SimConfig(days=3, review_days=2))
    lay = env.layout
    assert lay.expiring == catalog.max_shelf_life
    assert lay.pipeline == catalog.max_lead_time + catalog.max_delay
    assert lay.horizon == lay.pipeline + 2
    assert env.schema.dim == 26 + lay.expiring + lay.pipeline == len(env.schema.names())
    assert [name for name, _ in env.schema.fields][:4] == ["on_hand", "expiring", "backlog", "pipeline"]
    obs = env.reset(0)
    assert obs.features.shape == (len(catalog), env.schema.dim) and obs.features.dtype == np.float32
    assert obs.raw.forecast.shape == (len(catalog), lay.horizon)
    assert isinstance(env, Env)
    info = env.info()
    assert info["num_skus"] == len(catalog) and info["obs_dim"] == env.schema.dim and info["day"] == 0


def test_raw_state_views_are_read_only(catalog: Catalog) -> None:
    obs = VectorEnv(catalog, SimConfig(days=2)).reset(0)
    with pytest.raises(ValueError):
        obs.raw.on_hand[0] = 5
    with pytest.raises(ValueError):  # a step rewrites only the columns that can change
        obs.features[0, 0] = 5


@njit
def _full_rows(p, s, feats: np.ndarray, npipe: np.int64, day: np.int64) -> None:
    for i in range(feats.shape[0]):
        if not s.failed[i]:
            write_features(p.par, s.st, s.stock, s.forecast, feats, npipe, i, day, True)


@pytest.mark.parametrize("widen", [(0, 0), (5, 7)])
def test_daily_feature_updates_equal_full_rewrites(widen: tuple[int, int]) -> None:
    """A step writes only the columns that can change; every day the whole matrix must
    equal a from-scratch write of every row, also with columns wider than the SKUs use (a
    shard laid out for its whole catalog)."""
    cat = random_catalog(300, seed=5, max_lead=4, max_life=9)
    own = (int(cat.max_shelf_life), int(cat.max_lead_time + cat.max_delay))
    env = VectorEnv(cat, SimConfig(days=40), min_widths=(own[0] + widen[0], own[1] + widen[1]))
    obs = env.reset(3)
    rng = np.random.default_rng(0)
    for day in range(1, 41):
        obs = env.step(rng.poisson(3.0, len(cat)).astype(np.float64)).obs
        full = np.zeros_like(obs.features)
        _full_rows(env._params, env._state, full, np.int64(env.layout.pipeline), np.int64(day))
        np.testing.assert_array_equal(obs.features, full)


@pytest.mark.parametrize(("orders", "fragment"), [
    (np.zeros((40, 1)), "shape"),
    (np.zeros(39), "shape"),
    (np.array(["1"] * 40), "dtype"),
    (np.full(40, np.nan), "SKU"),
    (np.r_[np.zeros(39), -1.0], "SKU"),
    (np.r_[np.zeros(39), np.inf], "SKU"),
    (np.r_[np.zeros(39), 2e9], "SKU"),
])
def test_bad_orders_raise_action_error(catalog: Catalog, orders: np.ndarray, fragment: str) -> None:
    env = VectorEnv(catalog, SimConfig(days=2))
    env.reset(0)
    with pytest.raises(ActionError, match=fragment) as err:
        env.step(orders)
    assert "\n" not in str(err.value) and isinstance(err.value, UserError)
    env.step(np.zeros(40))  # the env is untouched by a rejected step


def test_integer_orders_and_rounding_half_up(catalog: Catalog) -> None:
    env = VectorEnv(catalog, SimConfig(days=2, threads=1))
    env.reset(0)
    res = env.step(np.r_[np.full(20, 2.5), np.full(20, 2.49)])
    assert np.array_equal(res.metrics.ordered, np.r_[np.full(20, 3.0), np.full(20, 2.0)])
    env.step(np.arange(40, dtype=np.int32))


def test_step_before_reset_and_after_done_are_errors(catalog: Catalog) -> None:
    env = VectorEnv(catalog, SimConfig(days=1))
    with pytest.raises(EnvStateError, match="reset"):
        env.step(np.zeros(40))
    env.reset(0)
    assert env.step(np.zeros(40)).done
    with pytest.raises(EnvStateError, match="ended"):
        env.step(np.zeros(40))
    with pytest.raises(EnvStateError, match="seed"):
        env.reset(-1)


def test_totals_accumulate_the_daily_metrics(catalog: Catalog) -> None:
    env = VectorEnv(catalog, SimConfig(days=10, threads=1))
    obs = env.reset(1)
    sums = {name: np.zeros(len(catalog)) for name in METRIC_FIELDS}
    rewards = np.zeros(len(catalog))
    for day in range(10):
        if day == 4:
            env.reset_totals()
            sums = {name: np.zeros(len(catalog)) for name in METRIC_FIELDS}
            rewards[:] = 0
        res = env.step(_policy(obs, catalog))
        for name in METRIC_FIELDS:
            sums[name] += getattr(res.metrics, name)
        rewards += res.reward
        obs = res.obs
    totals = env.totals()
    for name in METRIC_FIELDS:
        assert np.array_equal(totals[name], sums[name]), name
    assert np.allclose(totals["reward"], rewards, rtol=1e-5, atol=1e-3)


def test_metric_sums_over_skus_in_one_pass_equal_the_column_sums(catalog: Catalog) -> None:
    """VectorEnv's metrics sum as one row-major block (what a lean gRPC reply carries);
    DayMetrics of any other backend sum field by field; both give the same totals."""
    env = VectorEnv(catalog, SimConfig(days=5, threads=1))
    obs = env.reset(2)
    for _ in range(3):
        res = env.step(_policy(obs, catalog))
        obs = res.obs
    m = res.metrics
    assert m.block is not None
    by_column = np.array([getattr(m, name).sum(dtype=np.float64) for name in METRIC_FIELDS])
    assert by_column.any()
    np.testing.assert_allclose(m.sums(), by_column, rtol=1e-12)
    copied = dataclasses.replace(m)  # a plain DayMetrics: no block
    assert copied.block is None
    np.testing.assert_allclose(copied.sums(), by_column, rtol=1e-12)


def test_bad_structure_is_a_catalog_error(catalog: Catalog) -> None:
    bad = dataclasses.replace(catalog, lead_time=np.r_[0, catalog.lead_time[1:]])
    with pytest.raises(CatalogError, match="lead_time"):
        VectorEnv(bad, SimConfig())


def test_runtime_failures_are_isolated_and_reported() -> None:
    base = random_catalog(6, seed=3)
    # SKU 0: NaN demand (an unvalidated catalog); SKU 1: a demand mean that grows past any
    # representable count (1e7/day x season 100 x promo 51 x exp(0.05 t)).
    nan_mean = base.demand_mean.copy()
    nan_mean[0] = np.nan
    bad = dataclasses.replace(base, demand_mean=nan_mean)
    bad.demand_mean[1], bad.trend[1], bad.season[1] = 1e7, 0.05, 100.0
    bad.promo_period[1], bad.promo_length[1], bad.promo_uplift[1] = 1, 1, 50.0
    bad.group[:2] = -1
    good_rows = np.arange(2, 6)
    cfg = SimConfig(days=230, threads=1)
    env = VectorEnv(bad, cfg)
    alone = VectorEnv(bad.subset(good_rows), cfg)
    obs = env.reset(9)
    alone.reset(9)
    assert obs.features[0].sum() == 0 and env.info()["failed_sku_ids"] == [int(bad.sku_id[0])]
    for _ in range(cfg.days):
        res = env.step(np.full(6, 5.0))
        res_alone = alone.step(np.full(4, 5.0))
        assert np.array_equal(res.reward[good_rows], res_alone.reward)
        assert res.reward[0] == 0.0 and res.metrics.demand[0] == 0.0
    info = env.info()
    assert info["failed_sku_ids"] == [int(bad.sku_id[0]), int(bad.sku_id[1])]
    assert res.failed[:2].all() and not res.failed[2:].any()
    assert res.reward[1] == 0.0 and not res.obs.features[1].any()
    assert set(info["failed_reasons"]) == {"parameter not finite or out of range",
                                          "demand mean not finite or too large"}
