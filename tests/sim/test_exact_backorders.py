"""Backorders: the simulator and the base-stock policy against the closed form.

With backorders and order-up-to S placed every day, the inventory position after ordering
is always S (the policy nets the backlog out), so the net stock at the end of day t + L
is S - (demand of days t..t+L) and the long-run cost per day is
E[h (S - D)^+ + p (D - S)^+], D ~ Poisson((L + 1) m) (Zipkin, "Foundations of Inventory
Management", 2000, section 6.2; penalty per backordered unit per day, as in docs/architecture.md (Simulator semantics)).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from skurl.catalog.uniform import uniform_catalog
from skurl.collect.evaluate import evaluate
from skurl.config import CatalogConfig, DemandConfig, SimConfig
from skurl.policy.baselines import make_policy

MEAN, H, P = 5.0, 1.0, 9.0
SIM = SimConfig(reward="cost", backorders=True, threads=1)  # results do not depend on threads


def closed_form(lead: int, level: int) -> float:
    lam = MEAN * (lead + 1)
    d = np.arange(400)
    pmf = np.exp(-lam + d * math.log(lam) - np.array([math.lgamma(k + 1) for k in d]))
    return float((pmf * (H * np.maximum(level - d, 0) + P * np.maximum(d - level, 0))).sum())


@pytest.mark.parametrize(("lead", "level"), [(1, 13), (3, 25)])
def test_backorder_base_stock_cost_matches_closed_form(lead, level):
    catalog = uniform_catalog(CatalogConfig(kind="uniform", skus=2000, lead_time=lead, lost_sale_cost=P,
                                            holding_cost=H, demand=DemandConfig(dist="poisson", mean=MEAN)))
    policy = make_policy("base-stock", catalog, SIM, {"S": float(level)})
    res = evaluate(catalog, SIM, policy, days=300, warmup=50, seed=77)
    exact = closed_form(lead, level)
    assert 0 < res.cost_se < 0.05
    assert abs(res.avg_cost_per_sku_day - exact) < 4 * res.cost_se, (res.avg_cost_per_sku_day, exact, res.cost_se)
