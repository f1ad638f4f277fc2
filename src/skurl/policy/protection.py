"""The protection-period moments and the inventory position of the order-up-to policies,
each one numba pass per SKU row (every baseline and the cover action grid call these every
simulated day).

The numpy form (cumsum over [N, H] days, then a gather at each SKU's cover length) did
the work of all H days for every SKU, on strided columns, and was 5x the simulator's own
time in per-SKU tuning (session 13 profile: cumsum 12 s, daily variance 11 s, the
simulator 6.5 s). Sums run in day order in float64, as the cumsum did, so the results are
the same to the bit.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from skurl.sim.demand import DIST_GEOMETRIC, DIST_NEGBIN

SERIAL_ROWS = 1 << 15  # below this one thread: a parallel region's start (~30 us on 2 threads)
# cost more than the pass (the position of 2,000 rows x 16 pipeline days: 7 us)


def cover_moments(forecast: np.ndarray, cover_days: np.ndarray, dist: np.ndarray,
                  dispersion: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mean, variance) float64 [N] of the demand over days 0..cover_days[i]-1 of row i
    of `forecast` [N, >= max cover_days] (daily means; days independent; per day the
    variance baselines.daily_variance gives for whole arrays). One thread below
    SERIAL_ROWS rows."""
    kernel = _moments_serial if forecast.shape[0] < SERIAL_ROWS else _moments_parallel
    return kernel(forecast, cover_days, dist, dispersion)


@njit(cache=True, inline="always")
def _row_moments(forecast: np.ndarray, cover_days: np.ndarray, dist: np.ndarray,
                 dispersion: np.ndarray, i: int) -> tuple[float, float]:
    kind = dist[i]
    size = np.float64(dispersion[i])
    s = 0.0
    v = 0.0
    for d in range(cover_days[i]):
        m = np.float64(forecast[i, d])
        s += m
        if kind == DIST_GEOMETRIC:
            v += m + m * m
        elif kind == DIST_NEGBIN:
            v += m + m * m / size
        else:
            v += m
    return s, v


@njit(cache=True)
def _moments_serial(forecast: np.ndarray, cover_days: np.ndarray, dist: np.ndarray,
                    dispersion: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = forecast.shape[0]
    mean = np.empty(n, np.float64)
    var = np.empty(n, np.float64)
    for i in range(n):
        mean[i], var[i] = _row_moments(forecast, cover_days, dist, dispersion, i)
    return mean, var


@njit(cache=True, parallel=True)
def _moments_parallel(forecast: np.ndarray, cover_days: np.ndarray, dist: np.ndarray,
                      dispersion: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = forecast.shape[0]
    mean = np.empty(n, np.float64)
    var = np.empty(n, np.float64)
    for i in prange(n):
        mean[i], var[i] = _row_moments(forecast, cover_days, dist, dispersion, i)
    return mean, var



def position(on_hand: np.ndarray, pipeline: np.ndarray, backlog: np.ndarray) -> np.ndarray:
    """on hand + the row's pipeline [N, P] - backlog, float64 [N]. Integer arrays (the env's
    strided views of its state rows) are summed in int64 by one numba pass: while the totals
    stay below 2^53 the same bits as numpy's float64 sum, which on a strided int64 view cast
    in buffers and was 6 of the 26 s of the README job's tuning (profile, 7 December 2026).
    Other dtypes take numpy's float64 sums."""
    if all(a.dtype.kind in "iu" for a in (on_hand, pipeline, backlog)) and pipeline.ndim == 2:
        kernel = _position_serial if on_hand.shape[0] < SERIAL_ROWS else _position_parallel
        return kernel(on_hand, pipeline, backlog)
    out = on_hand.astype(np.float64)
    if pipeline.size:
        out = out + pipeline.sum(axis=1, dtype=np.float64)
    return out - backlog.astype(np.float64)


@njit(cache=True, inline="always")
def _row_position(on_hand: np.ndarray, pipeline: np.ndarray, backlog: np.ndarray, i: int) -> np.float64:
    total = np.int64(on_hand[i]) - np.int64(backlog[i])
    for k in range(pipeline.shape[1]):
        total += np.int64(pipeline[i, k])
    return np.float64(total)


@njit(cache=True)
def _position_serial(on_hand: np.ndarray, pipeline: np.ndarray, backlog: np.ndarray) -> np.ndarray:
    out = np.empty(on_hand.shape[0], np.float64)
    for i in range(on_hand.shape[0]):
        out[i] = _row_position(on_hand, pipeline, backlog, i)
    return out


@njit(cache=True, parallel=True)
def _position_parallel(on_hand: np.ndarray, pipeline: np.ndarray, backlog: np.ndarray) -> np.ndarray:
    out = np.empty(on_hand.shape[0], np.float64)
    for i in prange(on_hand.shape[0]):
        out[i] = _row_position(on_hand, pipeline, backlog, i)
    return out
