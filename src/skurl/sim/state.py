"""The simulator's arrays: SKU parameters, mutable state and outputs.

Everything is allocated once per env. Per-SKU data lives in a few row-major blocks, one
row per SKU (row i = SKU i of the shard): a day of SKU i then reads and writes a handful
of contiguous rows instead of dozens of separate arrays (the hardware prefetcher tracks
only ~16 streams; measured 2-4x slower beyond that).

More: docs/internals.md (sim/state.py)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from skurl.catalog.schema import Catalog
from skurl.sim.chunks import chunk_layout
from skurl.sim.features import N_STATIC
from skurl.sim.layout import Layout, static_features

# DayMetrics fields in kernel order: acc[:, k] is today's value, acc[:, T0 + k] the total.
METRIC_FIELDS = (
    "demand", "sales", "lost", "substituted", "waste", "ordered", "arrived", "on_hand_end",
    "holding_cost", "penalty_cost", "purchase_cost", "order_cost", "waste_cost", "revenue",
    "ship_cost", "transfer_cost", "transferred",
)
TOTAL_FIELDS = (*METRIC_FIELDS, "reward")
(M_DEMAND, M_SALES, M_LOST, M_SUBSTITUTED, M_WASTE, M_ORDERED, M_ARRIVED, M_ON_HAND_END,
 M_HOLDING, M_PENALTY, M_PURCHASE, M_ORDER, M_WASTE_COST, M_REVENUE, M_SHIP_COST, M_TRANSFER_COST,
 M_TRANSFERRED) = range(17)
NM = 17  # the last three are written by supply networks only (sim/network.py)
T0 = NM  # totals start here; T0 + NM is the reward total
NACC = 2 * NM + 1
# Network-free envs keep the first NM_PLAIN fields only (acc [N, 2 NM_PLAIN + 1]: a narrower
# row for the memory-bound plain kernel); their last three fields read as zeros.
NM_PLAIN = 14
T0_PLAIN = NM_PLAIN

# Why a SKU was isolated (info()["failed_reasons"]).
FAIL_PARAMS = 1  # a parameter is NaN/inf/negative where a count or rate is needed
FAIL_MEAN = 2  # the day's demand mean is not finite or beyond MAX_MEAN
FAIL_OVERFLOW = 3  # a unit count would leave the int64 range the kernel guarantees
FAIL_FORECAST = 4  # a forecast is not a finite float32
FAIL_REASONS = {
    FAIL_PARAMS: "parameter not finite or out of range",
    FAIL_MEAN: "demand mean not finite or too large",
    FAIL_OVERFLOW: "unit count overflow",
    FAIL_FORECAST: "forecast not finite",
}

# Columns of par (float32).
FLOAT_COLUMNS = ("sub_frac", "demand_mean", "dispersion", "trend", "promo_uplift", "delay_prob",
                 "holding_cost", "lost_sale_cost", "order_cost", "unit_cost", "waste_cost",
                 "price", "forecast_noise")
INT_COLUMNS = ("demand_dist", "promo_period", "promo_length", "promo_offset", "lead_time",
               "delay_max", "shelf_life")
(P_SUB_FRAC, P_DEMAND_MEAN, P_DISPERSION, P_TREND, P_PROMO_UPLIFT, P_DELAY_PROB, P_HOLDING,
 P_LOST_SALE, P_ORDER_COST, P_UNIT_COST, P_WASTE_COST, P_PRICE, P_FORECAST_NOISE) = range(13)
(P_DIST, P_PROMO_PERIOD, P_PROMO_LENGTH, P_PROMO_OFFSET, P_LEAD, P_DELAY_MAX,
 P_SHELF) = range(13, 20)
P_SLOTS = 20  # stock slots (max(shelf_life, 1))
P_GROUPED = 21  # 1 if the SKU takes part in substitution
P_SEASON = 22  # 7 columns, day-of-week factors
P_STATIC = 29  # 10 columns, layout.static_features (lead, shelf, log demand, economics, dispersion)
NPAR = 39

# Columns of st (int64).
(S_ON_HAND, S_BACKLOG, S_SALES_WEEK, S_SALES_YDAY, S_LOST_YDAY, S_ARRIVED, S_FAIL, S_KEY,
 S_SLOT_OFF) = range(9)
S_SALES_DAY = 9  # 7 columns, sales of day d in column S_SALES_DAY + d % 7
# The day's scratch values, carried from own demand to the group pass and settlement.
(W_ORDERED, W_DEMAND, W_OWN, W_BACKLOG_SERVED, W_UNMET, W_SPILL, W_SUB_SERVED,
 W_CREDIT) = range(16, 24)
S_PIPE = 24  # P columns: pipeline[k-1] = units due on day t+k


class Params(NamedTuple):
    par: np.ndarray  # float32 [N, NPAR]
    sku_id: np.ndarray  # int64 [N]
    group_start: np.ndarray  # int64 [G + 1], CSR over group_rows
    group_rows: np.ndarray  # int64 [M], rows of each group, ascending sku_id
    chunks: np.ndarray  # int64 [C + 1], rows of work item c: chunks[c]..chunks[c+1]-1
    chunk_groups: np.ndarray  # int64 [C + 1], local groups of item c in local_groups
    local_groups: np.ndarray  # int64 [GL], groups settled by the item holding their rows
    global_groups: np.ndarray  # int64 [GG], groups settled in a pass of their own


class State(NamedTuple):
    st: np.ndarray  # int64 [N, NS]
    stock: np.ndarray  # int64 [sum of slots]
    forecast: np.ndarray  # float32 [N, H]
    failed: np.ndarray  # bool [N], isolated SKUs (written only when one fails)


class Outputs(NamedTuple):
    features: np.ndarray  # float32 [N, D]
    reward: np.ndarray  # float32 [N]
    acc: np.ndarray  # float64 [N, NACC]


def substitution_groups(catalog: Catalog, enabled: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(grouped mask, CSR starts, rows): members of each group in ascending sku_id order."""
    n = len(catalog)
    grouped = np.zeros(n, bool)
    if not enabled:
        return grouped, np.zeros(1, np.int64), np.zeros(0, np.int64)
    rows = np.flatnonzero(catalog.group >= 0)
    order = np.lexsort((catalog.sku_id[rows], catalog.group[rows]))
    rows = rows[order].astype(np.int64)
    grouped[rows] = True
    g = catalog.group[rows]
    bounds = np.flatnonzero(np.diff(g)) + 1 if rows.size else np.zeros(0, np.int64)
    starts = np.concatenate([[0], bounds, [rows.size]]).astype(np.int64)
    return grouped, starts, rows


