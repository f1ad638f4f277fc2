"""CUPED: the A/B difference with a pre-period covariate, for narrower intervals.

SKUs differ far more from each other (a fast mover makes a hundred times the profit of a
slow one) than two policies differ on one SKU, so the plain difference of group means has an
interval that is mostly SKU-to-SKU spread. A SKU's own figures in a period before the test,
when every SKU followed policy A, predict much of that spread and cannot depend on the
split (CUPED, Deng et al. 2013). Each outcome column y (demand, lost, waste, served,
inventory cost, profit) is replaced by

    y' = y - theta_y (x - mean_s(x)),    x = the same column's pre-period total per day,

More: docs/internals.md (serve/ab_cuped.py)."""

from __future__ import annotations

import numpy as np

PRE_PREFIX = "pre_"
PRE_COLUMNS = tuple(PRE_PREFIX + c for c in ("sku_days", "demand", "lost", "waste", "inventory_cost", "profit"))


def pre_rates(outcomes: dict[str, np.ndarray], cols: list[str]) -> np.ndarray:
    """The covariate of every value column [n, C]: its pre-period total per pre-period day
    (served = demand - lost; sku_days gets zeros, so it is left as it is)."""
    days = np.asarray(outcomes["pre_sku_days"], np.float64)
    out = np.zeros((days.size, len(cols)))
    for j, name in enumerate(cols):
        if name == "served":
            out[:, j] = (outcomes["pre_demand"] - outcomes["pre_lost"]) / days
        elif name != "sku_days":
            out[:, j] = np.asarray(outcomes[PRE_PREFIX + name], np.float64) / days
    return out


def adjust(values: np.ndarray, x: np.ndarray, is_b: np.ndarray, code: np.ndarray,
           kept: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """values [n, C] adjusted by covariates x [n, C] (module docstring) and theta [C]; SKUs
    of strata not in `kept` are returned as they are (the comparison leaves them out)."""
    use = np.isin(code, kept)
    cell = code * 2 + is_b.astype(np.int64)
    n_cells = 2 * (int(code.max()) + 1)

    def demeaned(a: np.ndarray, key: np.ndarray) -> np.ndarray:
        count = np.bincount(key, minlength=n_cells)[:, None]
        sums = np.stack([np.bincount(key, weights=a[:, j], minlength=n_cells) for j in range(a.shape[1])], axis=1)
        return a - (sums / np.maximum(count, 1))[key]

    dy, dx = demeaned(values, cell)[use], demeaned(x, cell)[use]
    sxx = (dx * dx).sum(axis=0)
    theta = np.divide((dx * dy).sum(axis=0), sxx, out=np.zeros_like(sxx), where=sxx > 0)
    x_centred = demeaned(x, code)  # deviation from the stratum's mean over both groups
    adjusted = values - theta * x_centred
    adjusted[~use] = values[~use]
    return adjusted, theta
