"""The day of a catalog with supply networks (docs/networks.md, which details each step).

Every row belongs to one network (a lone row with an outside supplier is a network of one).
Networks run in parallel (prange), each by one thread, in this order:
  1. arrivals (on hand since the previous day's `advance`);
  2. orders: to the outside supplier at a root, else a request to the upstream;
  3. shipments from the top down, split by sim.upstream_allocation when an upstream is short;
     3b. after each upstream's shipments, transfers among its stores (sim.transfers, sim/transfers.py);
  4. customer demand at the stores (rows nobody orders from);
  5. costs on the end-of-day state, tomorrow (advance, features), the shared reward.
Rows of one network use their own rows' state only, so results do not depend on threads.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit, prange

from skurl.catalog.network import echelons, parent_rows
from skurl.catalog.schema import Catalog
from skurl.config import SimConfig
from skurl.errors import CatalogError
from skurl.sim.allocation import allocate
from skurl.sim.api import STREAM_DEMAND
from skurl.sim.demand import MAX_COUNT, sample_demand
from skurl.sim.jit import sku_jit
from skurl.sim.kernel import _clear_day, _isolate
from skurl.sim.network_cols import (
    N_DEMAND,
    N_LOST,
    N_ORDER,
    N_POS,
    N_REQUEST,
    N_SALES,
    N_SENT,
    N_SHIPPED,
)
from skurl.sim.sku_ops import (
    MAX_MEAN,
    advance,
    delay_days,
    ipar,
    issue,
    key_of,
    mean_on,
    slot_of,
    write_features,
)
from skurl.sim.state import (
    FAIL_FORECAST,
    FAIL_MEAN,
    FAIL_OVERFLOW,
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
    M_SHIP_COST,
    M_SUBSTITUTED,
    M_TRANSFER_COST,
    M_TRANSFERRED,
    M_WASTE,
    M_WASTE_COST,
    NM,
    P_DELAY_MAX,
    P_DEMAND_MEAN,
    P_DISPERSION,
    P_DIST,
    P_HOLDING,
    P_LEAD,
    P_LOST_SALE,
    P_ORDER_COST,
    P_PRICE,
    P_SHELF,
    P_SLOTS,
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
    T0,
    Outputs,
    Params,
    State,
)
from skurl.sim.transfers import TransferRule, transfer_among


class Network(NamedTuple):
    """Topology of a shard's networks (CSR arrays, int64)."""

    parent: np.ndarray  # [N] row of the upstream, -1 = outside supplier
    net_start: np.ndarray  # [K + 1] over net_rows
    net_rows: np.ndarray  # rows of each network, upstream before downstream
    child_start: np.ndarray  # [N + 1] over child_rows
    child_rows: np.ndarray  # locations each row supplies, ascending sku_id
    echelon: np.ndarray  # [N] 1 at stores, 1 + the largest below otherwise
    owed: np.ndarray  # [N] units the upstream owes this row (state, zeroed at reset)
    ship_cost: np.ndarray  # [N] float32, per unit shipped to the row by its upstream


def make_network(catalog: Catalog) -> Network:
    """The topology of `catalog` (validated, whole networks)."""
    parent, root, echelon = echelons(catalog)
    n = len(catalog)
    sku = catalog.sku_id
    order = np.lexsort((sku, -echelon, sku[root]))
    first = np.ones(n, bool)
    first[1:] = root[order][1:] != root[order][:-1]
    net_start = np.append(np.flatnonzero(first), n).astype(np.int64)
    kids = np.flatnonzero(parent >= 0)
    kids = kids[np.lexsort((sku[kids], parent[kids]))]
    counts = np.bincount(parent[kids], minlength=n)
    child_start = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return Network(parent.astype(np.int64), net_start, order.astype(np.int64), child_start,
                   kids.astype(np.int64), echelon.astype(np.int64), np.zeros(n, np.int64),
                   np.ascontiguousarray(catalog.ship_cost, np.float32))


def network_for(catalog: Catalog, cfg: SimConfig) -> Network | None:
    """The topology for an env over `catalog`, None without networks (the plain kernel)."""
    if not catalog.has_network:
        return None
    grouped = catalog.group >= 0
    if cfg.substitution and grouped.any():
        i = int(np.argmax(grouped))
        raise CatalogError(f"catalog SKU {int(catalog.sku_id[i])}: field 'group' = {int(catalog.group[i])}: "
                           "a catalog with supply networks has no substitution, expected -1 "
                           "(or sim.substitution=false)")
    parent = parent_rows(catalog.sku_id, catalog.upstream)
    if (parent == -2).any():
        i = int(np.argmax(parent == -2))
        raise CatalogError(f"catalog SKU {int(catalog.sku_id[i])}: field 'upstream' = {int(catalog.upstream[i])} "
                           "is not in this shard, expected whole networks (catalog.partition keeps them)")
    return make_network(catalog)


