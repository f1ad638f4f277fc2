"""One episode of any decision rule on an Env and the per-SKU totals it leaves: what
evaluation (collect/evaluate.py, whose docstring defines the cost accounting) and baseline
tuning (policy/tuning*.py) both run, so it sits below both.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Protocol

import numpy as np

from skurl.catalog.schema import Catalog
from skurl.config import SimConfig
from skurl.sim.api import DayMetrics, Env, Obs

if TYPE_CHECKING:
    from skurl.sim.env import VectorEnv

BASE_COST_FIELDS = ("holding_cost", "penalty_cost", "purchase_cost", "order_cost", "waste_cost")
LINK_COST_FIELDS = ("ship_cost", "transfer_cost")  # supply networks only (docs/networks.md), else 0
COST_FIELDS = BASE_COST_FIELDS + LINK_COST_FIELDS
TOTAL_FIELDS = tuple(f.name for f in dataclasses.fields(DayMetrics))


class DecisionRule(Protocol):
    """What an episode needs of a policy (policy/api.py's Policy is one). A rule whose class
    sets `raw_only = True` (the baselines) reads only `obs.raw`: its episodes run without
    feature rows (VectorEnv.observe_features), whose daily writes are ~a quarter of the
    kernel's time."""

    def orders(self, obs: Obs) -> np.ndarray: ...


class TotalingEnv(Env, Protocol):
    """An Env that also sums each SKU's day metrics since `reset_totals` (VectorEnv)."""

    def totals(self) -> dict[str, np.ndarray] | DayMetrics: ...

    def reset_totals(self) -> None: ...


def make_env(catalog: Catalog, sim_cfg: SimConfig, widths: tuple[int, int] = (0, 0)) -> VectorEnv:
    """The in-process vectorized simulator (imported on first use: its kernels compile).
    `widths`: the whole catalog's feature widths when `catalog` is a subset of it
    (sim/layout.py catalog_widths), so a network trained on the whole shows no mismatch."""
    from skurl.sim.env import VectorEnv

    return VectorEnv(catalog, sim_cfg, min_widths=widths)


def totals_dict(totals: dict[str, np.ndarray] | DayMetrics) -> dict[str, np.ndarray]:
    """env.totals() as {field: float64 [N]}, whether it returns a DayMetrics or a mapping."""
    if isinstance(totals, dict):
        return {k: np.asarray(totals[k], dtype=np.float64) for k in TOTAL_FIELDS if k in totals}
    return {k: np.asarray(getattr(totals, k), dtype=np.float64) for k in TOTAL_FIELDS}


def sku_cost(totals: dict[str, np.ndarray]) -> np.ndarray:
    return sum((totals[k] for k in COST_FIELDS), np.zeros_like(totals["demand"]))


def sku_inventory_cost(totals: dict[str, np.ndarray], unit_cost: np.ndarray) -> np.ndarray:
    """Per SKU: cost less the purchase of units sold or still in stock (module docstring)."""
    return sku_cost(totals) - totals["purchase_cost"] + unit_cost * totals["waste"]


def sku_objective(totals: dict[str, np.ndarray], reward: str) -> np.ndarray:
    """What tuning minimizes per SKU: cost, or minus profit under sim.reward=profit."""
    cost = sku_cost(totals)
    return cost - totals["revenue"] if reward == "profit" else cost


def run_episode(env: TotalingEnv, policy: DecisionRule, *, seed: int, episode: int, days: int, warmup: int,
                ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Run warmup + days steps of one episode; per-SKU totals of the last `days` and the
    mask of SKUs the env isolated as failed. The env must have sim.days >= warmup + days."""
    reset_policy = getattr(policy, "reset", None)
    if callable(reset_policy):
        reset_policy()
    observe = getattr(env, "observe_features", None) if getattr(policy, "raw_only", False) is True else None
    if observe is None:
        return _episode(env, policy, seed, episode, days, warmup)
    observe(False)
    try:
        return _episode(env, policy, seed, episode, days, warmup)
    finally:
        observe(True)  # the default again from the env's next reset


def _episode(env: TotalingEnv, policy: DecisionRule, seed: int, episode: int, days: int, warmup: int,
             ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    obs = env.reset(seed, episode)
    failed = np.zeros(env.num_skus, dtype=bool)
    if warmup == 0:
        env.reset_totals()
    for t in range(warmup + days):
        if t == warmup and warmup > 0:
            env.reset_totals()
        result = env.step(policy.orders(obs))
        if result.failed.size:
            failed |= result.failed
        obs = result.obs
    return totals_dict(env.totals()), failed
