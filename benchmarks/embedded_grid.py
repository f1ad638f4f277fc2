"""The cover action grid of the embedded defaults (policy/actions.py, kind=cover, centred on the
tuned forecast-s-S) as per-day order-up-to levels for the DP (docs/headroom.md).

Action k orders up to level_k + lot when the position is below level_k = ceil(mu_t +
(z0 + offset_k) sigma_t), else nothing; mu_t and sigma_t^2 are the mean and variance of
the demand over days t..t+L. The grid's policies see noisy forecasts; here they get the
exact means, so the DP restricted to these actions is the best any policy on the grid can
do with a perfect forecast, and offset 0 alone is forecast-s-S with a perfect forecast.
`joint_grid` widens it to policy.actions.lot_factors' (lot factor, offset) pairs.
"""

from __future__ import annotations

import numpy as np
from embedded_dp import daily_means, variance_of

from skurl.policy.baselines import order_up_to_level
from skurl.sim.state import P_DISPERSION, P_DIST, P_LEAD


def grid_levels(par: np.ndarray, i: int, days: int, z0: float, offsets: np.ndarray,
                ) -> tuple[np.ndarray, int]:
    """(levels int64 [days, K], index of the offset nearest 0) of SKU row i."""
    lead = int(par[i, P_LEAD])
    mean = daily_means(par, i, days + lead + 1)
    var = variance_of(int(par[i, P_DIST]), float(par[i, P_DISPERSION]), mean)
    csum = np.concatenate([[0.0], np.cumsum(mean)])
    vsum = np.concatenate([[0.0], np.cumsum(var)])
    t = np.arange(days)
    mu = csum[t + lead + 1] - csum[t]
    sigma = np.sqrt(vsum[t + lead + 1] - vsum[t])
    levels = order_up_to_level(mu[:, None], sigma[:, None], z0 + np.asarray(offsets)[None, :])
    return levels.astype(np.int64), int(np.argmin(np.abs(offsets)))


def joint_grid(levels: np.ndarray, lot: float, factors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The joint (lot factor, offset) grid of policy.actions.lot_factors for one SKU: (levels
    int64 [days, F x K], lots int64 [F x K]) in ActionGrid's index order (joint_values), each
    block's lot round(f x lot) as ActionGrid._lots rounds it."""
    f = np.asarray(factors, np.float64)
    lots = np.floor(np.repeat(f, levels.shape[1]) * float(lot) + 0.5).astype(np.int64)
    return np.tile(levels, (1, f.size)), lots