@njit(cache=True, inline="always")
def _ship(p: Params, s: State, net: Network, u: np.int64, day: np.int64, lifo: bool, rule: np.int64,
          cancel: bool) -> None:
    """Step 3 at upstream row u: serve its locations' requests from its on-hand."""
    st, kids = s.st, net.child_rows
    lo, hi = net.child_start[u], net.child_start[u + 1]
    total = np.int64(0)
    for r in range(lo, hi):
        c = kids[r]
        req = np.int64(0) if st[c, S_FAIL] != 0 else st[c, N_ORDER] + net.owed[c]
        st[c, N_REQUEST] = req
        st[c, N_SHIPPED] = req
        total += req
    have = st[u, S_ON_HAND] if st[u, S_FAIL] == 0 else np.int64(0)
    if total > have:
        allocate(st, kids, lo, hi, have, rule)
    shipped = np.int64(0)
    owed = np.int64(0)
    for r in range(lo, hi):
        c = kids[r]
        q = st[c, N_SHIPPED]
        shipped += q
        net.owed[c] = 0 if cancel else st[c, N_REQUEST] - q
        owed += net.owed[c]
        if q == 0:
            continue
        lead = ipar(p.par, c, P_LEAD)
        if lead == 0:  # on hand today, as an arrival of today
            s.stock[st[c, S_SLOT_OFF] + slot_of(day, ipar(p.par, c, P_SLOTS))] += q
            st[c, S_ON_HAND] += q
            st[c, S_ARRIVED] += q
        else:
            st[c, S_PIPE + lead - 1] += q
    if shipped > 0:
        issue(s.stock, st[u, S_SLOT_OFF], ipar(p.par, u, P_SLOTS), day, shipped, have, lifo)
        st[u, S_ON_HAND] = have - shipped
    st[u, S_BACKLOG] = owed
    st[u, N_DEMAND] = total
    st[u, N_SALES] = shipped
    st[u, N_LOST] = total - shipped


@njit(cache=True, inline="always")
def _customers(p: Params, s: State, i: np.int64, day: np.int64, backorders: bool, lifo: bool) -> np.int64:
    """Step 4 at a store: draw demand, serve the backlog, then today's demand; FAIL_* or 0."""
    par, st = p.par, s.st
    key = key_of(st, i)
    mean = mean_on(par, i, day)
    if not (mean >= 0.0 and mean <= MAX_MEAN):
        return np.int64(FAIL_MEAN)
    demand = sample_demand(ipar(par, i, P_DIST), mean, np.float64(par[i, P_DISPERSION]), key, day,
                           np.int64(STREAM_DEMAND))
    owed = st[i, S_BACKLOG]
    if not demand <= MAX_COUNT or owed + np.int64(demand) > MAX_COUNT:
        return np.int64(FAIL_OVERFLOW)
    d = np.int64(demand)
    need = owed + d if backorders else d
    have = st[i, S_ON_HAND]
    own = min(need, have)
    issue(s.stock, st[i, S_SLOT_OFF], ipar(par, i, P_SLOTS), day, own, have, lifo)
    st[i, S_ON_HAND] = have - own
    served = min(owed, own) if backorders else np.int64(0)
    lost = d - (own - served)
    if backorders:
        st[i, S_BACKLOG] = owed - served + lost
    st[i, N_DEMAND] = d
    st[i, N_SALES] = own
    st[i, N_LOST] = lost
    return np.int64(0)


