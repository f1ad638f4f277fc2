"""Baseline policies on hand-made states: orders for a given inventory position, caps,
review days, forecast levels, untuned defaults and parameter checks."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from skurl.catalog.uniform import uniform_catalog
from skurl.config import CatalogConfig, DemandConfig, SimConfig
from skurl.errors import UserError
from skurl.policy.api import Policy
from skurl.policy.baselines import (
    POLICY_NAMES,
    default_params,
    inventory_position,
    make_policy,
    norm_ppf,
    summarize,
)
from skurl.policy.tuning import initial_knobs, is_uniform, knob_params
from skurl.sim.api import Obs, ObsSchema, RawState


def make_obs(on_hand, pipeline, backlog=None, forecast=None, day=0) -> Obs:
    on_hand = np.asarray(on_hand, dtype=np.int64)
    n = on_hand.shape[0]
    pipe = np.asarray(pipeline, dtype=np.int64).reshape(n, -1)
    back = np.zeros(n, np.int64) if backlog is None else np.asarray(backlog, dtype=np.int64)
    fc = np.ones((n, 4), np.float32) if forecast is None else np.asarray(forecast, dtype=np.float32)
    raw = RawState(on_hand=on_hand, pipeline=pipe, backlog=back, forecast=fc, day=day)
    return Obs(features=np.zeros((n, 0), np.float32), raw=raw, schema=ObsSchema(()))


def catalog(n=4, lead=2, mean=5.0, dist="poisson", penalty=9.0, **kw):
    cfg = CatalogConfig(kind="uniform", skus=n, lead_time=lead, lost_sale_cost=penalty,
                        demand=DemandConfig(dist=dist, mean=mean), **kw)
    return uniform_catalog(cfg)


COST = SimConfig(reward="cost")


def test_inventory_position_counts_pipeline_and_backlog():
    obs = make_obs([3, 0, 10], [[1, 2], [0, 0], [0, 5]], backlog=[0, 4, 0])
    assert inventory_position(obs.raw).tolist() == [6.0, -4.0, 15.0]


def test_inventory_position_on_strided_state_columns_equals_numpy_sums():
    """The numba pass (policy/protection.position) on the env's layout (on hand,
    pipeline and backlog as strided views of one int64 state block, P = 0..7) and on int32
    arrays, against the float64 numpy sums; float arrays take the numpy form."""
    from skurl.policy import protection

    rng = np.random.default_rng(11)
    for p in range(8):
        st = rng.integers(0, 10**6, size=(501, 3 + p))
        raw = RawState(on_hand=st[:, 0], pipeline=st[:, 2:2 + p], backlog=st[:, 1],
                       forecast=np.ones((501, 1), np.float32), day=0)
        want = st[:, 0].astype(np.float64) + st[:, 2:2 + p].sum(axis=1, dtype=np.float64) - st[:, 1]
        got = inventory_position(raw)
        assert got.dtype == np.float64 and np.array_equal(got, want)
        parallel = protection._position_parallel(raw.on_hand, raw.pipeline, raw.backlog)  # rows >= 2^15
        assert np.array_equal(parallel, want)
    obs = make_obs([3, 0], [[1, 2], [0, 7]], backlog=[0, 4])
    small = RawState(obs.raw.on_hand.astype(np.int32), obs.raw.pipeline.astype(np.int32),
                     obs.raw.backlog.astype(np.int32), obs.raw.forecast, 0)
    floats = RawState(obs.raw.on_hand.astype(np.float64), obs.raw.pipeline.astype(np.float64),
                      obs.raw.backlog.astype(np.float64), obs.raw.forecast, 0)
    assert inventory_position(small).tolist() == inventory_position(floats).tolist() == [6.0, 3.0]


def test_base_stock_orders_up_to_level_and_never_negative():
    cat = catalog(n=4)
    pol = make_policy("base-stock", cat, COST, {"S": np.array([10.0, 10.0, 10.0, 0.0])})
    obs = make_obs([3, 12, 0, 0], [[2, 1], [0, 0], [0, 0], [0, 0]], backlog=[0, 0, 5, 0])
    # IP = 6, 12, -5, 0  ->  4, 0, 15 (covers the backlog), 0
    assert pol.orders(obs).tolist() == [4.0, 0.0, 15.0, 0.0]
    assert isinstance(pol, Policy)


def test_capped_base_stock_caps_each_order():
    cat = catalog(n=3)
    pol = make_policy("capped-base-stock", cat, COST, {"S": 10.0, "r": 3.0})
    obs = make_obs([0, 8, 12], [[0, 0], [1, 0], [0, 0]])
    assert pol.orders(obs).tolist() == [3.0, 1.0, 0.0]


def test_s_S_orders_only_at_or_below_reorder_point():
    cat = catalog(n=4)
    pol = make_policy("s-S", cat, COST, {"s": 5.0, "S": 12.0})
    obs = make_obs([6, 5, 1, 0], [[0, 0], [0, 0], [2, 0], [0, 0]], backlog=[0, 0, 0, 3])
    # IP = 6 (above s), 5 (= s), 3, -3
    assert pol.orders(obs).tolist() == [0.0, 7.0, 9.0, 15.0]


def test_constant_spreads_a_fractional_rate_exactly():
    cat = catalog(n=3)
    c = np.array([2.0, 2.5, 0.3])
    pol = make_policy("constant", cat, COST, {"c": c})
    total = sum(pol.orders(make_obs([0, 0, 0], [[0, 0]] * 3, day=t)) for t in range(100))
    assert total.tolist() == [200.0, 250.0, 30.0]
    one_day = pol.orders(make_obs([0, 0, 0], [[0, 0]] * 3, day=7))
    assert np.all(one_day == np.floor(one_day)) and np.all(one_day >= 0)


def test_review_days_order_only_on_review_days():
    cat = catalog(n=2)
    pol = make_policy("base-stock", cat, SimConfig(review_days=3), {"S": 20.0})
    orders = [pol.orders(make_obs([5, 5], [[0, 0], [0, 0]], day=t)).tolist() for t in range(4)]
    assert orders == [[15.0, 15.0], [0.0, 0.0], [0.0, 0.0], [15.0, 15.0]]


def test_forecast_base_stock_level_by_distribution_and_lead_time():
    cat = catalog(n=3, lead=2, dist="negbin")
    cat.demand_dist[:] = [0, 1, 2]
    cat.dispersion[:] = 4.0
    cat.lead_time[:] = [1, 2, 3]
    fc = np.array([[2.0, 4.0, 6.0, 8.0]] * 3)
    pol = make_policy("forecast-base-stock", cat, COST, {"z": 1.0})
    obs = make_obs([0, 0, 0], [[0, 0, 0]] * 3, forecast=fc)
    # cover days L + 1 = 2, 3, 4 from today
    m = [6.0, 12.0, 20.0]
    var = [6.0, 12.0 + (4 + 16 + 36), 20.0 + (4 + 16 + 36 + 64) / 4.0]
    expected = [math.ceil(mi + math.sqrt(vi)) for mi, vi in zip(m, var, strict=True)]
    assert pol.orders(obs).tolist() == expected
    # stock on hand and in the pipeline is netted out
    obs2 = make_obs([3, 0, 0], [[0, 2, 0], [0, 0, 0], [0, 0, 0]], forecast=fc)
    assert pol.orders(obs2)[0] == expected[0] - 5


def test_default_base_stock_is_the_newsvendor_level():
    cat = catalog(n=2, lead=1, penalty=9.0)
    # ratio 9 / (9 + 1) = 0.9; protection L + 1 = 2 days: mean 10, sd sqrt(10)
    level = math.ceil(10 + norm.ppf(0.9) * math.sqrt(10))
    assert default_params("base-stock", cat, COST)["S"].tolist() == [level, level]
    profit = SimConfig(reward="profit")
    cat_priced = catalog(n=1, lead=1, penalty=0.0, price=10.0, unit_cost=1.0)
    z = norm.ppf(9 / 10)  # underage = margin 9, overage = holding 1
    assert default_params("base-stock", cat_priced, profit)["S"][0] == math.ceil(10 + z * math.sqrt(10))


@pytest.mark.parametrize("name", [n for n in POLICY_NAMES if "echelon" not in n and "installation" not in n])
def test_defaults_are_finite_nonnegative_and_match_the_tuning_knobs(name):  # network policies: test_network_baselines
    cat = catalog(n=3, order_cost=20.0)
    params = default_params(name, cat, COST)
    for v in params.values():
        assert v.shape == (3,) and np.all(np.isfinite(v)) and np.all(v >= -10)
    via_knobs = knob_params(name, cat, COST, initial_knobs(name, cat, COST))
    assert via_knobs.keys() == params.keys()
    for k in params:
        np.testing.assert_allclose(via_knobs[k], params[k])
    pol = make_policy(name, cat, COST)
    orders = pol.orders(make_obs([0, 50, 3], [[0, 0], [0, 0], [1, 1]], backlog=[2, 0, 0]))
    assert orders.shape == (3,) and np.all(orders >= 0) and np.all(orders == np.floor(orders))


def test_s_S_default_uses_eoq():
    cat = catalog(n=1, lead=1, order_cost=40.0)
    p = default_params("s-S", cat, COST)
    assert p["S"][0] - p["s"][0] == round(math.sqrt(2 * 40 * 5 / 1))


def test_bad_names_and_params_are_clear_errors():
    cat = catalog(n=2)
    with pytest.raises(UserError, match=r"unknown policy 'optimal' .*base-stock, capped-base-stock"):
        make_policy("optimal", cat, COST)
    with pytest.raises(ValueError, match="shape"):
        make_policy("base-stock", cat, COST, {"S": np.ones(3)})
    with pytest.raises(ValueError, match="not finite"):
        make_policy("base-stock", cat, COST, {"S": np.array([1.0, np.nan])})


def test_norm_ppf_matches_scipy():
    p = np.concatenate([np.linspace(1e-6, 1 - 1e-6, 20_001), [0.02425, 0.5, 0.97575]])
    np.testing.assert_allclose(norm_ppf(p), norm.ppf(p), atol=1e-8)


def test_summarize_and_is_uniform():
    assert summarize(np.full(5, 3.0)) == 3.0
    s = summarize(np.arange(11.0))
    assert s["min"] == 0.0 and s["p50"] == 5.0 and s["max"] == 10.0
    cat = catalog(n=5)
    assert is_uniform(cat)
    cat.lead_time[3] = 4
    assert not is_uniform(cat)


def test_protection_moments_equal_the_day_by_day_sums_to_the_bit():
    """The numba pass (policy/protection.py) against cumulative sums over the days, float32
    and float64 forecasts, every distribution, cover lengths 1..H."""
    from skurl.policy import protection
    from skurl.policy.baselines import daily_variance, protection_moments

    rng = np.random.default_rng(5)
    n, h = 3000, 17
    for dtype in (np.float32, np.float64):
        fc = (rng.gamma(0.5, 3.0, size=(n, h)) * (rng.random((n, h)) < 0.9)).astype(dtype)
        cover = rng.integers(1, h + 1, n)
        dist = rng.integers(0, 3, n).astype(np.int8)
        size = rng.uniform(0.01, 50.0, n)
        mean, var = protection_moments(fc, cover, dist, size)
        last = (cover - 1)[:, None]
        f64 = fc.astype(np.float64)
        want_mean = np.take_along_axis(np.cumsum(f64, axis=1), last, axis=1)[:, 0]
        days_var = daily_variance(f64, dist[:, None], size[:, None])
        want_var = np.take_along_axis(np.cumsum(days_var, axis=1), last, axis=1)[:, 0]
        assert np.array_equal(mean, want_mean) and np.array_equal(var, want_var)
        par_mean, par_var = protection._moments_parallel(fc, cover, dist, size)  # rows >= 2^15
        assert np.array_equal(par_mean, want_mean) and np.array_equal(par_var, want_var)
    with pytest.raises(ValueError, match="policy needs 18"):
        protection_moments(fc, np.full(n, h + 1), dist, size)
