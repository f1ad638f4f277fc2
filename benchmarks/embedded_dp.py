"""Exact finite-horizon dynamic programming of one SKU of skurl's simulator (docs/headroom.md).

The MDP is the simulator's own (sim/day.py, sim/kernel.py), lost sales, FIFO issuing, no
substitution, no supplier delay. Day t: the state is observed after today's arrivals; an
order of q whole units is placed (unit cost c q, fixed cost K if q > 0) and arrives at the
start of day t + L; demand D_t (Poisson, negative binomial or geometric with the day's exact
mean: season x trend x promotion, sim/sku_ops.mean_on) is served oldest first, the rest lost
(penalty p, revenue price per sale); units on their last day expire (waste w); holding h
per unit left. State: units on hand by days left (one class without a shelf life), then
the orders due in 1..L-1 days; truncated to a total position <= B (orders keep it there).
V_t(x) = max_q E[r + V_{t+1}]: one numba pass per day over states x orders x demand.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numba import njit, prange

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lost_sales_optimal import enumerate_states

from skurl.sim.demand import DIST_GEOMETRIC, DIST_NEGBIN
from skurl.sim.sku_ops import mean_on
from skurl.sim.state import (
    P_DEMAND_MEAN,
    P_DISPERSION,
    P_DIST,
    P_HOLDING,
    P_LEAD,
    P_LOST_SALE,
    P_ORDER_COST,
    P_PRICE,
    P_SHELF,
    P_UNIT_COST,
    P_WASTE_COST,
)


@dataclass
class SkuModel:
    """One SKU's MDP on days 0..T-1, from its row of the simulator's float32 parameters."""

    lead: int
    life: int  # 0: never expires
    bound: int  # B: largest total position (on hand + pipeline + today's order)
    states: np.ndarray  # int64 [n, dims]: on hand by days left (oldest first), then pipeline
    lookup: np.ndarray  # int64 [(B+1)^dims]: state index of a flattened component vector, -1 off
    pmf: np.ndarray  # float64 [T, B+1]: P(D_t = d)
    tail: np.ndarray  # float64 [T, B+1]: P(D_t >= y)
    emin: np.ndarray  # float64 [T, B+1]: E[min(D_t, y)]
    mean: np.ndarray  # float64 [T]
    costs: np.ndarray  # float64 [6]: price, holding, penalty, unit cost, order cost, waste
    init: int  # units on hand at day 0 (age 0)

    @property
    def dims(self) -> int:
        return max(self.life, 1) + self.lead - 1

    @property
    def on_hand_classes(self) -> int:
        return max(self.life, 1)


@njit(cache=True)
def _means(par: np.ndarray, i: np.int64, days: np.int64) -> np.ndarray:
    out = np.empty(days, np.float64)
    for t in range(days):
        out[t] = mean_on(par, i, np.int64(t))
    return out


def daily_means(par: np.ndarray, i: int, days: int) -> np.ndarray:
    """The simulator's exact mean demand of SKU row i on days 0..days-1 (sku_ops.mean_on)."""
    return _means(par, np.int64(i), np.int64(days))


def demand_pmf(dist: int, size: float, mean: np.ndarray, top: int) -> np.ndarray:
    """float64 [T, top+1]: P(D = d) of each day's distribution (the sampler's, sim/demand.py),
    by the log-pmf recursions, vectorized over days and d."""
    m = np.maximum(mean, 1e-300)[:, None]
    d = np.arange(top + 1, dtype=np.float64)[None, :]
    log_fact = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, top + 1, dtype=np.float64)))])[None, :]
    if dist == DIST_GEOMETRIC:
        logp = d * (np.log(m) - np.log1p(m)) - np.log1p(m)
    elif dist == DIST_NEGBIN:
        # p(d) = Gamma(r + d) / (Gamma(r) d!) (r / (r + m))^r (m / (r + m))^d
        rising = np.concatenate([[0.0], np.cumsum(np.log(size + np.arange(top, dtype=np.float64)))])[None, :]
        logp = rising - log_fact - size * np.log1p(m / size) + d * np.log(m / (size + m))
    else:
        logp = -m + d * np.log(m) - log_fact
    pmf = np.exp(logp)
    pmf[mean <= 0.0] = 0.0
    pmf[mean <= 0.0, 0] = 1.0
    return pmf