@njit(cache=True, inline="always")
def _settle(p: Params, s: State, net: Network, out: Outputs, i: np.int64, day: np.int64,
            backorders: bool, cost_mode: bool, cancel: bool, rule: TransferRule) -> None:
    """Step 5 at row i: expiry, costs on the end-of-day state, reward, metrics, history.
    Holding: own rate on on-hand, the upstream's rate on units in transit to it; purchase
    cost only on orders to an outside supplier; penalty on the store's lost or backlogged
    units, on the units an upstream owes (backorder) or failed to ship (cancel); shipping
    cost on the units shipped to it today, transfer cost on the units it sent."""
    par, st, stock = p.par, s.st, s.stock
    row = st[i]
    q = row[N_ORDER]
    waste = np.int64(0)
    if par[i, P_SHELF] > 0.0:
        j = row[S_SLOT_OFF] + (day + 1) % ipar(par, i, P_SLOTS)
        waste = stock[j]
        stock[j] = 0
        row[S_ON_HAND] -= waste
    left = row[S_ON_HAND]
    hold = np.float64(par[i, P_HOLDING]) * left
    u = net.parent[i]
    if u >= 0:
        transit = np.int64(0)
        for k in range(S_PIPE, row.shape[0]):
            transit += row[k]
        hold += np.float64(par[u, P_HOLDING]) * transit
    store = net.child_start[i + 1] == net.child_start[i]
    lost = row[N_LOST]
    if store:
        owed_units = row[S_BACKLOG] if backorders else lost
    else:
        owed_units = lost if cancel else row[S_BACKLOG]
    penalty = np.float64(par[i, P_LOST_SALE]) * owed_units
    purchase = np.float64(par[i, P_UNIT_COST]) * q if u < 0 else 0.0
    fixed = np.float64(par[i, P_ORDER_COST]) if q > 0 else 0.0
    waste_cost = np.float64(par[i, P_WASTE_COST]) * waste
    ship = np.float64(net.ship_cost[i]) * row[N_SHIPPED] if u >= 0 else 0.0
    sent = max(row[N_SENT], np.int64(0)) if rule.on and u >= 0 and store else np.int64(0)
    transfer = (rule.cost + rule.cost_share * np.float64(par[i, P_UNIT_COST])) * sent
    sales = row[N_SALES]
    revenue = np.float64(par[i, P_PRICE]) * sales if store else 0.0
    cost = hold + penalty + purchase + fixed + waste_cost + ship + transfer
    r = -cost if cost_mode else revenue - cost
    out.reward[i] = r
    a = out.acc[i]
    a[M_DEMAND] = row[N_DEMAND]
    a[M_SALES] = sales
    a[M_LOST] = lost
    a[M_SUBSTITUTED] = 0.0
    a[M_WASTE] = waste
    a[M_ORDERED] = q
    a[M_ARRIVED] = row[S_ARRIVED]
    a[M_ON_HAND_END] = left
    a[M_HOLDING] = hold
    a[M_PENALTY] = penalty
    a[M_PURCHASE] = purchase
    a[M_ORDER] = fixed
    a[M_WASTE_COST] = waste_cost
    a[M_REVENUE] = revenue
    a[M_SHIP_COST] = ship
    a[M_TRANSFER_COST] = transfer
    a[M_TRANSFERRED] = sent
    for k in range(NM):
        a[T0 + k] += a[k]
    a[T0 + NM] += r
    col = S_SALES_DAY + day % 7
    row[S_SALES_WEEK] += sales - row[col]
    row[col] = sales
    row[S_SALES_YDAY] = sales
    row[S_LOST_YDAY] = lost


@njit(cache=True, inline="always")
def _extra_features(p: Params, s: State, net: Network, feats: np.ndarray, base: np.int64, lo: np.int64,
                    hi: np.int64, features: bool) -> None:
    """The NETWORK_FIELDS columns (from `base`) of the rows net_rows[lo:hi], bottom up:
    upstream's on hand, pipeline and backlog, echelon position (units at and below the row,
    in transit to them, owed to the row, less the stores' backlog), echelon index. The
    state's column N_POS is written even when `features` is off (the state stays the same)."""
    st, rows = s.st, net.net_rows
    for r in range(hi - 1, lo - 1, -1):
        i = rows[r]
        pos = st[i, S_ON_HAND]
        for k in range(S_PIPE, st.shape[1]):
            pos += st[i, k]
        lo_c, hi_c = net.child_start[i], net.child_start[i + 1]
        if lo_c == hi_c:
            pos -= st[i, S_BACKLOG]
        for c in range(lo_c, hi_c):
            pos += st[net.child_rows[c], N_POS]
        st[i, N_POS] = pos
        if st[i, S_FAIL] != 0 or not features:
            continue
        inv = 1.0 / max(np.float64(p.par[i, P_DEMAND_MEAN]), 0.1)
        u = net.parent[i]
        row = feats[i]
        if u >= 0:
            pipe = np.int64(0)
            for k in range(S_PIPE, st.shape[1]):
                pipe += st[u, k]
            row[base] = np.float64(st[u, S_ON_HAND]) * inv
            row[base + 1] = np.float64(pipe) * inv
            row[base + 2] = np.float64(st[u, S_BACKLOG]) * inv
        else:
            row[base] = 0.0
            row[base + 1] = 0.0
            row[base + 2] = 0.0
        row[base + 3] = np.float64(pos + net.owed[i]) * inv
        row[base + 4] = np.float64(net.echelon[i])


