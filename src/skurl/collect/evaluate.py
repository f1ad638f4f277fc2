"""Evaluation harness: run any Policy over a catalog on held-out seeds and aggregate.

`evaluate` runs one episode of warmup + days per seed (seeds seed, seed+1, ...), resets the
env's per-SKU totals after the warm-up, and turns the totals into per-SKU-day figures.
It knows nothing of how the policy decides (Policy protocol), so baselines and learned
policies are scored by the same code.

More: docs/internals.md (collect/evaluate.py)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from skurl.catalog.schema import Catalog
from skurl.config import SimConfig
from skurl.policy.api import Policy
from skurl.sim.episode import (
    BASE_COST_FIELDS,
    LINK_COST_FIELDS,
    TotalingEnv,
    make_env,
    run_episode,
    sku_cost,
    sku_inventory_cost,
)

PER_SKU_FIELDS = ("per_sku_cost", "per_sku_profit", "per_sku_inventory_cost")


def eval_subset(catalog: Catalog, skus: int) -> Catalog:
    """The SKUs scored by evaluations (eval.skus): the first `skus` rows (and the rest of
    their supply networks), or all with 0."""
    if skus == 0 or skus >= len(catalog):
        return catalog
    if catalog.has_network:
        from skurl.collect.network_report import whole_networks

        return catalog.subset(whole_networks(catalog, np.arange(skus)))
    return catalog.subset(np.arange(skus))


@dataclass
class EvalResult:
    policy: str
    params: dict[str, Any]
    skus: int
    days: int
    warmup: int
    seeds: list[int]
    objective: str
    avg_cost_per_sku_day: float
    avg_profit_per_sku_day: float
    cost_se: float
    fill_rate: float
    item_fill_rate: float
    demand_units: float
    sales_units: float
    lost_units: float  # demand lost for good (0 under backorders)
    waste_units: float
    mean_on_hand: float
    breakdown: dict[str, float]  # per SKU-day: holding, penalty, purchase, order, waste, revenue
    failed_skus: int
    avg_inventory_cost_per_sku_day: float  # costs a policy controls (module docstring)
    per_sku_cost: np.ndarray = field(repr=False)  # float64 [N] average cost per day
    per_sku_profit: np.ndarray = field(repr=False)
    per_sku_inventory_cost: np.ndarray = field(repr=False)
    backordered_units: float = 0.0  # demand not served the day it came, owed (sim.backorders)
    network: dict[str, Any] | None = None  # supply networks: collect/network_report.py

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in dataclasses.asdict(self).items()
               if k not in (*PER_SKU_FIELDS, "params")}
        out["params"] = self.params_summary()
        if self.network is not None:
            out["avg_cost_per_network_day"] = self.network["avg_cost_per_network_day"]
        return out

    def params_summary(self) -> dict[str, Any]:
        """The policy's parameters for reports: per-SKU arrays as one number or quantiles
        (baselines.summarize), other values (a learned policy's grid kind, ...) as they are."""
        from skurl.policy.baselines import summarize

        return {k: summarize(v) if isinstance(v, np.ndarray) else v for k, v in self.params.items()}


def evaluate(catalog: Catalog, sim_cfg: SimConfig, policy: Policy, *, days: int, warmup: int,
             seed: int, episodes: int = 1, env: TotalingEnv | None = None) -> EvalResult:
    """Score `policy` on `catalog`: `episodes` episodes (seeds seed..seed+episodes-1) of
    warmup + days days each; costs counted after the warm-up. Pass `env` to reuse one
    built for this catalog with sim.days >= warmup + days."""
    if days < 1 or warmup < 0 or episodes < 1:
        raise ValueError("evaluate: days >= 1, warmup >= 0, episodes >= 1 expected")
    if env is None:
        env = make_env(catalog, dataclasses.replace(sim_cfg, days=warmup + days))
    n = env.num_skus
    sums: dict[str, np.ndarray] = {}
    failed = np.zeros(n, dtype=bool)
    per_episode_cost = []
    seeds = [seed + e for e in range(episodes)]
    for s in seeds:
        totals, bad = run_episode(env, policy, seed=s, episode=0, days=days, warmup=warmup)
        failed |= bad
        per_episode_cost.append(sku_cost(totals) / days)
        for k, v in totals.items():
            sums[k] = sums.get(k, 0.0) + v
    unit_cost = np.asarray(catalog.unit_cost, dtype=np.float64)
    result = _aggregate(policy, sums, failed, np.stack(per_episode_cost), days, warmup, seeds, sim_cfg,
                        unit_cost)
    if catalog.has_network:
        from skurl.collect.network_report import network_summary

        per_day = {k: v / (days * len(seeds)) for k, v in sums.items()}
        result.network = network_summary(catalog, np.stack(per_episode_cost), per_day, ~failed)
    return result


def _aggregate(policy: Policy, sums: dict[str, np.ndarray], failed: np.ndarray, episode_cost: np.ndarray,
               days: int, warmup: int, seeds: list[int], sim_cfg: SimConfig,
               unit_cost: np.ndarray) -> EvalResult:
    ok = ~failed
    count = max(int(ok.sum()), 1)
    sku_days = float(count * days * len(seeds))
    total = {k: float(v[ok].sum()) for k, v in sums.items()}
    per_day = {k: v / (days * len(seeds)) for k, v in sums.items()}
    cost_sku = sku_cost(per_day)
    profit_sku = per_day["revenue"] - cost_sku
    inventory_sku = sku_inventory_cost(per_day, unit_cost)
    draws = episode_cost[:, ok].ravel()
    se = float(draws.std(ddof=1) / np.sqrt(draws.size)) if draws.size > 1 else float("nan")
    demand = total["demand"]
    breakdown = {k.removesuffix("_cost"): total[k] / sku_days for k in (*BASE_COST_FIELDS, "revenue")}
    breakdown.update({k.removesuffix("_cost"): total[k] / sku_days for k in LINK_COST_FIELDS if total[k] != 0})
    breakdown["expired_purchase"] = float((unit_cost * per_day["waste"])[ok].sum() / count)
    return EvalResult(
        policy=str(getattr(policy, "name", type(policy).__name__)),
        params=dict(policy.params()),
        skus=int(ok.size), days=days, warmup=warmup, seeds=seeds, objective=sim_cfg.reward,
        avg_cost_per_sku_day=float(cost_sku[ok].sum() / count),
        avg_profit_per_sku_day=float(profit_sku[ok].sum() / count),
        cost_se=se,
        fill_rate=1.0 - total["lost"] / demand if demand > 0 else 1.0,
        item_fill_rate=1.0 - (total["lost"] + total["substituted"]) / demand if demand > 0 else 1.0,
        demand_units=demand, sales_units=total["sales"],
        lost_units=0.0 if sim_cfg.backorders else total["lost"],
        backordered_units=total["lost"] if sim_cfg.backorders else 0.0,
        waste_units=total["waste"], mean_on_hand=total["on_hand_end"] / sku_days,
        breakdown=breakdown, failed_skus=int(failed.sum()),
        avg_inventory_cost_per_sku_day=float(inventory_sku[ok].sum() / count),
        per_sku_cost=cost_sku, per_sku_profit=profit_sku, per_sku_inventory_cost=inventory_sku,
    )
