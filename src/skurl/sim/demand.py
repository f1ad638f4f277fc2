"""Demand: the daily mean of a SKU and samplers for its distribution, all counter-based.

Every sampler takes the SKU key, the day, the stream and the first draw index k, and
returns (value, next k), so samplers can be chained within one (sku, day, stream) without
any carried generator state (see rng.py).

More: docs/internals.md (sim/demand.py)."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from skurl.sim.rng import uniform
from skurl.sim.ziggurat import normal

DIST_POISSON = 0
DIST_GEOMETRIC = 1
DIST_NEGBIN = 2
POISSON_INVERSION_MAX_MEAN = 10.0
NEGBIN_INVERSION_MAX_MEAN = 20.0  # inversion beats the mixture up to ~30 (measured)
# Inversion also needs mean <= this * size (the search's tail bound, module docstring).
NEGBIN_INVERSION_MAX_MEAN_PER_SIZE = 20.0
MAX_ATTEMPTS = 10_000  # rejection loops accept with prob > 0.5; this cap is never reached
# Samples above this are "impossible" (the SKU is isolated); leaves headroom below 2^63.
MAX_COUNT = 2**60
INVERSION_CAP = 1000
_RECIPROCALS = 1.0 / np.maximum(np.arange(INVERSION_CAP + 1, dtype=np.float64), 1.0)
# Slack of the bounds of exp(-y): far above the rounding of exp, log1p and the polynomials
# (< 1e-14 relative for y <= 20), far below their approximation errors at typical y.
_BELOW_ONE = 1.0 - 2.0**-40
_ABOVE_ONE = 1.0 + 2.0**-40


@njit(cache=True, inline="always")
def is_promo_day(day: np.int64, period: np.int64, length: np.int64, offset: np.int64) -> np.bool_:
    """Promo day iff period > 0 and ((day - offset) mod period) < length (Python mod)."""
    return period > 0 and (day - offset) % period < length


@njit(cache=True, inline="always")
def daily_mean(base: float, season_factor: float, trend: float, uplift: float, promo: bool,
               day: np.int64) -> float:
    """mean(t) = base * season[t % 7] * exp(trend * t) * (1 + uplift on promo days)."""
    m = base * season_factor
    if trend != 0.0:  # exp(0) = 1: skipping it changes nothing
        m = m * math.exp(trend * day)
    if promo:
        m = m * (1.0 + uplift)
    return m


@njit(cache=True, inline="always")
def _taylor_exp_neg(z: float) -> tuple[float, float, float]:
    """The shared terms of the Taylor polynomials of exp(-z) in Estrin's scheme (a short
    dependency chain): P5(z) = head + z2^2 c4 and P6(z) = head + z2^2 (c4 + z2 / 720)."""
    z2 = z * z
    return (1.0 - z) + z2 * (0.5 - z * (1.0 / 6.0)), 1.0 / 24.0 - z * (1.0 / 120.0), z2


@njit(cache=True, inline="always")
def _pow8(b: float) -> float:
    b = b * b
    b = b * b
    return b * b


@njit(cache=True, inline="always")
def _below_exp_neg(y: float) -> float:
    """A lower bound of exp(-y), y >= 0, below the computed exp(-y) by far more than rounding:
    max(P5(y/8), 0)^8 (1 - 2^-40). exp(-z) >= P5(z) (Taylor, remainder z^6/720 e^-c >= 0) and
    P5 falls (P5' = -P4 < 0), so max(P5, 0) <= exp(-z) throughout; P5 reaches 0 near z = 2.18
    (no bound beyond y ~ 17.4). Relative gap ~y^6/(720 * 8^5) + 2^-40."""
    head, c4, z2 = _taylor_exp_neg(0.125 * y)
    return _pow8(max(head + (z2 * z2) * c4, 0.0)) * _BELOW_ONE


@njit(cache=True, inline="always")
def _above_exp_neg(y: float) -> float:
    """An upper bound of exp(-y), y >= 0, above the computed exp(-y) by far more than
    rounding: P6(y/8)^8 (1 + 2^-40); exp(-z) <= P6(z) (remainder -z^7/5040 e^-c <= 0) and
    P6 > 0. Relative gap ~y^7/(5040 * 8^6) + 2^-40 (loose, but valid, for large y)."""
    head, c4, z2 = _taylor_exp_neg(0.125 * y)
    return _pow8(head + (z2 * z2) * (c4 + z2 * (1.0 / 720.0))) * _ABOVE_ONE


@njit(cache=True, inline="always")
def _negbin_p0(mean: float, size: float) -> float:
    """P(X = 0) = (r / (r + m))^r as exp(-r log1p(m / r)): no rounding of r / (r + m) is
    raised to the power r (huge r stays accurate)."""
    return math.exp(-size * math.log1p(mean / size))


@njit(cache=True, inline="always")
def _search(u: float, lo: float, y_lo: float, a: float, b: float, mean: float, size: float,
            negbin: bool) -> float:
    """Sequential search inversion: the least x with u <= p0 * S(x), where p0 = P(X = 0) =
    exp(-y), S(x) = t(0) + .. + t(x), t(0) = 1, t(x) = t(x-1) * (a + b (x-1)) / x (= p(x) / p0),
    or INVERSION_CAP if none; the caller has found u > lo (not 0). lo <= p0 <= hi bound p0
    (hi from y_lo <= y): while they decide the comparisons (u <= lo * S: yes; u > hi * S: no;
    rounding is monotone, so these agree with u <= p0 * S as computed), p0 itself (an
    exponential, and a logarithm for the negative binomial) is never computed."""
    hi = _above_exp_neg(y_lo)
    s = 1.0
    t = 1.0
    x = 0
    while x < INVERSION_CAP:
        if u <= hi * s:
            break  # undecided: needs p0 itself
        x += 1
        # 1/x from a table: a multiply, not a divide, per step.
        t = t * ((a + b * (x - 1)) * _RECIPROCALS[x])
        s += t
        if u <= lo * s:
            return float(x)
    # The cap only matters when u sits within rounding error of 1 (cdf never reaches it).
    p0 = _negbin_p0(mean, size) if negbin else math.exp(-mean)
    while u > p0 * s and x < INVERSION_CAP:
        x += 1
        t = t * ((a + b * (x - 1)) * _RECIPROCALS[x])
        s += t
    return float(x)


@njit(cache=True, inline="always")
def _poisson_inversion(mean: float, skey: np.uint64, day: np.int64, stream: np.int64,
                       k: np.int64) -> tuple[float, np.int64]:
    # p0 = exp(-mean), p(x) = p(x-1) * mean / x.
    u = uniform(skey, day, stream, k)
    lo = _below_exp_neg(mean)
    # Most SKUs sell less than one unit a day: a zero without the exponential.
    if u <= lo:
        return 0.0, k + 1
    return _search(u, lo, mean, mean, 0.0, mean, 1.0, False), k + 1


@njit(cache=True)
def _poisson_ptrs(mean: float, skey: np.uint64, day: np.int64, stream: np.int64,
                  k: np.int64) -> tuple[float, np.int64]:
    # Hörmann (1993), algorithm PTRS; constants from table/equations of that paper.
    # log(mean) and 1 / alpha serve only the rare full test (~10% of draws): computed there.
    slam = math.sqrt(mean)
    b = 0.931 + 2.53 * slam
    a = -0.059 + 0.02483 * b
    v_r = 0.9277 - 3.6224 / (b - 2.0)
    for _ in range(MAX_ATTEMPTS):
        u = uniform(skey, day, stream, k) - 0.5
        v = uniform(skey, day, stream, k + 1)
        k += 2
        us = 0.5 - abs(u)
        x = math.floor((2.0 * a / us + b) * u + mean + 0.43)
        if us >= 0.07 and v <= v_r:
            return x, k
        if x < 0.0 or (us < 0.013 and v > us):
            continue
        inv_alpha = 1.1239 + 1.1328 / (b - 3.4)
        lhs = math.log(v * inv_alpha / (a / (us * us) + b))
        rhs = -mean + x * math.log(mean) - math.lgamma(x + 1.0)
        if lhs <= rhs:
            return x, k
    return math.floor(mean), k


@njit(cache=True, inline="always")
def poisson(mean: float, skey: np.uint64, day: np.int64, stream: np.int64,
            k: np.int64) -> tuple[float, np.int64]:
    """Poisson(mean) as a float (integral); mean must be finite and >= 0."""
    if mean <= 0.0:
        return 0.0, k
    if mean < POISSON_INVERSION_MAX_MEAN:
        return _poisson_inversion(mean, skey, day, stream, k)
    return _poisson_ptrs(mean, skey, day, stream, k)


@njit(cache=True, inline="always")
def geometric(mean: float, skey: np.uint64, day: np.int64, stream: np.int64,
              k: np.int64) -> tuple[float, np.int64]:
    """Failures before the first success, p = 1 / (1 + mean): P(X >= j) = (mean/(1+mean))^j."""
    if mean <= 0.0:
        return 0.0, k
    u = uniform(skey, day, stream, k)
    # log(1 - p) = -log1p(1 / mean), accurate for huge means where 1 - p rounds to 1.
    return math.floor(-math.log(u) / math.log1p(1.0 / mean)), k + 1


@njit(cache=True)
def gamma(shape: float, skey: np.uint64, day: np.int64, stream: np.int64,
          k: np.int64) -> tuple[float, np.int64]:
    """Gamma(shape, scale 1) by Marsaglia-Tsang (2000); shape > 0."""
    boost = 1.0
    a = shape
    if a < 1.0:
        boost = uniform(skey, day, stream, k) ** (1.0 / a)
        k += 1
        a = a + 1.0
    d = a - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    for _ in range(MAX_ATTEMPTS):
        z, k = normal(skey, day, stream, k)
        t = 1.0 + c * z
        if t <= 0.0:
            continue
        v = t * t * t
        u = uniform(skey, day, stream, k)
        k += 1
        # The squeeze of Marsaglia & Tsang accepts ~98% of draws without the logarithms; it
        # lies inside the exact region, so it changes no result.
        zz = z * z
        if u < 1.0 - 0.0331 * (zz * zz):
            return d * v * boost, k
        if math.log(u) < 0.5 * zz + d - d * v + d * math.log(v):
            return d * v * boost, k
    return d * boost, k


@njit(cache=True, inline="always")
def _negbin_log_p0_bounds(mean: float, size: float) -> tuple[float, float]:
    """Bounds (lo, hi) of y = r log(1 + m/r) = -log P(X = 0) without logarithms (module
    docstring): with s = m / (2r + m), y = 2 r atanh(s) = m (1 - s) (1 + s^2/3 + s^4/5 + ..);
    all terms are positive, and those after s^4/5 sum to at most s^6 / (7 (1 - s^2))."""
    s = mean / (2.0 * size + mean)
    s2 = s * s
    lo = mean * (1.0 - s) * (1.0 + s2 * (1.0 / 3.0 + s2 * 0.2))
    # m (1 - s) s^6 / (7 (1 - s^2)) = m s^6 / (7 (1 + s)) <= m s^6 / 7
    return lo, lo + mean * (s2 * s2 * s2) * (1.0 / 7.0)


@njit(cache=True, inline="always")
def _negbin_inversion(mean: float, size: float, skey: np.uint64, day: np.int64,
                      stream: np.int64, k: np.int64) -> tuple[float, np.int64]:
    # p(x) = p(x-1) * q (r + x - 1) / x with q = m / (r + m).
    u = uniform(skey, day, stream, k)
    # Zeros without the logarithm and exponential, first by P(X = 0) >= exp(-m) (as
    # log(1 + t) <= t: no divide on the way), then by the tighter bound.
    if u <= _below_exp_neg(mean):
        return 0.0, k + 1
    y_lo, y_hi = _negbin_log_p0_bounds(mean, size)
    lo = _below_exp_neg(y_hi)
    if u <= lo:
        return 0.0, k + 1
    q = mean / (size + mean)
    return _search(u, lo, y_lo, q * size, q, mean, size, True), k + 1


@njit(cache=True)
def _negbin_mixture(mean: float, size: float, skey: np.uint64, day: np.int64,
                    stream: np.int64, k: np.int64) -> tuple[float, np.int64]:
    g, k = gamma(size, skey, day, stream, k)
    return poisson(g * (mean / size), skey, day, stream, k)


@njit(cache=True, inline="always")
def negbin(mean: float, size: float, skey: np.uint64, day: np.int64, stream: np.int64,
           k: np.int64) -> tuple[float, np.int64]:
    """Negative binomial with this mean and size r (var = mean + mean^2 / r)."""
    if mean <= 0.0:
        return 0.0, k
    if mean < NEGBIN_INVERSION_MAX_MEAN and mean <= NEGBIN_INVERSION_MAX_MEAN_PER_SIZE * size:
        return _negbin_inversion(mean, size, skey, day, stream, k)
    return _negbin_mixture(mean, size, skey, day, stream, k)


@njit(cache=True, inline="always")
def sample_demand(dist: np.int64, mean: float, size: float, skey: np.uint64, day: np.int64,
                  stream: np.int64) -> float:
    """One day's demand (a float holding an integer) for distribution code `dist`."""
    if dist == DIST_GEOMETRIC:
        x, _ = geometric(mean, skey, day, stream, np.int64(0))
    elif dist == DIST_NEGBIN:
        x, _ = negbin(mean, size, skey, day, stream, np.int64(0))
    else:
        x, _ = poisson(mean, skey, day, stream, np.int64(0))
    return x


@njit(cache=True)
def sample_many(dist: np.int64, mean: float, size: float, skey: np.uint64, days: np.int64,
                stream: np.int64) -> np.ndarray:
    """Demand of days 0..days-1 at a constant mean (statistical tests of the samplers)."""
    out = np.empty(days, np.float64)
    for d in range(days):
        out[d] = sample_demand(dist, mean, size, skey, d, stream)
    return out