@njit(cache=True, parallel=True)
def network_features_kernel(p: Params, s: State, net: Network, feats: np.ndarray, base: np.int64) -> None:
    """The network columns of every row (after reset)."""
    for k in prange(net.net_start.shape[0] - 1):
        _extra_features(p, s, net, feats, base, net.net_start[k], net.net_start[k + 1], True)


@sku_jit
def _network_range(p: Params, s: State, out: Outputs, feats: np.ndarray, base: np.int64, net: Network,
                   orders: np.ndarray, npipe: np.int64, lo: np.int64, hi: np.int64, day: np.int64,
                   backorders: bool, lifo: bool, cost_mode: bool, rule: np.int64, cancel: bool,
                   shared: bool, xfer: TransferRule, features: bool) -> None:
    """One day of the network whose rows are net_rows[lo:hi] (upstream first); `features`
    off leaves the feature rows as they were (VectorEnv.observe_features)."""
    par, st, rows = p.par, s.st, net.net_rows
    for r in range(lo, hi):  # 2. orders
        i = rows[r]
        q = np.int64(math.floor(orders[i] + 0.5))
        st[i, N_ORDER] = q if st[i, S_FAIL] == 0 else np.int64(0)
        st[i, N_DEMAND] = 0
        st[i, N_SALES] = 0
        st[i, N_LOST] = 0
        if net.parent[i] < 0 and q > 0 and st[i, S_FAIL] == 0:
            st[i, S_PIPE + ipar(par, i, P_LEAD) + delay_days(par, i, key_of(st, i), day) - 1] += q
    for r in range(lo, hi):  # 3. shipments, top down
        i = rows[r]
        if net.child_start[i + 1] > net.child_start[i]:
            _ship(p, s, net, i, day, lifo, rule, cancel)
            if xfer.on:  # 3b. transfers among its stores
                transfer_among(par, st, s.stock, p.sku_id, net.child_rows, net.child_start[i],
                               net.child_start[i + 1], net.child_start, xfer, day, lifo)
    for r in range(lo, hi):  # 4. customer demand at the stores
        i = rows[r]
        if st[i, S_FAIL] == 0 and net.child_start[i + 1] == net.child_start[i]:
            reason = _customers(p, s, i, day, backorders, lifo)
            if reason != 0:
                _isolate(s, out, i, reason, True)
    for r in range(lo, hi):  # 5. costs, then tomorrow
        i = rows[r]
        if st[i, S_FAIL] != 0:
            _clear_day(out, i)
            continue
        _settle(p, s, net, out, i, day, backorders, cost_mode, cancel, xfer)
        if advance(par, st, s.stock, s.forecast, i, day):
            if features:
                # transfers may fill pipeline columns beyond the row's own lead + delay: all columns then
                full = xfer.on and xfer.lead > ipar(par, i, P_LEAD) + ipar(par, i, P_DELAY_MAX)
                write_features(par, st, s.stock, s.forecast, out.features, npipe, i, day + 1, full)
        else:
            _isolate(s, out, i, FAIL_FORECAST, False)
            feats[i, :] = 0.0
    _extra_features(p, s, net, feats, base, lo, hi, features)
    if shared:  # the network's mean reward per location, summed upstream first
        total = 0.0
        for r in range(lo, hi):
            total += np.float64(out.reward[rows[r]])
        mean = total / np.float64(hi - lo)
        for r in range(lo, hi):
            out.reward[rows[r]] = mean


@njit(cache=True, parallel=True)
def network_step_kernel(p: Params, s: State, out: Outputs, feats: np.ndarray, base: np.int64, net: Network,
                        orders: np.ndarray, npipe: np.int64, day: np.int64, backorders: bool, lifo: bool,
                        cost_mode: bool, rule: np.int64, cancel: bool, shared: bool, xfer: TransferRule,
                        features: bool = True) -> None:
    """One day of every network of the shard (module docstring). `out.features` is the view
    of the base columns, `feats` the whole matrix (network columns from `base`)."""
    for k in prange(net.net_start.shape[0] - 1):
        _network_range(p, s, out, feats, base, net, orders, npipe, net.net_start[k], net.net_start[k + 1],
                       day, backorders, lifo, cost_mode, rule, cancel, shared, xfer, features)
