"""The exact DP of benchmarks/embedded_dp.py on tiny instances (docs/headroom.md): its value
is the simulated mean of its own policy in skurl's VectorEnv, it matches the average cost
of Zipkin's instance by relative value iteration, and no base-stock level beats it."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import embedded_dp as dp
from embedded_grid import grid_levels, joint_grid
from embedded_policy import TablePolicy
from lost_sales_optimal import backorder_level, build_model, relative_value_iteration

from skurl.catalog import load_catalog
from skurl.config import load_config
from skurl.sim.episode import make_env, run_episode, sku_cost
from skurl.sim.state import make_params

# Two SKU types with every part of the model: a perishable (shelf life 2, lead 1) with a
# promotion, a weekly season and a trend, and a lead-2 SKU with a fixed order cost and
# negative-binomial demand.
TYPES = [
    {"shelf_life": 2, "lead_time": 1, "promo_period": 9, "promo_length": 2, "promo_offset": 3,
     "promo_uplift": 1.5, "trend": 0.004, "waste_cost": 0.4, "order_cost": 0.0, "demand_dist": 0},
    {"shelf_life": 0, "lead_time": 2, "promo_period": 0, "promo_length": 0, "promo_offset": 0,
     "promo_uplift": 0.0, "trend": 0.0, "waste_cost": 0.0, "order_cost": 3.0, "demand_dist": 2},
]


def catalog_of(copies: int, sets: list[str]):
    """`copies` rows of each of TYPES (row k is type k % 2), distinct sku ids."""
    cfg = load_config(None, ["catalog.kind=uniform", f"catalog.skus={2 * copies}", "catalog.demand.mean=1.2",
                             "catalog.demand.dispersion=2.0", "catalog.holding_cost=0.1",
                             "catalog.lost_sale_cost=1.0", "catalog.unit_cost=1.0", "catalog.price=2.0",
                             "sim.reward=profit", *sets])
    cat = load_catalog(cfg.catalog)
    for k, spec in enumerate(TYPES):
        for name, value in spec.items():
            getattr(cat, name)[k::2] = value
    cat.season[:] = np.array([0.8, 0.9, 1.0, 1.0, 1.1, 1.2, 1.0], np.float32)
    return cat.validate(), cfg


def test_dp_value_is_the_simulated_mean_of_its_policy() -> None:
    days, copies = 30, 1500
    cat, cfg = catalog_of(copies, [])
    par = make_params(cat, False).par
    models, tables, v0 = [], [], []
    for i in range(2):
        model = dp.build_model(par, i, days)
        v, table = dp.solve(model, days, terminal=np.zeros(model.states.shape[0]))
        models.append(model)
        tables.append(table)
        v0.append(v[dp.initial_state(model)])
    env = make_env(cat, dataclasses.replace(cfg.sim, days=days))
    policy = TablePolicy(env, models * copies, tables * copies)
    totals, failed = run_episode(env, policy, seed=3, episode=0, days=days, warmup=0)
    assert not failed.any() and policy.outside == 0
    profit = (totals["revenue"] - sku_cost(totals)).reshape(copies, 2)
    for k in range(2):
        se = profit[:, k].std(ddof=1) / np.sqrt(copies)
        assert abs(profit[:, k].mean() - v0[k]) < 4 * se, (k, profit[:, k].mean(), v0[k], se)
    assert (np.abs(np.diff(np.array(v0))) > 0).all()  # the two types are different MDPs


def test_long_horizon_rate_is_zipkins_optimal_average_cost() -> None:
    """Poisson mean 5, h = 1, p = 4, L = 1 (a cost-only SKU): V_T grows by -g per day."""
    cat, _ = catalog_of(1, ["catalog.demand.dist=poisson", "catalog.demand.mean=5", "catalog.holding_cost=1",
                            "catalog.lost_sale_cost=4", "catalog.unit_cost=0", "catalog.price=0"])
    for name, value in {"shelf_life": 0, "lead_time": 1, "promo_period": 0, "promo_length": 0,
                        "promo_uplift": 0.0, "trend": 0.0, "order_cost": 0.0, "waste_cost": 0.0,
                        "demand_dist": 0}.items():
        getattr(cat, name)[:] = value
    cat.season[:] = 1.0
    par = make_params(cat.validate(), False).par
    values = []
    for days in (150, 250):
        model = dp.build_model(par, 0, days)
        v, _ = dp.solve(model, 1, terminal=np.zeros(model.states.shape[0]))
        values.append(v[dp.initial_state(model)])
    bound = backorder_level(5.0, 1, 1.0, 4.0) + 2
    g, _, _ = relative_value_iteration(build_model(1, bound, 5.0, 1.0, 4.0))
    assert (values[1] - values[0]) / 100 == pytest.approx(-g, abs=1e-4)


def optimum_setups(days: int) -> Iterator[tuple[int, np.ndarray, Any, np.ndarray, int, float]]:
    """Per SKU type: (i, par, model, zero terminal values, initial state, the optimum's value)."""
    cat, _ = catalog_of(1, [])
    par = make_params(cat, False).par
    for i in range(2):
        model = dp.build_model(par, i, days)
        zero = np.zeros(model.states.shape[0])
        s0 = dp.initial_state(model)
        yield i, par, model, zero, s0, dp.solve(model, 1, terminal=zero)[0][s0]


def test_no_base_stock_level_beats_the_optimum() -> None:
    days = 40
    for i, _, model, zero, _, best in optimum_setups(days):
        gaps = []
        for level in range(model.bound + 1):
            vs, _ = dp.solve(model, 1, levels=np.full((days, 1), level), terminal=zero)
            gaps.append(best - vs[dp.initial_state(model)])
        assert min(gaps) >= -1e-9, (i, int(np.argmin(gaps)), min(gaps))
        if TYPES[i]["order_cost"] > 0:  # batching orders pays: strictly better than any level
            assert min(gaps) > 1e-3


def test_solve_leaves_the_terminal_values_it_is_given() -> None:
    cat, _ = catalog_of(1, [])
    model = dp.build_model(make_params(cat, False).par, 1, 12)
    terminal = np.linspace(0.0, 2.0, model.states.shape[0])
    before = terminal.copy()
    first, _ = dp.solve(model, 1, terminal=terminal)
    np.testing.assert_array_equal(terminal, before)
    again, _ = dp.solve(model, 1, terminal=terminal)  # the same input, the same answer
    np.testing.assert_array_equal(first, again)


def test_the_joint_lot_grid_lies_between_todays_grid_and_the_optimum() -> None:
    """Factor 1 alone is today's grid; factors 0, 0.5, 1, 2 contain it, so they do at least as
    well, and no grid beats the unrestricted optimum; on the order-cost SKU they do better."""
    days = 40
    for i, par, model, zero, s0, best in optimum_setups(days):
        levels, _ = grid_levels(par, i, days, 0.0, np.linspace(-1.5, 1.5, 7))
        lot = 4 if TYPES[i]["order_cost"] > 0 else 0
        today = dp.solve(model, 1, levels=levels, lot=lot, terminal=zero)[0][s0]
        one = dp.solve(model, 1, *joint_grid(levels, lot, np.array([1.0])), terminal=zero)[0][s0]
        assert one == today
        joint = dp.solve(model, 1, *joint_grid(levels, lot, np.array([0.0, 0.5, 1.0, 2.0])), terminal=zero)[0][s0]
        assert today - 1e-9 <= joint <= best + 1e-9, (i, today, joint, best)
        if lot:
            assert joint > today + 1e-3
