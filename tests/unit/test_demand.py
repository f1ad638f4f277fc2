"""Demand samplers: moments within statistical tolerance, the Poisson and negative binomial
pmfs, the bounds that squeeze the inversion searches, day means."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from skurl.sim.demand import (
    _RECIPROCALS,
    DIST_GEOMETRIC,
    DIST_NEGBIN,
    DIST_POISSON,
    INVERSION_CAP,
    NEGBIN_INVERSION_MAX_MEAN,
    NEGBIN_INVERSION_MAX_MEAN_PER_SIZE,
    _above_exp_neg,
    _below_exp_neg,
    _negbin_log_p0_bounds,
    _negbin_mixture,
    _negbin_p0,
    _search,
    daily_mean,
    gamma,
    is_promo_day,
    negbin,
    normal,
    sample_many,
)
from skurl.sim.rng import run_key, sku_key, uniform

N = 200_000
KEY = np.uint64(sku_key(run_key(2024, 0), 17))


def _check_moments(x: np.ndarray, mean: float, var: float) -> None:
    """Sample mean within 5 standard errors; sample variance within 5 of its own (approx.,
    using the sample fourth moment)."""
    se_mean = math.sqrt(var / x.size)
    assert abs(x.mean() - mean) < 5 * se_mean + 1e-12, (x.mean(), mean)
    m4 = float(np.mean((x - x.mean()) ** 4))
    se_var = math.sqrt(max(m4 - var**2, 1e-12) / x.size)
    assert abs(x.var() - var) < 5 * se_var + 1e-12, (x.var(), var)


@pytest.mark.parametrize("mean", [0.05, 3.0, 9.99, 10.0, 40.0, 5000.0])
def test_poisson_moments(mean: float) -> None:
    x = sample_many(DIST_POISSON, mean, 1.0, KEY, N, 0)
    assert np.all(x == np.floor(x)) and x.min() >= 0
    _check_moments(x, mean, mean)


@pytest.mark.parametrize("mean", [0.3, 4.0, 50.0])
def test_geometric_moments(mean: float) -> None:
    x = sample_many(DIST_GEOMETRIC, mean, 1.0, KEY, N, 0)
    _check_moments(x, mean, mean + mean * mean)


def _inverts(mean: float, size: float) -> bool:
    """True where negbin takes the inversion path (one uniform: next draw index 1)."""
    return int(negbin(mean, size, KEY, 0, 0, 0)[1]) == 1


# Inversion: mean < 20 and mean <= 20 size; the Gamma-Poisson mixture otherwise.
@pytest.mark.parametrize(("mean", "size"), [(5.0, 0.5), (5.0, 2.0), (3.0, 1e4), (0.2, 0.3),
                                            (0.57, 4.0), (9.9, 0.5), (9.9, 42.0), (0.05, 100.0),
                                            (10.0, 0.5), (19.9, 4.0), (15.0, 0.8),
                                            (20.0, 10.0), (25.0, 4.0), (100.0, 1.0),
                                            (2.0, 0.05), (0.3, 0.01)])
def test_negative_binomial_moments(mean: float, size: float) -> None:
    assert _inverts(mean, size) == (mean < NEGBIN_INVERSION_MAX_MEAN
                                    and mean <= NEGBIN_INVERSION_MAX_MEAN_PER_SIZE * size)
    x = sample_many(DIST_NEGBIN, mean, size, KEY, N, 0)
    assert np.all(x == np.floor(x)) and x.min() >= 0
    _check_moments(x, mean, mean + mean * mean / size)


@pytest.mark.parametrize(("mean", "size"), [(0.57, 4.0), (5.0, 0.5), (9.9, 42.0), (0.2, 100.0)])
def test_negative_binomial_mixture_moments_at_small_means(mean: float, size: float) -> None:
    # The Gamma-Poisson mixture (kept for large means) is exact at small means too.
    x = np.array([_negbin_mixture(mean, size, KEY, d, 6, 0)[0] for d in range(N // 2)])
    _check_moments(x, mean, mean + mean * mean / size)


def test_poisson_pmf_small_mean_chi_square() -> None:
    mean = 0.7
    x = sample_many(DIST_POISSON, mean, 1.0, KEY, N, 1).astype(int)
    top = 6  # counts 0..5 and a tail bin
    observed = np.bincount(np.minimum(x, top), minlength=top + 1)
    pmf = stats.poisson.pmf(np.arange(top), mean)
    expected = N * np.append(pmf, 1 - pmf.sum())
    assert stats.chisquare(observed, expected).pvalue > 1e-4


@pytest.mark.parametrize(("mean", "size"), [(0.4, 0.3), (2.5, 4.0), (9.0, 1.0), (9.5, 1.0)])
def test_negative_binomial_pmf_chi_square(mean: float, size: float) -> None:
    x = sample_many(DIST_NEGBIN, mean, size, KEY, N, 3).astype(int)
    top = 12
    observed = np.bincount(np.minimum(x, top), minlength=top + 1)
    pmf = stats.nbinom.pmf(np.arange(top), size, size / (size + mean))
    expected = N * np.append(pmf, 1 - pmf.sum())
    assert stats.chisquare(observed, expected).pvalue > 1e-4


@pytest.mark.parametrize("mean", [1e-7, 1e-6, 0.003, 0.01, 0.5, 1.9999, 2.0, 2.5])
def test_poisson_zero_shortcut_matches_plain_inversion(mean: float) -> None:
    # The shortcut must only answer 0 where the sequential search would: compare with a
    # plain inversion of the very same uniforms.
    x = sample_many(DIST_POISSON, mean, 1.0, KEY, 20_000, 4)
    u = np.array([uniform(KEY, d, 4, 0) for d in range(20_000)])
    p0 = math.exp(-mean)
    assert np.array_equal(x == 0.0, u <= p0)
    assert _below_exp_neg(mean) < p0


@pytest.mark.parametrize("mean", [1e-6, 0.003, 0.01, 0.3, 0.57, 1.0, 2.5, 6.0, 9.99, 19.9])
@pytest.mark.parametrize("size", [0.5, 1.0, 4.0, 42.0, 100.0])
def test_negative_binomial_zero_probability(mean: float, size: float) -> None:
    x = sample_many(DIST_NEGBIN, mean, size, KEY, N, 7)
    p0 = (size / (size + mean)) ** size
    assert stats.binomtest(int(np.sum(x == 0.0)), N, p0).pvalue > 1e-4
    assert _negbin_p0(mean, size) == pytest.approx(p0, rel=1e-13)


@pytest.mark.parametrize(("mean", "size"), [(1e-6, 0.5), (0.003, 4.0), (0.57, 4.0), (0.57, 0.5),
                                            (1.5, 1.0), (3.0, 42.0), (7.0, 100.0), (9.99, 0.5),
                                            (0.4, 0.02), (2.0, 1e9), (15.0, 4.0), (19.9, 1.0)])
def test_negative_binomial_inversion_is_the_inverse_cdf(mean: float, size: float) -> None:
    # Same uniforms, scipy's cdf: the search (and its zero shortcut) must return the smallest
    # x with u <= cdf(x) (ties within rounding of a cdf value are far too rare to meet here).
    assert _inverts(mean, size)
    n = 20_000
    x = sample_many(DIST_NEGBIN, mean, size, KEY, n, 4)
    u = np.array([uniform(KEY, d, 4, 0) for d in range(n)])
    cdf = stats.nbinom.cdf(np.arange(INVERSION_CAP + 1), size, size / (size + mean))
    assert np.array_equal(x, np.searchsorted(cdf, u).astype(np.float64))
    assert np.array_equal(x == 0.0, u <= _negbin_p0(mean, size))


def test_exp_neg_bounds() -> None:
    # Outside exp(-y) by far more than rounding (100 ulps), and tight where used most.
    ys = np.append(np.geomspace(1e-12, 30.0, 3000), [0.0, 4.0, 12.0, 17.0, 18.0])
    for y in ys:
        e = math.exp(-y)
        lo, hi = _below_exp_neg(y), _above_exp_neg(y)
        assert 0.0 <= lo < e - 100 * np.spacing(e), y
        assert hi > e + 100 * np.spacing(e), y
        if y <= 4.0:
            assert lo > (1.0 - 1e-3) * e and hi < (1.0 + 1e-4) * e, y
    assert _below_exp_neg(12.0) > 0.0 and _below_exp_neg(18.0) == 0.0


def test_negative_binomial_p0_bounds() -> None:
    # lo (and the divide-free exp(-m) bound, the first zero test) below, hi above the computed
    # P(X = 0) by far more than rounding, so the squeezed search changes no result; tight
    # enough at the small means and the sizes (0.5 .. 100) of the synthetic catalog that few
    # draws need the logarithm and the exponential.
    means = np.append(np.geomspace(1e-9, NEGBIN_INVERSION_MAX_MEAN, 300),
                      [1e-6, 0.01, 1.0, 2.0, 6.0, np.nextafter(NEGBIN_INVERSION_MAX_MEAN, 0.0)])
    for size in [1e-6, 0.05, 0.5, 1.0, 4.0, 7.3, 42.0, 100.0, 1e4, 1e9]:
        for mean in means:
            p0 = _negbin_p0(mean, size)
            y_lo, y_hi = _negbin_log_p0_bounds(mean, size)
            lo, hi = _below_exp_neg(y_hi), _above_exp_neg(y_lo)
            margin = 100 * np.spacing(p0)
            assert 0.0 <= lo < p0 - margin and hi > p0 + margin, (mean, size, lo, p0, hi)
            assert _below_exp_neg(mean) < p0 - margin, (mean, size)
            if mean <= 2.0 and 0.5 <= size <= 100.0:
                assert lo > 0.97 * p0 and hi < 1.03 * p0, (mean, size, lo, p0, hi)


def _plain_search(u: float, p0: float, a: float, b: float) -> int:
    """The reference the squeezed search must equal: the least x with u <= p0 * S(x), by
    the very same arithmetic, p0 computed up front."""
    s = t = 1.0
    x = 0
    while u > p0 * s and x < INVERSION_CAP:
        x += 1
        t = t * ((a + b * (x - 1)) * _RECIPROCALS[x])
        s += t
    return x


@pytest.mark.parametrize(("mean", "size"), [(1e-6, 0.5), (0.05, 4.0), (0.57, 4.0), (0.57, 0.5),
                                            (1.7, 1.0), (3.0, 42.0), (7.0, 100.0), (9.0, 0.5),
                                            (0.4, 0.02), (2.0, 1e9), (15.0, 4.0), (19.9, 1.0),
                                            (0.3, 0.0), (2.5, 0.0), (9.9, 0.0)])
def test_squeezed_search_equals_plain_search(mean: float, size: float) -> None:
    # size 0: the Poisson. Uniforms at and next to the computed cdf values x = 0..24 (where
    # the bounds cannot decide and p0 itself is computed) and 2000 random ones.
    poisson = size == 0.0
    if poisson:
        p0, y_lo, y_hi, a, b = math.exp(-mean), mean, mean, mean, 0.0
    else:
        p0 = _negbin_p0(mean, size)
        y_lo, y_hi = _negbin_log_p0_bounds(mean, size)
        q = mean / (size + mean)
        a, b = q * size, q
    lo = _below_exp_neg(y_hi)
    us = [uniform(KEY, d, 9, 0) for d in range(2000)]
    s = t = 1.0
    for x in range(25):
        c = p0 * s
        us += [c, np.nextafter(c, 0.0), np.nextafter(c, 2.0)]
        t = t * ((a + b * x) * _RECIPROCALS[x + 1])
        s += t
    undecided = 0
    for u in us:
        if not 0.0 < u < 1.0:
            continue
        want = _plain_search(u, p0, a, b)
        got = 0.0 if u <= lo else _search(u, lo, y_lo, a, b, mean, size or 1.0, not poisson)
        assert got == want, (u, got, want)
        undecided += lo < u <= _above_exp_neg(y_lo)
    assert undecided > 0  # the x = 0 boundary at least


def test_negative_binomial_inversion_tail_beyond_cap_negligible() -> None:
    # The search stops at INVERSION_CAP: wherever inversion is used, P(X > cap) is far below
    # the uniforms' resolution (2^-53).
    for size in np.geomspace(1e-6, 1e9, 400):
        mean = min(np.nextafter(NEGBIN_INVERSION_MAX_MEAN, 0.0),
                   NEGBIN_INVERSION_MAX_MEAN_PER_SIZE * size)
        assert _inverts(mean, size)
        assert stats.nbinom.sf(INVERSION_CAP, size, size / (size + mean)) < 1e-19, size


def test_large_mean_poisson_distribution_ks() -> None:
    x = sample_many(DIST_POISSON, 400.0, 1.0, KEY, 50_000, 2)
    # Continuity-corrected normal approximation is tight at this mean; a KS test on the
    # randomized (jittered) values compares the whole shape, not only two moments.
    jitter = (x + np.random.default_rng(0).random(x.size) - 0.5 - 400.0) / 20.0
    assert stats.kstest(jitter, "norm").pvalue > 1e-4


def test_zero_mean_gives_zero_demand() -> None:
    for dist in (DIST_POISSON, DIST_GEOMETRIC, DIST_NEGBIN):
        assert sample_many(dist, 0.0, 2.0, KEY, 100, 0).max() == 0.0


@pytest.mark.parametrize("shape", [0.3, 1.0, 5.0, 1000.0])
def test_gamma_moments(shape: float) -> None:
    x = np.array([gamma(shape, KEY, d, 5, 0)[0] for d in range(20_000)])
    _check_moments(x, shape, shape)


def test_normal_is_standard() -> None:
    z = np.array([normal(KEY, d, 3, 0)[0] for d in range(50_000)])
    assert stats.kstest(z, "norm").pvalue > 1e-4


def test_promo_days_and_daily_mean() -> None:
    # period 7, length 2, offset 3: days 3, 4, 10, 11, ...; negative residues wrap (Python mod)
    promo = [d for d in range(15) if is_promo_day(d, 7, 2, 3)]
    assert promo == [3, 4, 10, 11]
    assert is_promo_day(0, 3, 1, 6) and not is_promo_day(5, 0, 5, 0)
    assert daily_mean(2.0, 1.5, 0.0, 1.0, False, 9) == 3.0
    assert daily_mean(2.0, 1.5, 0.0, 1.0, True, 9) == 6.0
    assert daily_mean(2.0, 1.0, 0.01, 0.0, False, 10) == pytest.approx(2.0 * math.exp(0.1))
