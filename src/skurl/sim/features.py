"""The one feature function: an inventory snapshot row (+ catalog parameters) -> observation.

`feature_row` is the observation of docs/architecture.md, Simulator semantics (column order of layout.schema_for), written
from the quantities an inventory snapshot holds (serve/snapshot.py documents them). The
simulator's kernel calls it with its own state (sku_ops.write_features: stock slots, shift
register, ring of sales) and serving calls it through `snapshot_features` with a snapshot's
columns, so a snapshot taken from the simulator gives the simulator's observation bit for
bit (sim/state_snapshot.py reads such a snapshot out of the simulator's arrays).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

N_FIXED_FEATURES = 26  # feature columns besides the expiring (A) and pipeline (P) blocks
N_STATIC = 10  # lead_time, shelf_life, log_demand, economics[6], demand_dispersion (layout.static_features)


@njit(cache=True, inline="always")
def put_scaled(row: np.ndarray, start: np.int64, src: np.ndarray, at: np.int64, n: np.int64,
               inv: float) -> None:
    """row[start + k] = src[at + k] * inv for k < n. Unsigned indices: numba wraps negative
    signed indices per element, which turns this loop into slow scatter stores."""
    to = np.uint64(start)
    fr = np.uint64(at)
    for k in range(np.uint64(n)):
        row[to + k] = src[fr + k] * inv


@njit(cache=True, inline="always")
def feature_row(row: np.ndarray, npipe: np.int64, inv: float, full: bool, on_hand: np.int64,
                exp_src: np.ndarray, exp_at1: np.int64, exp_n1: np.int64, exp_at2: np.int64,
                exp_n2: np.int64, backlog: np.int64, pipe_src: np.ndarray, pipe_at: np.int64,
                pipe_n: np.int64, forecast: np.ndarray, lead: np.int64, sales_yday: np.int64,
                sales_week: np.int64, history_days: int, lost_yday: np.int64,
                promo_today: bool, promo_ahead: bool, dow: np.int64, statics: np.ndarray,
                static_at: np.int64) -> None:
    """Write one observation row. Quantities are multiplied by inv = 1 / max(demand_mean, 0.1)
    (days of demand). Expiring units (soonest first) are exp_src[exp_at1:+exp_n1] then
    exp_src[exp_at2:+exp_n2]; the pipeline (due in 1, 2, ... days) pipe_src[pipe_at:+pipe_n];
    forecast[k] is the forecast of day t + k; statics[static_at:+10] the constant columns.

    `full` writes every column. Otherwise (the simulator's daily update of a row written the
    day before) the expiring and pipeline columns beyond those given keep their zeros, the
    static columns their values, and only yesterday's day-of-week column is cleared."""
    nexp = row.shape[0] - N_FIXED_FEATURES - npipe
    row[0] = on_hand * inv
    if full:
        for k in range(np.uint64(nexp)):
            row[k + np.uint64(1)] = 0.0
    put_scaled(row, np.int64(1), exp_src, exp_at1, exp_n1, inv)
    put_scaled(row, 1 + exp_n1, exp_src, exp_at2, exp_n2, inv)
    c = 1 + nexp
    row[c] = backlog * inv
    if full:
        for k in range(np.uint64(npipe)):
            row[np.uint64(c + 1) + k] = 0.0
    put_scaled(row, c + 1, pipe_src, pipe_at, pipe_n, inv)
    c += 1 + npipe
    row[c] = np.float64(forecast[0]) * inv
    protection = 0.0
    for k in range(lead + 1):
        protection += np.float64(forecast[k])
    row[c + 1] = protection * inv
    row[c + 2] = sales_yday * inv
    row[c + 3] = sales_week / max(history_days, 1) * inv
    row[c + 4] = lost_yday * inv
    row[c + 7] = 1.0 if promo_today else 0.0
    row[c + 8] = 1.0 if promo_ahead else 0.0
    first = c + 9
    if full:
        row[c + 5] = statics[static_at]  # lead_time
        row[c + 6] = statics[static_at + 1]  # shelf_life
        for k in range(7):
            row[first + k] = 0.0
        put_scaled(row, first + 7, statics, static_at + 2, np.int64(N_STATIC - 2), 1.0)
    else:
        row[first + (dow + 6) % 7] = 0.0  # yesterday's column
    row[first + dow] = 1.0


@njit(cache=True, parallel=True)
def snapshot_features(out: np.ndarray, npipe: np.int64, demand_mean: np.ndarray, lead: np.ndarray,
                      life: np.ndarray, statics: np.ndarray, on_hand: np.ndarray,
                      expiring: np.ndarray, backlog: np.ndarray, pipeline: np.ndarray,
                      forecast: np.ndarray, sales_yday: np.ndarray, sales_week: np.ndarray,
                      history_days: np.ndarray, lost_yday: np.ndarray, promo_today: np.ndarray,
                      promo_ahead: np.ndarray, dow: np.ndarray) -> None:
    """Observations out [N, D] of snapshot rows (serve/snapshot.py columns as arrays) with the
    catalog rows' demand_mean (float32), lead time, shelf life and static features."""
    nexp = expiring.shape[1]
    for i in prange(out.shape[0]):
        inv = 1.0 / max(np.float64(demand_mean[i]), 0.1)
        n = min(life[i], nexp) if life[i] > 0 else 0
        feature_row(out[i], npipe, inv, True, on_hand[i], expiring[i], np.int64(0), np.int64(n),
                    np.int64(0), np.int64(0), backlog[i], pipeline[i], np.int64(0), npipe,
                    forecast[i], lead[i], sales_yday[i], sales_week[i], history_days[i],
                    lost_yday[i], promo_today[i], promo_ahead[i], dow[i], statics[i], np.int64(0))
