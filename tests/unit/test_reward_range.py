"""The collector's reward range check: out-of-range (or NaN) rewards are counted, logged
with the SKU id and refuse the shard; in-range collections are unchanged bit for bit."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pytest
import torch
from prometheus_client import CollectorRegistry
from test_collector import StockEnv  # the tiny deterministic env of the collector's tests

from skurl.catalog.uniform import uniform_catalog
from skurl.collect.collector import Collector
from skurl.collect.reward_range import RANGE_FACTOR, RewardRangeError, reward_bounds
from skurl.config import ActionsConfig, CatalogConfig
from skurl.policy.actions import ActionGrid
from skurl.policy.nets import ActorCritic
from skurl.sim.api import StepResult
from skurl.telemetry.metrics import use_registry

IDS = np.arange(10, 18)
GRID = ActionGrid.from_config(ActionsConfig(kind="units", n=5))


def catalog(**money: float):
    cfg = CatalogConfig(kind="uniform", skus=len(IDS), holding_cost=1.0, lost_sale_cost=4.0, **money)
    cat = uniform_catalog(cfg)
    cat.sku_id = IDS.copy()
    return cat


class Spiked(StockEnv):
    """StockEnv whose reward of row `row` on day `day` is `value`."""

    def __init__(self, row: int, day: int, value: float) -> None:
        super().__init__(IDS)
        self.spike = (row, day, value)

    def step(self, orders: np.ndarray) -> StepResult:
        day = self.day
        result = super().step(orders)
        row, when, value = self.spike
        if day == when:
            reward = result.reward.copy()
            reward[row] = value
            result = dataclasses.replace(result, reward=reward)
        return result


def collector(env: StockEnv, cat=None) -> Collector:
    torch.manual_seed(1)
    return Collector(env, ActorCritic(3, 5, (16,)), GRID, infer_dtype="float32", catalog=cat)


def test_bounds_follow_each_skus_money_scale() -> None:
    base = reward_bounds(catalog(), days=100, grid=GRID)
    assert base.shape == (len(IDS),) and np.all(base == base[0]) and base[0] > 0
    pricier = reward_bounds(catalog(price=50.0), days=100, grid=GRID)
    assert np.all(pricier > base)
    # a units grid orders up to 4 units whatever the demand: the scale covers it
    assert base[0] >= RANGE_FACTOR * 5.0 * 4 * 100


@pytest.mark.parametrize("value", [1e30, float("nan"), -float("inf")])
def test_an_out_of_range_reward_refuses_the_shard(value: float, caplog: pytest.LogCaptureFixture) -> None:
    with use_registry(CollectorRegistry()) as m, caplog.at_level(logging.ERROR, "skurl.collect"):
        with pytest.raises(RewardRangeError, match=r"SKU 13 day 2: reward .* outside its plausible range"):
            collector(Spiked(3, 2, value), catalog()).collect(seed=0, episode=0)
        assert m.registry.get_sample_value("collector_reward_out_of_range_total") == 1
    assert "SKU ids [13]" in caplog.text


def test_without_catalog_rows_only_finiteness_is_checked() -> None:
    assert collector(Spiked(1, 0, 1e30)).collect(seed=0, episode=0) is not None
    with pytest.raises(RewardRangeError, match="SKU 11 day 0"):
        collector(Spiked(1, 0, float("nan"))).collect(seed=0, episode=0)


def test_in_range_collections_are_unchanged() -> None:
    checked = collector(StockEnv(IDS), catalog()).collect(seed=4, episode=1)
    plain = collector(StockEnv(IDS)).collect(seed=4, episode=1)
    for name in ("obs", "actions", "logp", "values", "rewards", "dones", "last_obs", "bootstrap"):
        np.testing.assert_array_equal(getattr(checked, name), getattr(plain, name))