def variance_of(dist: int, size: float, mean: np.ndarray) -> np.ndarray:
    if dist == DIST_GEOMETRIC:
        return mean + mean * mean
    if dist == DIST_NEGBIN:
        return mean + mean * mean / size
    return mean


def position_bound(par: np.ndarray, i: int, mean: np.ndarray, sds: float = 5.0) -> int:
    """B: demand over lead + 1 days at the peak daily mean + `sds` standard deviations, plus
    twice the EOQ (at most the shelf life's demand for a perishable) and 3 units. A bound
    that binds shows in the report (orders reaching B), it never hides."""
    lead, life = int(par[i, P_LEAD]), int(par[i, P_SHELF])
    peak = float(mean.max())
    days = lead + 1
    var = float(variance_of(int(par[i, P_DIST]), float(par[i, P_DISPERSION]), np.array([peak]))[0])
    avg = float(mean.mean())
    k, h = float(par[i, P_ORDER_COST]), max(float(par[i, P_HOLDING]), 1e-9)
    lot = 2.0 * math.sqrt(2.0 * k * avg / h)
    if life > 0:
        lot = min(lot, life * peak)
    return math.ceil(days * peak + sds * math.sqrt(days * var) + lot + 3.0)


def state_count(dims: int, bound: int) -> int:
    """States with dims components >= 0 summing to at most `bound`."""
    return math.comb(bound + dims, dims)


def build_model(par: np.ndarray, i: int, days: int, bound: int | None = None) -> SkuModel:
    """SKU row i of `par` (sim/state.make_params) as a SkuModel over days 0..days-1."""
    lead, life = int(par[i, P_LEAD]), int(par[i, P_SHELF])
    mean = daily_means(par, i, days)
    b = position_bound(par, i, mean) if bound is None else int(bound)
    dims = max(life, 1) + lead - 1
    states, lookup = enumerate_states(dims, b)
    dist, size = int(par[i, P_DIST]), float(par[i, P_DISPERSION])
    pmf = demand_pmf(dist, size, mean, b)
    cdf = np.cumsum(pmf, axis=1)
    tail = np.concatenate([np.ones((days, 1)), np.clip(1.0 - cdf[:, :-1], 0.0, 1.0)], axis=1)
    # E[min(D, y)] = sum_{j < y} P(D > j)
    emin = np.concatenate([np.zeros((days, 1)), np.cumsum(np.clip(1.0 - cdf[:, :-1], 0.0, 1.0), axis=1)], axis=1)
    costs = np.array([par[i, P_PRICE], par[i, P_HOLDING], par[i, P_LOST_SALE], par[i, P_UNIT_COST],
                      par[i, P_ORDER_COST], par[i, P_WASTE_COST]], dtype=np.float64)
    init = math.floor((lead + 1) * float(np.float64(par[i, P_DEMAND_MEAN])) + 0.5)
    return SkuModel(lead, life, b, states, lookup.reshape(-1), pmf, tail, emin, mean, costs, init)


