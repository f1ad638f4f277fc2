"""The newsvendor's safety factor per SKU: the critical ratio of lost-sale (plus margin under
a profit reward) and holding costs, and its standard normal quantile. Shared by the
single-location and the network baselines."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from skurl.catalog.schema import Catalog
    from skurl.config import SimConfig


def norm_ppf(p: np.ndarray | float) -> np.ndarray:
    """Standard normal quantile, vectorized (Acklam 2003 rational approximation, relative
    error < 1.2e-9; https://web.archive.org/web/20151030215612/http://home.online.no/~pjacklam/notes/invnorm/)."""
    p = np.clip(np.asarray(p, dtype=np.float64), 1e-12, 1 - 1e-12)
    a = (-3.969683028665376e01, 2.209460984245205e02, -2.759285104469687e02,
         1.383577518672690e02, -3.066479806614716e01, 2.506628277459239e00)
    b = (-5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02,
         6.680131188771972e01, -1.328068155288572e01)
    c = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e00,
         -2.549732539343734e00, 4.374664141464968e00, 2.938163982698783e00)
    d = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00, 3.754408661907416e00)
    lo, hi = 0.02425, 1 - 0.02425
    out = np.empty_like(p)
    tail = np.minimum(p, 1 - p)
    q = np.sqrt(-2 * np.log(tail))
    tail_val = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / (
        (((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1)
    out[:] = np.where(p < 0.5, tail_val, -tail_val)
    mid = (p >= lo) & (p <= hi)
    r = (p[mid] - 0.5) ** 2
    qm = p[mid] - 0.5
    out[mid] = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * qm / (
        ((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1)
    return out


def critical_ratio(catalog: Catalog, sim_cfg: SimConfig) -> np.ndarray:
    """Newsvendor ratio cu / (cu + co) per SKU, clipped to [0.05, 0.995] so z stays finite."""
    under = catalog.lost_sale_cost.astype(np.float64)
    if sim_cfg.reward == "profit":
        under = under + np.maximum(catalog.price.astype(np.float64) - catalog.unit_cost, 0.0)
    over = catalog.holding_cost.astype(np.float64)
    total = under + over
    ratio = np.divide(under, total, out=np.full_like(total, 0.5), where=total > 0)
    return np.clip(ratio, 0.05, 0.995)


def default_z(catalog: Catalog, sim_cfg: SimConfig) -> np.ndarray:
    return norm_ppf(critical_ratio(catalog, sim_cfg))
