"""The ziggurat normal sampler: its tables close, and its variates are standard normal in
the bulk, the wedges and the tail (goodness-of-fit over many draws)."""

from __future__ import annotations

import math

import numpy as np
from numba import njit
from scipy import stats

from skurl.sim.rng import run_key, sku_key
from skurl.sim.ziggurat import LAYERS, RATIO, F, R, V, X, normal

KEY = np.uint64(sku_key(run_key(7, 0), 3))


@njit(cache=True)
def _many(key: np.uint64, n: int, stream: int) -> tuple[np.ndarray, np.ndarray]:
    """z for days 0..n-1 of one stream, and the draws each used."""
    z = np.empty(n)
    used = np.empty(n, np.int64)
    for d in range(n):
        z[d], used[d] = normal(key, d, stream, 0)
    return z, used


def test_every_layer_has_area_v() -> None:
    # The base layer (rectangle [0, R] x [0, f(R)] plus the tail beyond R) has area V, as
    # has every rectangle layer; the top layer reaches the mode f(0) = 1.
    tail = math.sqrt(math.pi / 2) * math.erfc(R / math.sqrt(2))
    assert abs(R * F[1] + tail - V) < 1e-10 and X[0] * F[1] == V
    areas = X[1:LAYERS] * (F[2:LAYERS + 1] - F[1:LAYERS])
    assert np.allclose(areas, V, rtol=1e-8)
    assert X[LAYERS] == 0.0 and F[LAYERS] == 1.0
    # The top layer has no fast-accept part (RATIO 0): all of it is wedge.
    assert np.all(np.diff(X[1:]) < 0) and np.all(RATIO[:-1] > 0) and np.all(RATIO < 1)


def test_standard_normal_goodness_of_fit() -> None:
    z, used = _many(KEY, 400_000, 3)
    assert stats.kstest(z, "norm").pvalue > 1e-4
    assert abs(z.mean()) < 5 / math.sqrt(z.size) and abs(z.var() - 1) < 5 * math.sqrt(2 / z.size)
    # Most variates take one draw; the rest used the wedge or tail paths.
    assert 0.97 < np.mean(used == 1) < 0.995


def test_tail_and_wedges_follow_the_density() -> None:
    z, _ = _many(KEY, 2_000_000, 9)
    # Tail: P(|Z| > R) = erfc(R / sqrt 2) ~ 5.8e-4, and its conditional shape.
    tail = np.abs(z[np.abs(z) > R])
    expected = 2_000_000 * math.erfc(R / math.sqrt(2))
    assert abs(tail.size - expected) < 5 * math.sqrt(expected)
    excess = stats.kstest(tail, lambda t: 1 - stats.norm.sf(t) / stats.norm.sf(R))
    assert excess.pvalue > 1e-4
    # Chi-square over 60 equiprobable bins catches a wrong wedge or a missing layer.
    edges = stats.norm.ppf(np.linspace(0, 1, 61))
    counts, _ = np.histogram(z, edges)
    assert stats.chisquare(counts).pvalue > 1e-4
