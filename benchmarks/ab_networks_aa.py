"""A/A tests on a `dc` network catalog: how often does `skurl ab report`'s 95% interval
exclude zero when both groups run the same policy, resampling networks (the unit of the
split) or, as if the locations were independent, rows?

More: docs/networks.md (A/B tests)."""

from __future__ import annotations

import argparse
import json

import numpy as np

from skurl.catalog import load_catalog
from skurl.config import load_config
from skurl.policy.baselines import make_policy
from skurl.serve import ab
from skurl.serve.ab_sim import SplitPolicy, simulate
from skurl.serve.ab_stats import compare

KPIS = ("fill_rate", "profit_per_sku_day", "inventory_cost_per_sku_day")


def outcomes_of(args: argparse.Namespace) -> tuple[object, dict[str, np.ndarray]]:
    """The catalog and its per-row outcomes with every network on one policy: under common
    random numbers any split of it gives these very outcomes (an A/A test)."""
    cfg = load_config(None, ["catalog.synthetic.network=dc", f"catalog.skus={args.skus}",
                             f"catalog.seed={args.catalog_seed}"])
    catalog = load_catalog(cfg.catalog)
    policy = make_policy(args.policy, catalog, cfg.sim)
    table, failed = simulate(catalog, cfg.sim, SplitPolicy(policy, policy, np.zeros(len(catalog), bool)),
                             days=args.days, warmup=args.warmup, seed=1, pre_period=True)
    assert not failed.any()
    return catalog, {k: table.column(k).to_numpy().astype(np.float64) for k in table.column_names}


def false_positives(catalog: object, outcomes: dict[str, np.ndarray], strata: list[str], splits: int,
                    resamples: int) -> dict:
    """Per unit of resampling (network, row; plain and CUPED) and KPI: how many of
    `splits` random splits give an interval that excludes 0."""
    counts = {f"{unit}{cuped}": dict.fromkeys(KPIS, 0) for unit in ("network", "row") for cuped in ("", "_cuped")}
    units: dict[str, list[float]] = {k: [] for k in KPIS}  # effective networks of the smaller group
    for seed in range(splits):
        groups = ab.assign(catalog, share=0.5, strata=strata, seed=seed)
        for unit, network in (("network", groups.network), ("row", None)):
            result = compare(outcomes, groups.is_b, groups.stratum, resamples=resamples, seed=seed, network=network)
            for key, cuped in (("kpis", ""), ("kpis_cuped", "_cuped")):
                for k in KPIS:
                    kpi = result[key][k]
                    counts[f"{unit}{cuped}"][k] += int(kpi.low > 0 or kpi.high < 0)
                    if unit == "network" and not cuped:
                        units[k].append(kpi.effective_units)
    return {**counts, "median_effective_networks": {k: float(np.median(v)) for k, v in units.items()}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--skus", type=int, default=2000)
    p.add_argument("--catalog-seed", type=int, default=0)
    p.add_argument("--policy", default="echelon-base-stock")
    p.add_argument("--days", type=int, default=60)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--strata", default="velocity", help="as `skurl ab assign --strata`")
    p.add_argument("--splits", type=int, default=100)
    p.add_argument("--resamples", type=int, default=500)
    args = p.parse_args()
    catalog, outcomes = outcomes_of(args)
    nets = np.unique(ab.network_ids(catalog)).size
    counts = false_positives(catalog, outcomes, ab.parse_strata(args.strata), args.splits, args.resamples)
    print(json.dumps({"rows": len(catalog), "networks": int(nets), "strata": args.strata, "splits": args.splits,
                      "intervals_excluding_zero": counts}, indent=1))


if __name__ == "__main__":
    main()
