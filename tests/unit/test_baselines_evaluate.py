"""The evaluation harness against a scripted env: warm-up exclusion, seeds, per-SKU-day
aggregation, fill rates, failed SKUs, JSON."""

from __future__ import annotations

import json

import numpy as np
import pytest

from skurl.catalog.uniform import uniform_catalog
from skurl.collect.evaluate import evaluate
from skurl.config import CatalogConfig, SimConfig
from skurl.sim.api import DayMetrics, Obs, ObsSchema, RawState, StepResult
from skurl.sim.episode import TOTAL_FIELDS


class ScriptedEnv:
    """Every SKU, every day: demand 4, sales 3 (one of them to a substitute customer),
    1 lost, 1 substituted away, holding cost = on hand at the end of the day = the day
    index, penalty 2 per lost unit, revenue 5 per sale. SKU 1 fails on day `fail_day`."""

    def __init__(self, n: int, fail_day: int = 10**9, purchase: float = 0.0, waste: float = 0.0) -> None:
        self.n, self.fail_day, self.purchase, self.waste = n, fail_day, purchase, waste
        self.day = 0
        self.resets: list[tuple[int, int]] = []
        self.orders_seen: list[np.ndarray] = []
        self.sums = {k: np.zeros(n) for k in TOTAL_FIELDS}
        self.failed = np.zeros(n, bool)

    @property
    def num_skus(self) -> int:
        return self.n

    @property
    def schema(self) -> ObsSchema:
        return ObsSchema(())

    def _obs(self) -> Obs:
        raw = RawState(np.zeros(self.n, np.int64), np.zeros((self.n, 1), np.int64), np.zeros(self.n, np.int64),
                       np.ones((self.n, 2), np.float32), self.day)
        return Obs(np.zeros((self.n, 0), np.float32), raw, self.schema)

    def reset(self, seed: int, episode: int = 0) -> Obs:
        self.resets.append((seed, episode))
        self.day = 0
        self.failed[:] = False
        self.reset_totals()
        return self._obs()

    def step(self, orders: np.ndarray) -> StepResult:
        self.orders_seen.append(np.array(orders))
        one = np.ones(self.n)
        day = dict(demand=4 * one, sales=3 * one, lost=one, substituted=one, waste=self.waste * one, ordered=orders,
                   arrived=0 * one, on_hand_end=self.day * one, holding_cost=self.day * one,
                   penalty_cost=2 * one, purchase_cost=self.purchase * one, order_cost=0 * one, waste_cost=self.waste / 4 * one,
                   revenue=15 * one)
        if self.day >= self.fail_day:
            self.failed[1] = True
        for k, v in day.items():
            self.sums[k] += np.where(self.failed, 0.0, v)
        self.day += 1
        return StepResult(self._obs(), np.zeros(self.n, np.float32), False, DayMetrics(**day), self.failed)

    def totals(self) -> dict[str, np.ndarray]:
        return {k: v.copy() for k, v in self.sums.items()}

    def reset_totals(self) -> None:
        for v in self.sums.values():
            v[:] = 0.0

    def info(self) -> dict:
        return {}

    def close(self) -> None:
        pass


class OrdersDay:
    name = "orders-day"

    def orders(self, obs: Obs) -> np.ndarray:
        return np.full(obs.raw.on_hand.shape[0], float(obs.raw.day))

    def params(self) -> dict:
        return {"k": np.array([1.0, 2.0, 3.0])}


def catalog(n: int):
    return uniform_catalog(CatalogConfig(kind="uniform", skus=n))


def test_counts_only_days_after_warmup_and_runs_one_episode_per_seed():
    env = ScriptedEnv(3)
    res = evaluate(catalog(3), SimConfig(reward="cost"), OrdersDay(), days=10, warmup=5, seed=40,
                   episodes=2, env=env)
    assert env.resets == [(40, 0), (41, 0)] and res.seeds == [40, 41]
    assert [int(o[0]) for o in env.orders_seen[:15]] == list(range(15))
    mean_day = np.mean(np.arange(5, 15))  # holding = on hand = day index, days 5..14
    assert res.mean_on_hand == pytest.approx(mean_day)
    assert res.breakdown["holding"] == pytest.approx(mean_day)
    assert res.avg_cost_per_sku_day == pytest.approx(mean_day + 2)
    assert res.avg_profit_per_sku_day == pytest.approx(15 - mean_day - 2)
    assert res.fill_rate == pytest.approx(0.75) and res.item_fill_rate == pytest.approx(0.5)
    assert res.lost_units == 3 * 10 * 2 and res.demand_units == 4 * 3 * 10 * 2
    assert res.per_sku_cost.shape == (3,) and np.allclose(res.per_sku_cost, mean_day + 2)
    assert res.cost_se == 0.0 and res.objective == "cost"


def test_failed_skus_are_excluded_and_counted():
    env = ScriptedEnv(3, fail_day=7)
    res = evaluate(catalog(3), SimConfig(), OrdersDay(), days=10, warmup=5, seed=0, env=env)
    assert res.failed_skus == 1
    assert res.avg_cost_per_sku_day == pytest.approx(np.mean(np.arange(5, 15)) + 2)
    assert res.demand_units == 4 * 2 * 10


def test_zero_warmup_and_json():
    env = ScriptedEnv(3)
    res = evaluate(catalog(3), SimConfig(), OrdersDay(), days=4, warmup=0, seed=9, env=env)
    assert res.mean_on_hand == pytest.approx(1.5)
    data = json.loads(json.dumps(res.to_json()))
    assert data["avg_cost_per_sku_day"] == pytest.approx(3.5) and data["fill_rate"] == pytest.approx(0.75)
    assert data["params"]["k"]["min"] == 1.0 and data["params"]["k"]["max"] == 3.0
    assert "per_sku_cost" not in data


def test_inventory_cost_counts_the_purchase_of_expired_units_only():
    # 4 units bought a day at unit cost 1.5 (purchase 6), 0.5 of them expire (waste cost 0.25
    # a unit): the inventory cost keeps holding, penalty, disposal and the expired units'
    # purchase (0.75), not the purchase of units sold or still in stock.
    env = ScriptedEnv(3, purchase=6.0, waste=0.5)
    cat = uniform_catalog(CatalogConfig(kind="uniform", skus=3, unit_cost=1.5))
    res = evaluate(cat, SimConfig(), OrdersDay(), days=4, warmup=0, seed=0, env=env)
    holding = 1.5  # mean of days 0..3
    assert res.avg_cost_per_sku_day == pytest.approx(holding + 2 + 6 + 0.125)
    assert res.breakdown["expired_purchase"] == pytest.approx(0.75)
    assert res.avg_inventory_cost_per_sku_day == pytest.approx(holding + 2 + 0.125 + 0.75)
    assert np.allclose(res.per_sku_inventory_cost, holding + 2.875)
    data = res.to_json()
    assert data["avg_inventory_cost_per_sku_day"] == pytest.approx(holding + 2.875)
    assert "per_sku_inventory_cost" not in data


def test_rejects_bad_horizons():
    with pytest.raises(ValueError):
        evaluate(catalog(3), SimConfig(), OrdersDay(), days=0, warmup=0, seed=0, env=ScriptedEnv(3))
