"""The A/B comparison: business KPIs per group, stratified difference B - A, bootstrap CIs.

Outcomes (Parquet, one row per SKU; what `skurl ab simulate` writes, or a real test's
figures): sku_id, sku_days (days observed), demand, lost, waste (units), inventory_cost and
profit (money), totals over the test; optionally the same totals for a pre-period before
it (pre_sku_days, pre_demand, ...), which add a CUPED estimate (ab_cuped.py).

More: docs/internals.md (serve/ab_stats.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

# KPI name -> (numerator, denominator, higher is better); "served" = demand - lost.
KPIS: dict[str, tuple[str, str, bool]] = {
    "fill_rate": ("served", "demand", True),
    "lost_units_per_sku_day": ("lost", "sku_days", False),
    "waste_units_per_sku_day": ("waste", "sku_days", False),
    "inventory_cost_per_sku_day": ("inventory_cost", "sku_days", False),
    "profit_per_sku_day": ("profit", "sku_days", True),
}
OUTCOME_COLUMNS = ("sku_days", "demand", "lost", "waste", "inventory_cost", "profit")
_BLOCK_ELEMENTS = 4_000_000  # resampled values held at once per cell
MIN_EFFECTIVE_UNITS = 30  # below this, a KPI's interval is flagged (the usual rule of thumb for the CLT)
MIN_CELL = 5  # fewer SKUs than this in a group of a stratum: the stratum is pooled


@dataclass(frozen=True)
class KpiResult:
    name: str
    a: float
    b: float
    diff: float
    low: float
    high: float
    se: float
    higher_is_better: bool
    effective_units: float  # the smaller group's (effective_units)

    def to_json(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "diff": self.diff, "ci": [self.low, self.high], "se": self.se,
                "relative": self.diff / abs(self.a) if self.a else None,
                "higher_is_better": self.higher_is_better, "effective_units": self.effective_units}

    @property
    def few_units(self) -> bool:
        """True when a few units carry the KPI: its interval is not to be trusted."""
        return bool(self.effective_units < MIN_EFFECTIVE_UNITS)


def _values(outcomes: dict[str, np.ndarray]) -> tuple[np.ndarray, list[str]]:
    cols = [*OUTCOME_COLUMNS, "served"]
    served = outcomes["demand"] - outcomes["lost"]
    values = np.stack([*(np.asarray(outcomes[c], np.float64) for c in OUTCOME_COLUMNS), served], axis=1)
    return values, cols


def _ratios(cell_means: np.ndarray, weights: np.ndarray, cols: list[str]) -> np.ndarray:
    """KPIs from per-stratum means [..., S, C] with stratum weights [S]: [..., K]."""
    totals = np.einsum("s,...sc->...c", weights, cell_means)
    out = []
    for num, den, _ in KPIS.values():
        d = totals[..., cols.index(den)]
        out.append(np.divide(totals[..., cols.index(num)], d, out=np.full_like(d, np.nan), where=d != 0))
    return np.stack(out, axis=-1)


def compare(outcomes: dict[str, np.ndarray], is_b: np.ndarray, stratum: np.ndarray, *,
            resamples: int = 2000, level: float = 0.95, seed: int = 0, min_cell: int = MIN_CELL,
            network: np.ndarray | None = None) -> dict[str, Any]:
    """KPIs of A and B, B - A and its bootstrap interval; `outcomes` columns aligned with
    `is_b` and `stratum` (one entry per SKU). Strata with fewer than `min_cell` SKUs in a
    group are compared as one pooled stratum (pool_small_strata). With the pre-period columns (ab_cuped.py) also
    "kpis_cuped", the same KPIs from the CUPED-adjusted outcomes (the same resamples). With
    `network` (each SKU's network id) the unit is the network (network_totals)."""
    from skurl.serve.ab_cuped import PRE_COLUMNS, adjust, pre_rates

    skus = {"A": int((~is_b).sum()), "B": int(is_b.sum())}
    if network is not None:
        outcomes, is_b, stratum = network_totals(outcomes, is_b, stratum, network)
    values, cols = _values(outcomes)
    names, code = np.unique(np.asarray(stratum).astype(str), return_inverse=True)
    code, pooled = pool_small_strata(code.ravel(), is_b, min_cell)
    n_s = np.bincount(code, minlength=code.max() + 1)
    n_b = np.bincount(code, weights=is_b, minlength=n_s.size).astype(np.int64)
    both = (n_b > 0) & (n_b < n_s)
    if not both.any():
        raise ValueError("no stratum holds SKUs of both groups")
    weights = n_s[both] / n_s[both].sum()
    kept = np.flatnonzero(both)
    out: dict[str, Any] = {
        "kpis": _kpis(values, cols, is_b, code, kept, weights, resamples, level, seed),
        "skus": skus,
        **({"networks": {"A": int((~is_b).sum()), "B": int(is_b.sum())}} if network is not None else {}),
        "strata": int(names.size), "strata_compared": int(kept.size), "strata_pooled": pooled,
        "min_cell": int(min_cell),
        ("skus_left_out" if network is None else "networks_left_out"): int(n_s[~both].sum()),
        "resamples": int(resamples), "level": level, "seed": seed}
    if all(c in outcomes for c in PRE_COLUMNS):
        x = pre_rates(outcomes, cols)
        if network is not None:  # networks differ in size: the pre-period rate over the network's test days
            x = x * values[:, cols.index("sku_days")][:, None]
        adjusted, theta = adjust(values, x, is_b, code, kept)
        out["kpis_cuped"] = _kpis(adjusted, cols, is_b, code, kept, weights, resamples, level, seed)
        out["cuped_theta"] = {c: float(t) for c, t in zip(cols, theta, strict=True) if c != "sku_days"}
    return out


def network_totals(outcomes: dict[str, np.ndarray], is_b: np.ndarray, stratum: np.ndarray,
                   network: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Outcomes summed over each network's locations, with the network's group and stratum
    (its first row's; the groups file keeps networks whole). Why: the network is the unit
    of randomization, and its locations share the upstream's stock and policy, so their
    outcomes are not independent draws; resampling rows misstates the spread (A/A tests:
    too wide on profit, too narrow on inventory cost; docs/networks.md, A/B tests). A
    cluster bootstrap resamples the clusters. The KPIs stay ratios of totals (per SKU-day)."""
    _, first, net_of = np.unique(network, return_index=True, return_inverse=True)
    net_of = net_of.ravel()
    totals = {k: np.bincount(net_of, weights=np.asarray(v, np.float64), minlength=first.size)
              for k, v in outcomes.items() if k != "sku_id"}
    return totals, np.asarray(is_b, bool)[first], np.asarray(stratum)[first]


def pool_small_strata(code: np.ndarray, is_b: np.ndarray, min_cell: int) -> tuple[np.ndarray, int]:
    """Stratum codes with every stratum that has fewer than `min_cell` SKUs in group A or B
    merged into one (a new code), and how many were merged. Why: a cell of one or two SKUs
    resamples to (nearly) itself, so the within-cell bootstrap misses its spread, and with
    fat-tailed SKUs the interval comes out too narrow (60 simulated tests of 400 lognormal
    SKUs in 60 strata: 95% intervals covered the effect 50 times; pooled, 54). Merging keeps the estimate unbiased: the split gives
    every SKU of every stratum the same chance of B (ab.assign's random rounding)."""
    n_s = np.bincount(code)
    n_b = np.bincount(code, weights=is_b, minlength=n_s.size)
    small = (np.minimum(n_b, n_s - n_b) < min_cell) & (n_s > 0)
    if small.sum() < 2:
        return code, 0
    return np.where(small[code], n_s.size, code), int(small.sum())


def _kpis(values: np.ndarray, cols: list[str], is_b: np.ndarray, code: np.ndarray, kept: np.ndarray,
          weights: np.ndarray, resamples: int, level: float, seed: int) -> dict[str, KpiResult]:
    """Point estimates and percentile intervals of every KPI; the bootstrap's draws depend
    on the seed and the cell sizes only, so two calls on different values pair up."""
    rng = np.random.default_rng(seed)
    point = {}
    boot = {}
    for label, mask in (("A", ~is_b), ("B", is_b)):
        cells = [values[mask & (code == s)] for s in kept]
        point[label] = _ratios(np.stack([c.mean(axis=0) for c in cells]), weights, cols)
        boot[label] = _ratios(np.stack([_resampled_means(c, resamples, rng) for c in cells], axis=1), weights, cols)
    diff_boot = boot["B"] - boot["A"]
    alpha = (1.0 - level) / 2.0
    low, high = np.nanquantile(diff_boot, [alpha, 1.0 - alpha], axis=0)
    se = np.nanstd(diff_boot, axis=0, ddof=1)
    units = np.minimum(*(effective_units(values, cols, mask, code, kept, weights) for mask in (~is_b, is_b)))
    return {name: KpiResult(name, float(point["A"][k]), float(point["B"][k]), float(point["B"][k] - point["A"][k]),
                            float(low[k]), float(high[k]), float(se[k]), hib, float(units[k]))
            for k, (name, (_, _, hib)) in enumerate(KPIS.items())}


def effective_units(values: np.ndarray, cols: list[str], mask: np.ndarray, code: np.ndarray, kept: np.ndarray,
                    weights: np.ndarray) -> np.ndarray:
    """Per KPI, the effective number of units of one group (`mask`) that carry it: Kish's
    (sum a)^2 / sum a^2 over the units' shares a_i = W_s / n_s x |value| of the numerator and
    of the denominator, the smaller of the two. Why: when one large network holds most of a
    group's demand (or profit), the group's KPI is that network's, and a bootstrap over the
    group cannot show how far another split would move it (docs/networks.md, A/B tests:
    1.4 effective networks, A/A intervals excluding 0 at twice the nominal rate). Kish,
    "Survey Sampling", 1965, section 11.7."""
    stratum_weight = np.zeros(int(code.max()) + 1)
    stratum_weight[kept] = weights  # strata left out weigh nothing
    cell_size = np.bincount(code[mask], minlength=stratum_weight.size)
    a = np.where(mask, stratum_weight[code] / np.maximum(cell_size[code], 1), 0.0)
    out = []
    for num, den, _ in KPIS.values():
        # a numerator of zeros (no waste anywhere) is exactly 0 in every split: the denominator decides
        kish = [_kish(a * np.abs(values[:, cols.index(c)])) for c in (num, den)]
        out.append(min((k for k in kish if k > 0), default=0.0))
    return np.asarray(out)


def _kish(share: np.ndarray) -> float:
    """(sum a)^2 / sum a^2; 0 when every share is 0."""
    total, square = float(share.sum()), float(np.square(share).sum())
    return total * total / square if square > 0 else 0.0


def _resampled_means(cell: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Means [R, C] of `resamples` bootstrap resamples of the rows of `cell` [n, C]."""
    n, c = cell.shape
    block = max(1, _BLOCK_ELEMENTS // max(n * c, 1))
    out = np.empty((resamples, c))
    for start in range(0, resamples, block):
        stop = min(resamples, start + block)
        idx = rng.integers(0, n, size=(stop - start, n))
        out[start:stop] = cell[idx].mean(axis=1)
    return out
