"""Per-SKU building blocks of the kernels (numba, inlined into the chunk loops).

Each function touches row i only, so the kernels can run them for all SKUs in parallel
with results independent of thread count and row order. Blocks and columns: state.py.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from skurl.sim.api import STREAM_DELAY, STREAM_FORECAST
from skurl.sim.demand import daily_mean, is_promo_day, normal
from skurl.sim.features import N_FIXED_FEATURES, feature_row
from skurl.sim.jit import sku_jit
from skurl.sim.rng import uniform
from skurl.sim.state import (
    P_DELAY_MAX,
    P_DELAY_PROB,
    P_DEMAND_MEAN,
    P_DISPERSION,
    P_DIST,
    P_FORECAST_NOISE,
    P_LEAD,
    P_PROMO_LENGTH,
    P_PROMO_OFFSET,
    P_PROMO_PERIOD,
    P_PROMO_UPLIFT,
    P_SEASON,
    P_SHELF,
    P_SLOTS,
    P_STATIC,
    P_TREND,
    S_ARRIVED,
    S_BACKLOG,
    S_KEY,
    S_LOST_YDAY,
    S_ON_HAND,
    S_PIPE,
    S_SALES_WEEK,
    S_SALES_YDAY,
    S_SLOT_OFF,
)

# A day's demand mean beyond this is treated as an impossible state (the SKU is isolated):
# it keeps every count, with a day's demand and a backlog, far below 2^63.
MAX_MEAN = 2.0**50
F32_MAX = 3.4028234663852886e38


@njit(cache=True, inline="always")
def ipar(par: np.ndarray, i: np.int64, col: int) -> np.int64:
    """An integer parameter (stored exactly in the float32 parameter block)."""
    return np.int64(par[i, col])


@njit(cache=True, inline="always")
def key_of(st: np.ndarray, i: np.int64) -> np.uint64:
    return np.uint64(st[i, S_KEY])


@njit(cache=True, inline="always")
def promo_on(par: np.ndarray, i: np.int64, day: np.int64) -> bool:
    return is_promo_day(day, ipar(par, i, P_PROMO_PERIOD), ipar(par, i, P_PROMO_LENGTH),
                        ipar(par, i, P_PROMO_OFFSET))


@njit(cache=True, inline="always")
def mean_on(par: np.ndarray, i: np.int64, day: np.int64) -> float:
    return daily_mean(np.float64(par[i, P_DEMAND_MEAN]), np.float64(par[i, P_SEASON + day % 7]),
                      np.float64(par[i, P_TREND]), np.float64(par[i, P_PROMO_UPLIFT]),
                      promo_on(par, i, day), day)


@njit(cache=True, inline="always")
def forecast_of(par: np.ndarray, i: np.int64, key: np.uint64, day: np.int64) -> float:
    """Forecast of `day`: mean(day) * exp(sigma z - sigma^2 / 2), a mean-preserving
    lognormal error with z drawn at (sku, day, STREAM_FORECAST), so every ask for one day
    agrees. The trend's and the error's exponentials share one exp(), in the order of
    daily_mean, so with sigma = 0 the forecast is the mean exactly."""
    sigma = np.float64(par[i, P_FORECAST_NOISE])
    exponent = np.float64(par[i, P_TREND]) * day
    if sigma > 0.0:
        z, _ = normal(key, day, np.int64(STREAM_FORECAST), np.int64(0))
        exponent = exponent + (sigma * z - 0.5 * (sigma * sigma))
    m = np.float64(par[i, P_DEMAND_MEAN]) * np.float64(par[i, P_SEASON + day % 7])
    if exponent != 0.0:  # exp(0) = 1: skipping it changes nothing
        m = m * math.exp(exponent)
    if promo_on(par, i, day):
        m = m * (1.0 + np.float64(par[i, P_PROMO_UPLIFT]))
    return m


@njit(cache=True, inline="always")
def delay_days(par: np.ndarray, i: np.int64, key: np.uint64, day: np.int64) -> np.int64:
    """Extra days of an order placed today: 1..delay_max with prob delay_prob, else 0."""
    dmax = ipar(par, i, P_DELAY_MAX)
    prob = np.float64(par[i, P_DELAY_PROB])
    if dmax <= 0 or prob <= 0.0:
        return np.int64(0)
    if uniform(key, day, np.int64(STREAM_DELAY), np.int64(0)) >= prob:
        return np.int64(0)
    extra = 1 + np.int64(math.floor(uniform(key, day, np.int64(STREAM_DELAY), np.int64(1)) * dmax))
    return min(extra, dmax)


@njit(cache=True, inline="always")
def slot_of(day: np.int64, slots: np.int64) -> np.int64:
    """day % slots (day >= 0) without a division for the one-slot (non-perishable) SKUs."""
    return np.int64(0) if slots == 1 else day % slots


@sku_jit
def issue(stock: np.ndarray, base: np.int64, slots: int, day: int,
          amount: np.int64, left_before: np.int64, lifo: bool) -> None:
    """Take `amount` (<= units on hand) from the slots, oldest first (fifo) or newest first.
    Slot (day + 1) % slots holds the oldest units (they expire tonight), day % slots the
    newest (arrived today)."""
    if amount <= 0:
        return
    if amount >= left_before:
        for j in range(slots):
            stock[base + j] = 0
        return
    if slots == 1:
        stock[base] -= amount
        return
    step = slots - 1 if lifo else 1  # (j + step) % slots walks newer->older or older->newer
    j = day % slots if lifo else (day + 1) % slots
    for _ in range(slots):
        take = min(stock[base + j], amount)
        stock[base + j] -= take
        amount -= take
        if amount == 0:
            return
        j += step  # < 2 * slots: one subtraction is the modulo
        if j >= slots:
            j -= slots


@njit(cache=True, inline="always")
def advance(par: np.ndarray, st: np.ndarray, stock: np.ndarray, forecast: np.ndarray,
            i: np.int64, day: np.int64) -> bool:
    """Move SKU i from the end of `day` to the start of day + 1: today's arrivals join stock
    at age 0, the pipeline and the forecast window shift by one day. False when the new
    forecast is not a finite float32 (the caller isolates the SKU)."""
    # The whole pipeline shifts, not only the lead + delay slots this SKU can use (the others
    # hold zeros): a fixed-length loop over unsigned indices is vectorized; the SKU's own
    # length with signed indices ran element by element (4.2 vs 10.5 ns per SKU, session 14).
    row = st[i]
    arrival = row[S_PIPE]
    last = np.uint64(row.shape[0] - 1)
    for k in range(np.uint64(S_PIPE), last):
        row[k] = row[k + np.uint64(1)]
    row[last] = 0
    tomorrow = day + 1
    stock[row[S_SLOT_OFF] + slot_of(tomorrow, ipar(par, i, P_SLOTS))] += arrival
    row[S_ON_HAND] += arrival
    row[S_ARRIVED] = arrival
    h = forecast.shape[1]
    for k in range(h - 1):
        forecast[i, k] = forecast[i, k + 1]
    f = forecast_of(par, i, key_of(st, i), tomorrow + h - 1)
    ok = abs(f) <= F32_MAX
    forecast[i, h - 1] = f if ok else 0.0
    return ok


@njit(cache=True, inline="always")
def promo_within(par: np.ndarray, i: np.int64, first: np.int64, days: np.int64) -> bool | np.bool_:
    """Any promo day in first..first+days-1: the window covers the residues r..r+days-1
    (mod period) of day - offset, r = (first - offset) mod period; promo residues are
    0..length-1, so it hits one iff it starts in them or wraps past period - 1."""
    period = ipar(par, i, P_PROMO_PERIOD)
    length = ipar(par, i, P_PROMO_LENGTH)
    if period <= 0 or length <= 0 or days <= 0:
        return False
    r = (first - ipar(par, i, P_PROMO_OFFSET)) % period
    return r < length or r + days - 1 >= period


@njit(cache=True, inline="always")
def write_features(par: np.ndarray, st: np.ndarray, stock: np.ndarray, forecast: np.ndarray,
                   feats: np.ndarray, npipe: np.int64, i: np.int64, day: np.int64,
                   full: bool) -> None:
    """Row i of the feature matrix for the start of `day` (after its arrivals), by the one
    feature function (features.feature_row) from this SKU's state.

    `full` writes every column (reset). Otherwise (the daily update of a row written the day
    before) only the columns that can change: expiring columns beyond the SKU's shelf life
    and pipeline columns beyond its lead time + delay are always zero, and lead time, shelf
    life and the last eight static columns never change; the day-of-week one-hot moves by
    one column. Most SKUs use a few of the A + P quantity columns, so this halves the
    stores of a day (the feature row was a quarter of the kernel's time)."""
    row = feats[i]
    s = st[i]
    nexp = row.shape[0] - N_FIXED_FEATURES - npipe
    inv = 1.0 / max(np.float64(par[i, P_DEMAND_MEAN]), 0.1)
    life = ipar(par, i, P_SHELF)
    base = s[S_SLOT_OFF]
    first = np.int64(0)
    head = np.int64(0)
    n = np.int64(0)
    if life > 0:
        # Units expiring at the end of day + k arrived on day + k + 1 - life, so sit in slot
        # (day + k + 1) % life: the slots from (day + 1) % life on, wrapping once.
        first = (day + 1) % life
        n = min(life, nexp)
        head = min(life - first, n)
    lead = ipar(par, i, P_LEAD)
    used = npipe if full else min(lead + ipar(par, i, P_DELAY_MAX), npipe)
    feature_row(row, npipe, inv, full, s[S_ON_HAND], stock, base + first, head, base, n - head,
                s[S_BACKLOG], s, np.int64(S_PIPE), used, forecast[i], lead, s[S_SALES_YDAY],
                s[S_SALES_WEEK], max(min(day, 7), 1), s[S_LOST_YDAY], promo_on(par, i, day),
                promo_within(par, i, day + 1, lead), day % 7, par[i], np.int64(P_STATIC))


@njit(cache=True, inline="always")
def params_ok(par: np.ndarray, i: np.int64) -> bool:
    """Finite and non-negative where the kernel needs counts or rates (unvalidated input)."""
    for k in range(P_STATIC):
        if not math.isfinite(par[i, k]):
            return False
    if not (par[i, P_DEMAND_MEAN] >= 0.0 and par[i, P_PROMO_UPLIFT] >= 0.0
            and par[i, P_FORECAST_NOISE] >= 0.0):
        return False
    for d in range(7):
        if not par[i, P_SEASON + d] >= 0.0:
            return False
    return ipar(par, i, P_DIST) != 2 or par[i, P_DISPERSION] > 0.0
