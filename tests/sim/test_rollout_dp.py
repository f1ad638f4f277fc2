"""The CRN rollout operator (policy/rollout_q.py) on a lost-sales SKU with lead time 2,
against the exact relative values of benchmarks/lost_sales_optimal.py: following the
optimal policy after the first order, the action it keeps is the DP's best (or nearly as
good) in states the optimal policy visits."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from benchmark_module import load_benchmark

from skurl.catalog import load_catalog
from skurl.config import load_config
from skurl.policy.rollout_q import RolloutSpec, estimate_q
from skurl.sim import VectorEnv
from skurl.sim.api import Obs

MEAN, HOLDING, PENALTY, LEAD, CANDIDATES = 5.0, 1.0, 9.0, 2, 11
rvi = load_benchmark("lost_sales_optimal")


@dataclass
class TablePolicy:
    """The DP's order for each state (on hand y, due tomorrow p1)."""

    table: np.ndarray
    name: str = "optimal"

    def orders(self, obs: Obs) -> np.ndarray:
        top = self.table.shape[0] - 1
        y = np.minimum(obs.raw.on_hand, top)
        return self.table[y, np.minimum(obs.raw.pipeline[:, 0], top - y)].astype(np.float64)

    def params(self) -> dict:
        return {}


def _continuation(v: np.ndarray, lookup: np.ndarray, bound: int) -> np.ndarray:
    """W[y, p1, q] = E[v((y - D)^+ + p1, q)]: what order q leaves for the future (today's
    cost does not depend on it: it arrives in two days)."""
    pmf = rvi.poisson_pmf(MEAN, bound + 60)
    W = np.full((bound + 1, bound + 1, bound + 1), np.inf)
    for y in range(bound + 1):
        left = np.maximum(y - np.arange(pmf.size), 0)
        for p1 in range(bound + 1 - y):
            for q in range(bound + 1 - y - p1):
                W[y, p1, q] = (pmf * v[lookup[left + p1, q]]).sum()
    return W


def test_rollouts_under_the_optimal_policy_pick_the_dps_orders() -> None:
    bound = rvi.backorder_level(MEAN, LEAD, HOLDING, PENALTY) + 12  # room for every candidate
    g, v, _ = rvi.relative_value_iteration(rvi.build_model(LEAD, bound, MEAN, HOLDING, PENALTY))
    _, lookup = rvi.enumerate_states(LEAD, bound)
    W = _continuation(v, lookup, bound)
    table = np.argmin(W, axis=2)
    cfg = load_config(None, ["catalog.kind=uniform", "catalog.demand.dist=poisson", f"catalog.demand.mean={MEAN}",
                             f"catalog.lead_time={LEAD}", f"catalog.holding_cost={HOLDING}",
                             f"catalog.lost_sale_cost={PENALTY}", "sim.reward=cost", "sim.backorders=false",
                             "sim.days=40", "sim.threads=1"])
    catalog = load_catalog(cfg.catalog, 40)
    env = VectorEnv(catalog, cfg.sim)
    optimal = TablePolicy(table)
    obs = env.reset(seed=5)
    for _ in range(15):
        obs = env.step(optimal.orders(obs)).obs
    y, p1 = obs.raw.on_hand.copy(), obs.raw.pipeline[:, 0].copy()
    assert (y + p1 + CANDIDATES - 1 <= bound).all()
    first = np.tile(np.arange(CANDIDATES, dtype=np.float64), (40, 1))
    exact = W[y, p1, :CANDIDATES]
    dp_best = exact.argmin(axis=1)
    assert (dp_best == table[y, p1]).all() and len(set(dp_best)) > 2  # varied states
    regret = {}
    for common in (True, False):
        spec = RolloutSpec(horizon=40, budget=2000, episode_base=1000, common=common)
        est = estimate_q(env, np.arange(40), first, lambda rows: optimal, spec)
        regret[common] = exact[np.arange(40), est.best] - exact.min(axis=1)
        if common:
            assert np.mean(est.best == dp_best) >= 0.7, (est.best, dp_best)
            # q_first pairs every action on the first round's (few) futures: it ranks the
            # clearly worse actions below the DP's best (the halving looks closer at the rest)
            far = exact - exact.min(axis=1, keepdims=True) > 5.0
            worse = -est.q_first < (-est.q_first[np.arange(40), dp_best])[:, None]
            assert not (far & worse).any()
    assert regret[True].mean() < 0.01 * g, (regret[True], g)
    assert regret[True].mean() < 0.5 * regret[False].mean()  # the pairing is what finds them
