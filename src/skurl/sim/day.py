"""One SKU's day (docs/architecture.md, Simulator semantics), as numba functions inlined into the kernels' loops.

own_demand: the order is placed, demand drawn and served (backlog first) from own stock.
serve_group: a substitution group's spilled demand is served by members with stock left.
settle: lost sales or backlog, expiry, costs, reward, metrics and the sales history.
init_sku: the state at reset (stock, forecasts).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from skurl.sim.api import STREAM_DEMAND, STREAM_SUBSTITUTION
from skurl.sim.demand import MAX_COUNT, sample_demand
from skurl.sim.jit import sku_jit
from skurl.sim.rng import uniform
from skurl.sim.sku_ops import (
    F32_MAX,
    MAX_MEAN,
    delay_days,
    forecast_of,
    ipar,
    issue,
    key_of,
    mean_on,
    params_ok,
)
from skurl.sim.state import (
    FAIL_FORECAST,
    FAIL_MEAN,
    FAIL_OVERFLOW,
    FAIL_PARAMS,
    M_ARRIVED,
    M_DEMAND,
    M_HOLDING,
    M_LOST,
    M_ON_HAND_END,
    M_ORDER,
    M_ORDERED,
    M_PENALTY,
    M_PURCHASE,
    M_REVENUE,
    M_SALES,
    M_SUBSTITUTED,
    M_WASTE,
    M_WASTE_COST,
    NM_PLAIN,
    P_DEMAND_MEAN,
    P_DISPERSION,
    P_DIST,
    P_GROUPED,
    P_HOLDING,
    P_LEAD,
    P_LOST_SALE,
    P_ORDER_COST,
    P_PRICE,
    P_SHELF,
    P_SLOTS,
    P_SUB_FRAC,
    P_UNIT_COST,
    P_WASTE_COST,
    S_ARRIVED,
    S_BACKLOG,
    S_FAIL,
    S_LOST_YDAY,
    S_ON_HAND,
    S_PIPE,
    S_SALES_DAY,
    S_SALES_WEEK,
    S_SALES_YDAY,
    S_SLOT_OFF,
    T0_PLAIN,
    W_BACKLOG_SERVED,
    W_CREDIT,
    W_DEMAND,
    W_ORDERED,
    W_OWN,
    W_SPILL,
    W_SUB_SERVED,
    W_UNMET,
)


@njit(cache=True, inline="always")
def init_sku(par: np.ndarray, st: np.ndarray, stock: np.ndarray, forecast: np.ndarray,
             init_days: float, i: np.int64) -> int:
    """Initial stock at age 0 (k days of demand, rounded half up) and the forecasts of days
    0..H-1. Returns a FAIL_* code or 0."""
    if not params_ok(par, i):
        return FAIL_PARAMS
    days = init_days if init_days >= 0.0 else np.float64(ipar(par, i, P_LEAD) + 1)
    init = math.floor(days * np.float64(par[i, P_DEMAND_MEAN]) + 0.5)
    if not init <= MAX_COUNT:
        return FAIL_OVERFLOW
    stock[st[i, S_SLOT_OFF]] = np.int64(init)
    st[i, S_ON_HAND] = np.int64(init)
    key = key_of(st, i)
    for d in range(forecast.shape[1]):
        f = forecast_of(par, i, key, np.int64(d))
        if not abs(f) <= F32_MAX:
            return FAIL_FORECAST
        forecast[i, d] = f
    return 0


@njit(cache=True, inline="always")
def own_demand(par: np.ndarray, st: np.ndarray, stock: np.ndarray, i: np.int64, day: np.int64,
               order: float, backorders: bool, lifo: bool) -> tuple:
    """Place today's order, draw demand, serve it (and the backlog) from own stock.
    Returns (FAIL_* code or 0, ordered, demand, own sales, backlog served, unmet demand);
    SKUs in substitution groups also keep them, with their spill, in the W_* columns for
    the group pass (the others settle from registers)."""
    key = key_of(st, i)
    mean = mean_on(par, i, day)
    zero = np.int64(0)
    if not (mean >= 0.0 and mean <= MAX_MEAN):
        return np.int64(FAIL_MEAN), zero, zero, zero, zero, zero
    demand = sample_demand(ipar(par, i, P_DIST), mean, np.float64(par[i, P_DISPERSION]), key,
                           day, np.int64(STREAM_DEMAND))
    owed = st[i, S_BACKLOG]
    if not demand <= MAX_COUNT or owed + np.int64(demand) > MAX_COUNT:
        return np.int64(FAIL_OVERFLOW), zero, zero, zero, zero, zero
    d = np.int64(demand)
    q = np.int64(math.floor(order + 0.5))
    if q > 0:
        st[i, S_PIPE + ipar(par, i, P_LEAD) + delay_days(par, i, key, day) - 1] += q
    need = owed + d if backorders else d
    have = st[i, S_ON_HAND]
    own = min(need, have)
    issue(stock, st[i, S_SLOT_OFF], ipar(par, i, P_SLOTS), day, own, have, lifo)
    st[i, S_ON_HAND] = have - own
    # The backlog is older than today's demand, so it is served first.
    backlog_served = min(owed, own) if backorders else zero
    unmet = d - (own - backlog_served)
    if par[i, P_GROUPED] != 0.0:
        spill = zero
        frac = np.float64(par[i, P_SUB_FRAC])
        if unmet > 0 and frac > 0.0:
            # Stochastic rounding: E[spill] = frac * unmet exactly.
            u = uniform(key, day, np.int64(STREAM_SUBSTITUTION), np.int64(0))
            spill = min(np.int64(math.floor(frac * unmet + u)), unmet)
        st[i, W_ORDERED] = q
        st[i, W_DEMAND] = d
        st[i, W_OWN] = own
        st[i, W_BACKLOG_SERVED] = backlog_served
        st[i, W_UNMET] = unmet
        st[i, W_SPILL] = spill
        st[i, W_SUB_SERVED] = 0
        st[i, W_CREDIT] = 0
    return zero, q, d, own, backlog_served, unmet


@sku_jit
def serve_group(par: np.ndarray, st: np.ndarray, stock: np.ndarray, rows: np.ndarray,
                lo: np.int64, hi: np.int64, day: np.int64, lifo: bool) -> None:
    """Pool the spill of members rows[lo:hi] (ascending sku_id); members with stock left
    serve it in that order; the served units are credited back to the origins in order.
    Isolated members take no part."""
    pool = 0
    for r in range(lo, hi):
        if st[rows[r], S_FAIL] == 0:
            pool += st[rows[r], W_SPILL]
    left = pool
    for r in range(lo, hi):
        if left == 0:
            break
        i = rows[r]
        have = st[i, S_ON_HAND]
        if st[i, S_FAIL] != 0 or have == 0:
            continue
        take = min(have, left)
        issue(stock, st[i, S_SLOT_OFF], ipar(par, i, P_SLOTS), day, take, have, lifo)
        st[i, S_ON_HAND] = have - take
        st[i, W_SUB_SERVED] = take
        left -= take
    served = pool - left
    for r in range(lo, hi):
        if served == 0:
            break
        i = rows[r]
        if st[i, S_FAIL] == 0:
            c = min(st[i, W_SPILL], served)
            st[i, W_CREDIT] = c
            served -= c


@njit(cache=True, inline="always")
def settle(par: np.ndarray, st: np.ndarray, stock: np.ndarray, reward: np.ndarray,
           acc: np.ndarray, i: np.int64, day: np.int64, q: np.int64, demand: np.int64,
           own: np.int64, backlog_served: np.int64, unmet: np.int64, sub_served: np.int64,
           credit: np.int64, backorders: bool, cost_mode: bool) -> None:
    """Close the day of SKU i: lost/backlog, expiry, costs, reward, metrics, sales history.
    `sub_served`: units it sold as a substitute; `credit`: its unmet units they served."""
    s = st[i]
    sales = own + sub_served
    lost = unmet - credit
    if backorders:
        s[S_BACKLOG] = s[S_BACKLOG] - backlog_served + lost
    waste = 0
    if par[i, P_SHELF] > 0.0:
        j = s[S_SLOT_OFF] + (day + 1) % ipar(par, i, P_SLOTS)  # arrived on day + 1 - life
        waste = stock[j]
        stock[j] = 0
        s[S_ON_HAND] -= waste
    left = s[S_ON_HAND]
    hold = np.float64(par[i, P_HOLDING]) * left
    penalty = np.float64(par[i, P_LOST_SALE]) * (s[S_BACKLOG] if backorders else lost)
    purchase = np.float64(par[i, P_UNIT_COST]) * q
    fixed = np.float64(par[i, P_ORDER_COST]) if q > 0 else 0.0
    waste_cost = np.float64(par[i, P_WASTE_COST]) * waste
    revenue = np.float64(par[i, P_PRICE]) * sales
    cost = hold + penalty + purchase + fixed + waste_cost
    r = -cost if cost_mode else revenue - cost
    reward[i] = r
    a = acc[i]
    a[M_DEMAND] = demand
    a[M_SALES] = sales
    a[M_LOST] = lost
    a[M_SUBSTITUTED] = credit
    a[M_WASTE] = waste
    a[M_ORDERED] = q
    a[M_ARRIVED] = s[S_ARRIVED]
    a[M_ON_HAND_END] = left
    a[M_HOLDING] = hold
    a[M_PENALTY] = penalty
    a[M_PURCHASE] = purchase
    a[M_ORDER] = fixed
    a[M_WASTE_COST] = waste_cost
    a[M_REVENUE] = revenue
    for k in range(NM_PLAIN):
        a[T0_PLAIN + k] += a[k]
    a[T0_PLAIN + NM_PLAIN] += r
    col = S_SALES_DAY + day % 7
    s[S_SALES_WEEK] += sales - s[col]
    s[col] = sales
    s[S_SALES_YDAY] = sales
    s[S_LOST_YDAY] = lost
