"""Standard normal variates by the ziggurat method, counter-based (see rng.py).

Method: G. Marsaglia & W. W. Tsang, "The Ziggurat Method for Generating Random Variables",
Journal of Statistical Software 5(8), 2000, with the correction of J. A. Doornik, "An
Improved Ziggurat Method to Generate Normal Random Samples", 2005 (the layer index and the
uniform come from independent bits, and the uniform has 53 bits). The density under
f(x) = exp(-x^2 / 2) is covered by 128 layers of equal area V: layer 0 is the base strip
plus the tail beyond R, layers 1..127 are rectangles [0, X[i]] x [f(X[i]), f(X[i+1])].
R and V are the paper's 128-layer constants.

More: docs/internals.md (sim/ziggurat.py)."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from skurl.sim.rng import draw_u64, uniform

LAYERS = 128
R = 3.442619855899  # right edge of layer 1, start of the tail (Marsaglia & Tsang, 2000)
V = 9.91256303526217e-3  # area of every layer, tail included
_LAYER_MASK = np.uint64(LAYERS - 1)
_S11 = np.uint64(11)
_TWO_POW_M52 = 2.0 / 9007199254740992.0  # maps 53 bits to a width-2 interval


def _tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """X[0..128] (layer right edges; X[0] = V / f(R) is the base strip's equal-area width),
    RATIO[i] = X[i+1] / X[i] (fast-accept bound for |u|) and F[i] = f(X[i])."""
    x = np.empty(LAYERS + 1)
    f_r = math.exp(-0.5 * R * R)
    x[0], x[1], x[LAYERS] = V / f_r, R, 0.0
    f_prev = f_r
    for i in range(2, LAYERS):
        # Layer i-1 spans heights [f(X[i-1]), f(X[i])] with width X[i-1] and area V.
        x[i] = math.sqrt(-2.0 * math.log(V / x[i - 1] + f_prev))
        f_prev = math.exp(-0.5 * x[i] * x[i])
    return x, x[1:] / x[:-1], np.exp(-0.5 * x * x)


X, RATIO, F = _tables()


@njit(cache=True)
def _tail(sign: float, skey: np.uint64, day: np.int64, stream: np.int64,
          k: np.int64) -> tuple[float, np.int64]:
    """|Z| > R given that it is: Marsaglia's (1964) exponential rejection method."""
    while True:
        a = -math.log(uniform(skey, day, stream, k)) / R
        b = -math.log(uniform(skey, day, stream, k + 1))
        k += 2
        if b + b > a * a:
            return sign * (R + a), k


@njit(cache=True, inline="always")
def normal(skey: np.uint64, day: np.int64, stream: np.int64, k: np.int64) -> tuple[float, np.int64]:
    """Standard normal from draws k, k+1, .. of (sku, day, stream); returns (z, next k)."""
    while True:
        bits = draw_u64(skey, day, stream, k)
        k += 1
        i = np.int64(bits & _LAYER_MASK)
        u = (np.float64(bits >> _S11) + 0.5) * _TWO_POW_M52 - 1.0  # in (-1, 1)
        if abs(u) < RATIO[i]:
            return u * X[i], k
        if i == 0:
            return _tail(1.0 if u > 0.0 else -1.0, skey, day, stream, k)
        z = u * X[i]
        # Wedge of layer i: uniform height between f(X[i]) and f(X[i+1]) under f(z)?
        h = F[i] + uniform(skey, day, stream, k) * (F[i + 1] - F[i])
        k += 1
        if h < math.exp(-0.5 * z * z):
            return z, k
