"""Rehearse an A/B test in the simulator: every SKU follows its own group's policy, in one
simulation of the whole split catalog, so the groups share the days, the substitution
between them and the random numbers (the draws are a pure function of seed, SKU and day:
a SKU sees the demand it would see under either policy alone, common random numbers).
Warm-up days are simulated but not counted, as in `skurl eval`. On a catalog with supply
networks (groups of whole networks) demand, sales and lost are the customers' (stores'):
0 at upstream locations, whose requests from their locations are no business outcome.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pyarrow as pa

from skurl.catalog.schema import Catalog
from skurl.config import SimConfig
from skurl.policy.api import Policy
from skurl.sim.api import Obs
from skurl.sim.episode import TotalingEnv, make_env, run_episode, sku_cost, sku_inventory_cost

SUMMED = ("demand", "sales", "lost", "waste", "revenue")


class SplitPolicy:
    """Policy A's orders for group A's SKUs, policy B's for group B's (both see every SKU's
    observation: a policy's decision for a SKU depends only on that SKU's row, or on its
    network's rows, and a network is in one group)."""

    def __init__(self, a: Policy, b: Policy, is_b: np.ndarray) -> None:
        self.a, self.b, self.is_b = a, b, np.asarray(is_b, dtype=bool)
        self.name = f"A {a.name} / B {b.name}"

    def reset(self) -> None:
        for policy in (self.a, self.b):
            reset = getattr(policy, "reset", None)
            if callable(reset):
                reset()

    def orders(self, obs: Obs) -> np.ndarray:
        return np.where(self.is_b, self.b.orders(obs), self.a.orders(obs))

    def params(self) -> dict[str, Any]:
        return {"a": self.a.name, "b": self.b.name, "share_b": float(self.is_b.mean())}


def simulate(catalog: Catalog, sim_cfg: SimConfig, policy: SplitPolicy, *, days: int, warmup: int,
             seed: int, episodes: int = 1, widths: tuple[int, int] = (0, 0),
             pre_period: bool = False) -> tuple[pa.Table, np.ndarray]:
    """Per-SKU outcomes over `episodes` episodes (seeds seed, seed+1, ...) of warmup + days
    days, and the mask of SKUs the simulator isolated as failed. With `pre_period`, also the
    pre_* columns of serve/ab_cuped.py: one more episode of the same length on the next seed
    (seed + episodes, a stretch of days the test does not count) with every SKU on policy A,
    as before a real test."""
    env = make_env(catalog, dataclasses.replace(sim_cfg, days=warmup + days), widths)
    seeds = [seed + e for e in range(episodes)]
    sums, failed = _totals(env, policy, seeds, days, warmup)
    unit_cost = np.asarray(catalog.unit_cost, dtype=np.float64)
    customers = _customer_rows(catalog)
    columns = {"sku_id": pa.array(np.asarray(catalog.sku_id, np.int64)),
               **_outcome_columns(sums, unit_cost, days * episodes, customers)}
    if pre_period:
        pre, pre_failed = _totals(env, policy.a, [seed + episodes], days, warmup)
        failed |= pre_failed
        columns |= {f"pre_{k}": v for k, v in _outcome_columns(pre, unit_cost, days, customers).items()
                    if k not in ("sales", "revenue", "cost")}
    return pa.table(columns), failed


def _totals(env: TotalingEnv, policy: Policy, seeds: list[int], days: int, warmup: int,
            ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Per-SKU totals summed over one episode per seed, and the failed SKUs' mask."""
    sums: dict[str, np.ndarray] = {}
    failed = np.zeros(env.num_skus, dtype=bool)
    for s in seeds:
        totals, bad = run_episode(env, policy, seed=s, episode=0, days=days, warmup=warmup)
        failed |= bad
        for key, value in totals.items():
            sums[key] = sums.get(key, 0.0) + value
    return sums, failed


def _customer_rows(catalog: Catalog) -> np.ndarray:
    """Rows that meet customers: every row, or a network catalog's stores."""
    if not catalog.has_network:
        return np.ones(len(catalog), bool)
    from skurl.policy.network_baselines import Topology

    return Topology.of(catalog).store


def _outcome_columns(sums: dict[str, np.ndarray], unit_cost: np.ndarray, sku_days: int,
                     customers: np.ndarray) -> dict[str, pa.Array]:
    """Outcome columns; demand, sales and lost only where `customers` (module docstring)."""
    cost = sku_cost(sums)
    customer = {k: np.where(customers, sums[k], 0.0) for k in ("demand", "sales", "lost")}
    return {
        "sku_days": pa.array(np.full(unit_cost.size, sku_days, np.int64)),
        **{k: pa.array(customer.get(k, sums[k])) for k in SUMMED},
        "cost": pa.array(cost),
        "inventory_cost": pa.array(sku_inventory_cost(sums, unit_cost)),
        "profit": pa.array(sums["revenue"] - cost),
    }
