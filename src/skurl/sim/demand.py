"""Demand: the daily mean of a SKU and samplers for its distribution, all counter-based.

Every sampler takes the SKU key, the day, the stream and the first draw index k, and
returns (value, next k), so samplers can be chained within one (sku, day, stream) without
any carried generator state (see rng.py).

Sources of the methods:
- Poisson, small means: sequential search inversion (Devroye, "Non-Uniform Random Variate
  Generation", 1986, ch. X.3): one uniform per variate.
- Poisson, large means: PTRS, transformed rejection with squeeze (W. Hörmann, "The
  transformed rejection method for generating Poisson random variables", Insurance:
  Mathematics and Economics 12, 1993), exact for mean >= 10.
- Gamma: G. Marsaglia & W. W. Tsang, "A simple method for generating gamma variables",
  ACM TOMS 26(3), 2000, with their boost Gamma(a) = Gamma(a + 1) * U^(1/a) for a < 1.
- Normal: the ziggurat method (ziggurat.py; Marsaglia & Tsang 2000).
- Geometric on {0, 1, ..}: inversion, X = floor(log U / log(1 - p)).
- Negative binomial (mean m, size r), small means (m < 20 and m <= 20 r): sequential search
  inversion as for the Poisson (Devroye 1986, ch. X.3) over the pmf
  p(x) = Gamma(r + x) / (Gamma(r) x!) (1 - q)^r q^x, q = m / (r + m), by its recursion
  P(X = 0) = (r / (r + m))^r, p(x + 1) = p(x) * (r + x) / (x + 1) * q; one uniform per
  variate. m <= 20 r keeps q <= 20/21, so the tail beyond the search's cap is far below the
  uniforms' resolution (for r <= 1 the pmf is at most q^x, so P(X > 1000) < 21 (20/21)^1001
  < 2e-20; a test checks P(X > 1000) < 1e-19 over all r).
- Negative binomial, other means: Poisson(Gamma(r, m / r)) (the Gamma-Poisson mixture).
- Zero shortcuts (Poisson and negative binomial inversion): u below a lower bound of P(X = 0)
  computed without transcendental functions is a zero; the bounds lie strictly below the
  computed P(X = 0) by far more than rounding, so the shortcut changes no result. exp(-y) >=
  1 - y, and exp(-y) >= P3(y / 4)^4 with P3(z) = 1 - z + z^2/2 - z^3/6 (the alternating
  Taylor series bounds exp(-z) from below for z >= 0, and P3 > 0 for z <= 1.5); for the
  negative binomial, log(1 + t) <= t (6 + t) / (6 + 4 t) for t >= 0 (its derivative exceeds
  1 / (1 + t) by 4 t^3 / ((1 + t) (6 + 4 t)^2)) gives P(X = 0) = exp(-r log(1 + m / r)) >=
  exp(-m (6 r + m) / (6 r + 4 m)).
"""

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


@njit(cache=True, inline="always")
def is_promo_day(day: np.int64, period: np.int64, length: np.int64, offset: np.int64) -> bool:
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
def _below_exp_neg(y: float) -> float:
    """A lower bound of exp(-y) that stays below the computed exp(-y) by far more than
    rounding: for 0.01 <= y <= 6, P3(y/4)^4 with P3(z) = 1 - z + z^2/2 - z^3/6 (exp(-y)
    exceeds it by ~y^4/1536 relative, >= 6e-12 relative; 99.9% of exp(-y) at y = 1, 91% at 3);
    for 1e-6 <= y < 0.01, 1 - y (margin ~y^2/2 >= 5e-13); else 0 (no bound)."""
    if y >= 0.01:
        if y > 6.0:
            return 0.0
        z = 0.25 * y
        b = 1.0 - z * (1.0 - z * (0.5 - z * (1.0 / 6.0)))
        b = b * b
        return b * b
    return 1.0 - y if y >= 1e-6 else 0.0


@njit(cache=True, inline="always")
def _poisson_inversion(mean: float, skey: np.uint64, day: np.int64, stream: np.int64,
                       k: np.int64) -> tuple[float, np.int64]:
    u = uniform(skey, day, stream, k)
    # Most SKUs sell less than one unit a day: u below a bound of P(X = 0) = exp(-mean)
    # is a zero without the exponential (the search below would return 0 for it too).
    if u <= _below_exp_neg(mean):
        return 0.0, k + 1
    p = math.exp(-mean)
    cdf = p
    x = 0
    # The cap only matters when u sits within rounding error of 1 (cdf never reaches it).
    # p(x) = p(x-1) * mean / x with 1/x from a table: a multiply, not a divide, per step.
    while u > cdf and x < INVERSION_CAP:
        x += 1
        p = p * mean * _RECIPROCALS[x]
        cdf += p
    return float(x), k + 1


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
def _negbin_p0(mean: float, size: float) -> float:
    """P(X = 0) = (r / (r + m))^r as exp(-r log1p(m / r)): no rounding of r / (r + m) is
    raised to the power r (huge r stays accurate)."""
    return math.exp(-size * math.log1p(mean / size))


@njit(cache=True, inline="always")
def _below_negbin_p0(mean: float, size: float) -> float:
    """A lower bound of P(X = 0) = exp(-r log(1 + m/r)) far below its computed value (module
    docstring): exp(-y) bounded below at y = m (6 r + m) / (6 r + 4 m) >= r log(1 + m/r)."""
    return _below_exp_neg(mean * (6.0 * size + mean) / (6.0 * size + 4.0 * mean))


@njit(cache=True)
def _negbin_inversion(mean: float, size: float, skey: np.uint64, day: np.int64,
                      stream: np.int64, k: np.int64) -> tuple[float, np.int64]:
    u = uniform(skey, day, stream, k)
    # A zero without the logarithm and exponential (the search below would return 0 too).
    if u <= _below_negbin_p0(mean, size):
        return 0.0, k + 1
    p = _negbin_p0(mean, size)
    cdf = p
    q = mean / (size + mean)
    x = 0
    # p(x) = p(x-1) * q * (r + x - 1) / x, 1/x from the table; the cap as in the Poisson's.
    while u > cdf and x < INVERSION_CAP:
        x += 1
        p = p * (q * (size + (x - 1)) * _RECIPROCALS[x])
        cdf += p
    return float(x), k + 1


@njit(cache=True)
def _negbin_mixture(mean: float, size: float, skey: np.uint64, day: np.int64,
                    stream: np.int64, k: np.int64) -> tuple[float, np.int64]:
    g, k = gamma(size, skey, day, stream, k)
    return poisson(g * (mean / size), skey, day, stream, k)


@njit(cache=True)
def negbin(mean: float, size: float, skey: np.uint64, day: np.int64, stream: np.int64,
           k: np.int64) -> tuple[float, np.int64]:
    """Negative binomial with this mean and size r (var = mean + mean^2 / r)."""
    if mean <= 0.0:
        return 0.0, k
    if mean < NEGBIN_INVERSION_MAX_MEAN and mean <= NEGBIN_INVERSION_MAX_MEAN_PER_SIZE * size:
        return _negbin_inversion(mean, size, skey, day, stream, k)
    return _negbin_mixture(mean, size, skey, day, stream, k)


@njit(cache=True)
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
