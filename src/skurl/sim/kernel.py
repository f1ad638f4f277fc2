"""The vectorized step: numba kernels over all SKUs of a shard (docs/architecture.md, Simulator semantics).

Work is split into chunks of consecutive rows (chunks.py), run in parallel (prange); a
chunk's rows are simulated serially by one `sku_jit` function with all per-SKU code
(day.py, sku_ops.py) inlined. One day:
  for each chunk, in parallel: every row places its order, draws and serves its own demand;
    rows outside substitution groups settle the day, move to tomorrow and write their
    features; then the chunk's local groups pool their spill and settle their members;
  then, in parallel, the global groups (rows spread over chunks) do the same.
Every SKU (and every group) is processed by one thread from its own rows and counter-based
random numbers, so results do not depend on thread count, shard or row order.
`npipe` is the pipeline width P (columns S_PIPE.. of the state rows)."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from skurl.sim.day import init_sku, own_demand, serve_group, settle
from skurl.sim.jit import sku_jit
from skurl.sim.prefetch import prefetch_row
from skurl.sim.rng import sku_key
from skurl.sim.sku_ops import advance, write_features
from skurl.sim.state import (
    FAIL_FORECAST,
    P_GROUPED,
    P_SLOTS,
    S_FAIL,
    S_KEY,
    S_SLOT_OFF,
    W_BACKLOG_SERVED,
    W_CREDIT,
    W_DEMAND,
    W_ORDERED,
    W_OWN,
    W_SUB_SERVED,
    W_UNMET,
    Outputs,
    Params,
    State,
)

GROUPS_PER_ITEM = 128  # global groups per parallel work item
METRICS_PREFETCH_AHEAD = 8  # SKUs: ~1.3 us of work ahead of the metrics row's use (prefetch.py)


@njit(cache=True, inline="always")
def _clear_day(out: Outputs, i: np.int64) -> None:
    out.reward[i] = 0.0
    for k in range((out.acc.shape[1] - 1) // 2):  # the env's metric count (state.make_outputs)
        out.acc[i, k] = 0.0


@njit(cache=True, inline="always")
def _isolate(s: State, out: Outputs, i: np.int64, reason: np.int64, clear_day: bool) -> None:
    """Mask SKU i from now on: zero its features (and today's outputs when `clear_day`)."""
    if s.st[i, S_FAIL] == 0:
        s.st[i, S_FAIL] = reason
    s.failed[i] = True
    out.features[i, :] = 0.0
    if clear_day:
        _clear_day(out, i)


@sku_jit
def _reset_range(p: Params, s: State, out: Outputs, key: np.uint64, init_days: float,
                 npipe: np.int64, lo: np.int64, hi: np.int64) -> None:
    par, st, stock, forecast = p.par, s.st, s.stock, s.forecast
    for i in range(lo, hi):
        base = st[i, S_SLOT_OFF]
        for j in range(base, base + np.int64(par[i, P_SLOTS])):
            stock[j] = 0
        st[i, :] = 0
        st[i, S_SLOT_OFF] = base
        st[i, S_KEY] = np.int64(sku_key(key, p.sku_id[i]))
        forecast[i, :] = 0.0
        s.failed[i] = False
        out.reward[i] = 0.0
        out.acc[i, :] = 0.0
        reason = init_sku(par, st, stock, forecast, init_days, i)
        if reason != 0:
            _isolate(s, out, i, reason, True)
            continue
        write_features(par, st, stock, forecast, out.features, npipe, i, np.int64(0), True)


@njit(cache=True, parallel=True)
def reset_kernel(p: Params, s: State, out: Outputs, key: np.uint64, init_days: float,
                 npipe: np.int64) -> None:
    """Day 0: empty pipeline and backlog, initial stock at age 0, forecasts, features."""
    for c in prange(p.chunks.shape[0] - 1):
        _reset_range(p, s, out, key, init_days, npipe, p.chunks[c], p.chunks[c + 1])


@njit(cache=True, inline="always")
def _close_day(p: Params, s: State, out: Outputs, npipe: np.int64, i: np.int64, day: np.int64,
               v: tuple, sub_served: np.int64, credit: np.int64, backorders: bool,
               cost_mode: bool, features: bool) -> None:
    """Settle today (v: own_demand's values), move SKU i to tomorrow, write its features
    (unless `features` is off: a day's feature rows are ~a quarter of the kernel's time)."""
    settle(p.par, s.st, s.stock, out.reward, out.acc, i, day, v[1], v[2], v[3], v[4], v[5],
           sub_served, credit, backorders, cost_mode)
    if advance(p.par, s.st, s.stock, s.forecast, i, day):
        if features:
            write_features(p.par, s.st, s.stock, s.forecast, out.features, npipe, i, day + 1,
                           False)
    else:
        _isolate(s, out, i, FAIL_FORECAST, False)


@sku_jit
def _sku_range(p: Params, s: State, out: Outputs, orders: np.ndarray, npipe: np.int64,
               lo: np.int64, hi: np.int64, day: np.int64, backorders: bool, lifo: bool,
               cost_mode: bool, features: bool) -> None:
    """Own demand of rows lo..hi-1; rows outside substitution groups finish the day."""
    par, st = p.par, s.st
    zero = np.int64(0)
    last = par.shape[0] - 1
    for i in range(lo, hi):
        prefetch_row(out.acc, min(i + METRICS_PREFETCH_AHEAD, last))
        if st[i, S_FAIL] != 0:
            _clear_day(out, i)
            continue
        v = own_demand(par, st, s.stock, i, day, orders[i], backorders, lifo)
        if v[0] != 0:
            _isolate(s, out, i, v[0], True)
        elif par[i, P_GROUPED] == 0.0:
            _close_day(p, s, out, npipe, i, day, v, zero, zero, backorders, cost_mode, features)


@sku_jit
def _group_range(p: Params, s: State, out: Outputs, groups: np.ndarray, npipe: np.int64,
                 lo: np.int64, hi: np.int64, day: np.int64, backorders: bool, lifo: bool,
                 cost_mode: bool, features: bool) -> None:
    """Substitution within groups[lo:hi], then their members finish the day."""
    starts, rows = p.group_start, p.group_rows
    for k in range(lo, hi):
        g = groups[k]
        serve_group(p.par, s.st, s.stock, rows, starts[g], starts[g + 1], day, lifo)
        st = s.st
        for r in range(starts[g], starts[g + 1]):
            i = rows[r]
            if st[i, S_FAIL] == 0:
                v = (np.int64(0), st[i, W_ORDERED], st[i, W_DEMAND], st[i, W_OWN],
                     st[i, W_BACKLOG_SERVED], st[i, W_UNMET])
                _close_day(p, s, out, npipe, i, day, v, st[i, W_SUB_SERVED], st[i, W_CREDIT],
                           backorders, cost_mode, features)


@njit(cache=True, parallel=True)
def step_kernel(p: Params, s: State, out: Outputs, orders: np.ndarray, npipe: np.int64,
                day: np.int64, backorders: bool, lifo: bool, cost_mode: bool,
                features: bool = True) -> None:
    """One day for every SKU (see the module docstring); `features` off leaves the feature
    rows as they were (VectorEnv.observe_features: for decision rules that read raw state)."""
    for c in prange(p.chunks.shape[0] - 1):
        _sku_range(p, s, out, orders, npipe, p.chunks[c], p.chunks[c + 1], day, backorders,
                   lifo, cost_mode, features)
        _group_range(p, s, out, p.local_groups, npipe, p.chunk_groups[c],
                     p.chunk_groups[c + 1], day, backorders, lifo, cost_mode, features)
    n_global = p.global_groups.shape[0]
    for c in prange((n_global + GROUPS_PER_ITEM - 1) // GROUPS_PER_ITEM):
        lo = np.int64(c) * GROUPS_PER_ITEM
        _group_range(p, s, out, p.global_groups, npipe, lo, min(lo + GROUPS_PER_ITEM, n_global),
                     day, backorders, lifo, cost_mode, features)


SERIAL_ORDER_CHECK = 1 << 20  # orders checked in one thread below this: a parallel region's start
# cost more than the scan (6% of a rollout's time on 10^5 clone rows, bench rollouts' profile)


def first_bad_order(orders: np.ndarray, cap: float) -> int:
    """Index of the first order that is NaN, < 0 or > cap, or -1."""
    if orders.shape[0] <= SERIAL_ORDER_CHECK:
        return int(_first_bad_serial(orders, cap))
    return int(_first_bad_parallel(orders, cap))


@njit(cache=True)
def _first_bad_serial(orders: np.ndarray, cap: float) -> int:
    for i in range(orders.shape[0]):
        x = orders[i]
        if not (x >= 0.0 and x <= cap):
            return i
    return -1


@njit(cache=True, parallel=True)
def _first_bad_parallel(orders: np.ndarray, cap: float) -> int:
    """first_bad_order in one parallel pass over blocks."""
    n = orders.shape[0]
    block = 65536
    items = (n + block - 1) // block
    firsts = np.full(items, n, np.int64)
    for c in prange(items):
        for i in range(c * block, min((c + 1) * block, n)):
            x = orders[i]
            if not (x >= 0.0 and x <= cap):
                firsts[c] = i
                break
    first = n
    for c in range(items):
        first = min(first, firsts[c])
    return first if first < n else -1
