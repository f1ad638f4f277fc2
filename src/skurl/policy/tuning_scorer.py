"""What every tuning method shares: a scorer that simulates a baseline's candidate
parameters under common random numbers, and the result it reports (policy/tuning.py's
per-SKU search and policy/tuning_uniform.py's exact search both build on it)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from skurl.catalog.schema import Catalog
from skurl.config import SimConfig
from skurl.policy.baselines import Params, make_policy, summarize
from skurl.sim.episode import make_env, run_episode, sku_objective

Progress = Callable[[str], None]


@dataclass
class TuneResult:
    name: str
    params: Params  # per-SKU arrays for the catalog that was tuned
    method: str  # "uniform-exhaustive" | "per-sku-grid"
    seed: int
    days: int
    warmup: int
    runs: int  # candidate simulations
    sku_days: int  # simulated SKU-days, all candidates together
    objective: float  # best mean objective per SKU-day on the tuning seeds
    details: dict[str, Any] = field(default_factory=dict)
    objective_is: str = "cost"  # "cost" or "-profit" (sim.reward=profit): lower is better

    def summary(self) -> dict[str, Any]:
        return {"method": self.method, "seed": self.seed, "days": self.days, "warmup": self.warmup,
                "runs": self.runs, "sku_days": self.sku_days, "objective": self.objective,
                "objective_is": self.objective_is,
                "params": {k: summarize(v) for k, v in self.params.items()}, **self.details}


class CandidateScorer:
    """Simulates parameter sets of one baseline on one catalog under CRN; one env reused."""

    def __init__(self, name: str, catalog: Catalog, sim_cfg: SimConfig, *, seed: int, days: int,
                 warmup: int) -> None:
        self.name, self.catalog, self.sim_cfg = name, catalog, sim_cfg
        self.seed, self.days, self.warmup = seed, days, warmup
        self.env = make_env(catalog, dataclasses.replace(sim_cfg, days=warmup + days))
        self.runs = 0
        self.sku_days = 0

    def __call__(self, params: Params | dict[str, float], batch: int = 0) -> np.ndarray:
        """Per-SKU objective per day (float64 [N]; +inf for SKUs the env isolated)."""
        policy = make_policy(self.name, self.catalog, self.sim_cfg, params)
        totals, failed = run_episode(self.env, policy, seed=self.seed + batch, episode=0,
                                     days=self.days, warmup=self.warmup)
        self.runs += 1
        self.sku_days += len(self.catalog) * self.days
        obj = sku_objective(totals, self.sim_cfg.reward) / self.days
        obj[failed] = np.inf
        return obj


def objective_is(sim_cfg: SimConfig) -> str:
    return "-profit" if sim_cfg.reward == "profit" else "cost"