def make_params(catalog: Catalog, substitution: bool) -> Params:
    n = len(catalog)
    par = np.zeros((n, NPAR), np.float32)
    for k, name in enumerate(FLOAT_COLUMNS):
        par[:, k] = getattr(catalog, name)
    for k, name in enumerate(INT_COLUMNS):
        par[:, P_DIST + k] = getattr(catalog, name)
    par[:, P_SLOTS] = np.maximum(catalog.shelf_life, 1)
    grouped, starts, rows = substitution_groups(catalog, substitution)
    par[:, P_GROUPED] = grouped
    par[:, P_SEASON:P_SEASON + 7] = catalog.season
    with np.errstate(invalid="ignore", divide="ignore"):
        par[:, P_STATIC:P_STATIC + N_STATIC] = static_features(catalog)
    chunks = chunk_layout(n, starts, rows)
    return Params(par, catalog.sku_id.astype(np.int64), starts, rows, *chunks)


def state_width(layout: Layout) -> int:
    return S_PIPE + layout.pipeline


def make_state(catalog: Catalog, layout: Layout) -> State:
    n = len(catalog)
    slots = np.maximum(catalog.shelf_life.astype(np.int64), 1)
    st = np.zeros((n, state_width(layout)), np.int64)
    st[:, S_SLOT_OFF] = np.cumsum(slots) - slots
    return State(st, np.zeros(int(slots.sum()), np.int64),
                 np.zeros((n, layout.horizon), np.float32), np.zeros(n, bool))


def make_outputs(n: int, layout: Layout, network: bool = False) -> Outputs:
    nm = NM if network else NM_PLAIN
    return Outputs(np.zeros((n, layout.dim), np.float32), np.zeros(n, np.float32),
                   np.zeros((n, 2 * nm + 1), np.float64))
