"""The demand_dispersion feature: the demand distribution's shape, from what the catalog declares."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from skurl.catalog.schema import DIST_CODES
from skurl.config import SimConfig
from skurl.sim import VectorEnv
from skurl.sim.layout import dispersion_feature
from skurl.sim.testing import random_catalog


def _catalog(dists: list[str], means: list[float], sizes: list[float]):
    base = random_catalog(len(dists), seed=3)
    return dataclasses.replace(
        base, demand_dist=np.array([DIST_CODES[d] for d in dists], np.int8),
        demand_mean=np.array(means, np.float32), dispersion=np.array(sizes, np.float32),
        lead_time=np.full(len(dists), 2, np.int32)).validate()


def test_dispersion_is_log_variance_over_mean_of_each_family() -> None:
    cat = _catalog(["poisson", "geometric", "negbin", "negbin"], [5.0, 5.0, 5.0, 0.0], [1.0, 1.0, 2.5, 2.5])
    got = dispersion_feature(cat)
    # var / mean: Poisson 1; geometric 1 + m; negative binomial 1 + m / r
    want = [0.0, math.log(6.0), math.log(1.0 + 5.0 / 2.5), 0.0]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_equal_means_of_other_families_get_other_observations() -> None:
    """Poisson and geometric SKUs of one mean were the same observation but for this column."""
    one = _catalog(["poisson"], [5.0], [1.0]).subset(np.array([0, 0]))
    cat = dataclasses.replace(one, sku_id=np.array([0, 1], np.int64), forecast_noise=np.zeros(2, np.float32),
                              demand_dist=np.array([DIST_CODES["poisson"], DIST_CODES["geometric"]], np.int8))
    env = VectorEnv(cat, SimConfig(days=5, substitution=False))
    feats = env.reset(0, 0).features
    col = env.schema.slices()["demand_dispersion"]
    assert feats[0, col] == 0.0 and feats[1, col] == np.float32(math.log(6.0))
    differ = np.flatnonzero(feats[0] != feats[1])
    assert list(differ) == list(range(col.start, col.stop))