@njit(cache=True, parallel=True)
def _sweep(states, lookup, radix, classes, life, t, pmf, tail, emin, mean, costs, v_next, levels, lots,
           v_out, act_out):
    """One day of the backward recursion: v_out[s] = max_q Q_t(s, q) and its least argmax.
    `levels` [K] (K > 0): only the orders of the cover grid (up to level_k + lots[k] below
    level_k, else nothing) are allowed; K = 0: every q with position + q <= B."""
    n, dims = states.shape
    bound = radix - 1
    price, hold, pen, unit, fixed, waste_c = costs[0], costs[1], costs[2], costs[3], costs[4], costs[5]
    for s in prange(n):
        comp = states[s]
        y = 0
        for r in range(classes):
            y += comp[r]
        pos = 0
        for k in range(dims):
            pos += comp[k]
        sold = emin[t, y]
        base = price * sold - pen * (mean[t] - sold)
        flat = np.empty(y + 1, np.int64)
        prob = np.empty(y + 1, np.float64)
        left = np.empty(classes, np.int64)
        for d in range(y + 1):
            rem = d
            for r in range(classes):
                take = min(comp[r], rem)
                left[r] = comp[r] - take
                rem -= take
            p_d = pmf[t, d] if d < y else tail[t, y]
            wasted = left[0] if life > 0 else 0
            kept = 0
            for r in range(classes):
                kept += left[r]
            kept -= wasted
            base -= p_d * (hold * kept + waste_c * wasted)
            # next components: on hand shifted one day older (wasted leave), tomorrow's
            # arrival joins as the newest class, the pipeline moves up, today's order last
            nxt = 0
            if life > 0:
                for r in range(1, classes):
                    nxt = nxt * radix + left[r]
                nxt = nxt * radix + (comp[classes] if dims > classes else 0)
            else:
                nxt = left[0] + (comp[1] if dims > 1 else 0)
            for k in range(classes + 1, dims):
                nxt = nxt * radix + comp[k]
            if dims > classes:  # lead >= 2: the order has its own pipeline slot
                nxt = nxt * radix  # the order's component, filled with q below
            flat[d] = nxt
            prob[d] = p_d
        best = -np.inf
        arg = 0
        nq = bound - pos + 1 if levels.shape[0] == 0 else levels.shape[0]
        for j in range(nq):
            if levels.shape[0] == 0:
                q = j
            else:
                q = levels[j] - pos + lots[j] if levels[j] > pos else 0
                q = min(q, bound - pos)
            val = -unit * q - (fixed if q > 0 else 0.0)
            for d in range(y + 1):
                val += prob[d] * v_next[lookup[flat[d] + q]]
            if val > best + 1e-12 or (abs(val - best) <= 1e-12 and q < arg):
                best = val
                arg = q
        v_out[s] = base + best
        act_out[s] = arg


def terminal_value(model: SkuModel) -> np.ndarray:
    """Units left at the horizon, valued at their unit cost (they save a purchase) when they
    never expire, else nothing: damps the end effect of a finite horizon."""
    if model.life > 0:
        return np.zeros(model.states.shape[0])
    return model.costs[3] * model.states.sum(axis=1).astype(np.float64)


def solve(model: SkuModel, keep_days: int, levels: np.ndarray | None = None, lot: int | np.ndarray = 0,
          terminal: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Backward recursion over days T-1..0: (V_0 [n], orders int32 [keep_days, n] of days
    0..keep_days-1). `levels` [T, K]: the cover-grid restriction of _sweep, `lot` one lot or
    one per level column [K] (a joint grid). `terminal` is read, never written."""
    days = model.pmf.shape[0]
    n = model.states.shape[0]
    # a copy: the sweeps swap the two value buffers and write into the one that held V_T
    v = terminal_value(model) if terminal is None else np.array(terminal, np.float64, copy=True)
    v_out = np.empty(n)
    act = np.empty(n, np.int64)
    policy = np.zeros((keep_days, n), np.int32)
    radix = model.bound + 1
    no_levels = np.zeros(0, np.int64)
    width = 0 if levels is None else levels.shape[1]
    lots = np.ascontiguousarray(np.broadcast_to(np.asarray(lot, np.int64), (width,)))
    for t in range(days - 1, -1, -1):
        lv = no_levels if levels is None else np.ascontiguousarray(levels[t], dtype=np.int64)
        _sweep(model.states, model.lookup, radix, model.on_hand_classes, model.life, t, model.pmf, model.tail,
               model.emin, model.mean, model.costs, v, lv, lots, v_out, act)
        v, v_out = v_out, v
        if t < keep_days:
            policy[t] = act
    return v, policy


def initial_state(model: SkuModel) -> int:
    """Index of the day-0 state: `init` units with the whole shelf life left, nothing due."""
    comp = np.zeros(model.dims, np.int64)
    comp[model.on_hand_classes - 1] = min(model.init, model.bound)
    flat = 0
    for c in comp:
        flat = flat * (model.bound + 1) + int(c)
    return int(model.lookup[flat])
