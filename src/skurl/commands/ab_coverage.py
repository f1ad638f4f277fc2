"""How often `skurl ab report`'s intervals hold the difference `skurl eval` measures, over many
random splits of one catalog (a check of the report's statistics on simulator outcomes, not a
command; docs/ab_acceptance.md has its figures):

    python -m skurl.commands.ab_coverage RUN_DIR [SPLITS]

B is the run's trained policy, A the tuned forecast-base-stock. The pure worlds (every SKU on
A, every SKU on B) and the pre-period (every SKU on A, the next seed) are simulated once; a
split's outcomes are read off them per SKU. That is what `ab simulate` gives up to the
substitution between A and B SKUs of one group, which is negligible (on the embedded
catalog 7 of 2000 SKUs' profit moved; mean absolute change 1.4e-4 per SKU-day). The truth is eval's difference:
B's KPI over all SKUs minus A's."""

from __future__ import annotations

import json
import sys
import types
from typing import Any

import numpy as np

from skurl.catalog.schema import Catalog
from skurl.serve import ab
from skurl.serve.ab_stats import KPIS, OUTCOME_COLUMNS, compare

ESTIMATES = ("kpis", "kpis_cuped")


def catalog_kpis(t: dict[str, np.ndarray]) -> dict[str, float]:
    """The report's KPIs over all SKUs (what `skurl eval` prints for one policy)."""
    days = t["sku_days"].sum()
    return {"fill_rate": float(1 - t["lost"].sum() / t["demand"].sum()),
            "lost_units_per_sku_day": float(t["lost"].sum() / days),
            "waste_units_per_sku_day": float(t["waste"].sum() / days),
            "inventory_cost_per_sku_day": float(t["inventory_cost"].sum() / days),
            "profit_per_sku_day": float(t["profit"].sum() / days)}


def worlds(run: str) -> tuple[Catalog, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The run's catalog and per-SKU outcomes with every SKU on A (with the pre-period), on B."""
    from skurl.catalog import load_catalog
    from skurl.commands.eval_cmd import feature_widths, resolve_policy
    from skurl.config import load_config
    from skurl.serve.ab_sim import SplitPolicy, simulate

    cfg = load_config(f"{run}/config.yaml")
    full = load_catalog(cfg.catalog)
    a = resolve_policy(types.SimpleNamespace(run=None, policy="forecast-base-stock", tune=True), cfg, full)[0]
    b = resolve_policy(types.SimpleNamespace(run=run, policy=None, tune=False), cfg, full)[0]
    kw: dict[str, Any] = {"days": cfg.eval.days, "warmup": cfg.eval.warmup, "seed": cfg.eval.seed,
          "widths": feature_widths(full, run)}
    n = len(full)
    out = []
    for is_b, pre in ((np.zeros(n, bool), True), (np.ones(n, bool), False)):
        table, _ = simulate(full, cfg.sim, SplitPolicy(a, b, is_b), pre_period=pre, **kw)
        out.append({c: table.column(c).to_numpy().astype(np.float64) for c in table.column_names if c != "sku_id"})
    return full, out[0], out[1]


def coverage(run: str, splits: int, resamples: int = 500) -> dict[str, object]:
    full, on_a, on_b = worlds(run)
    truth_a, truth_b = catalog_kpis(on_a), catalog_kpis(on_b)
    truth = {k: truth_b[k] - truth_a[k] for k in KPIS}
    held = {e: dict.fromkeys(KPIS, 0) for e in ESTIMATES}
    widths: dict[str, dict[str, list[float]]] = {e: {k: [] for k in KPIS} for e in ESTIMATES}
    pre = {c: v for c, v in on_a.items() if c.startswith("pre_")}
    for s in range(splits):
        groups = ab.assign(full, share=0.5, strata=["category", "velocity"], seed=1000 + s)
        split = {c: np.where(groups.is_b, on_b[c], on_a[c]) for c in OUTCOME_COLUMNS} | pre
        result = compare(split, groups.is_b, groups.stratum, resamples=resamples, seed=s)
        for e in ESTIMATES:
            for k, r in result[e].items():
                held[e][k] += int(r.low <= truth[k] <= r.high)
                widths[e][k].append(r.high - r.low)
    return {"skus": len(full), "splits": splits, "eval_a": truth_a, "eval_difference": truth, "held": held,
            "median_width": {e: {k: float(np.median(v)) for k, v in w.items()} for e, w in widths.items()}}


if __name__ == "__main__":
    print(json.dumps(coverage(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 100), indent=1))
