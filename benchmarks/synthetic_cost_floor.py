"""Can any policy's total cost be 5% below the tuned forecast-base-stock's without earning
less? Bounds for the catalog `skurl train` trains on (the embedded defaults; --config/--set
for others), on the held-out evaluation seed, from the demand the simulator drew there.

More: docs/benchmarks.md (benchmarks/synthetic_cost_floor.py)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

import numpy as np

from skurl.catalog import load_catalog
from skurl.catalog.schema import Catalog
from skurl.collect.evaluate import eval_subset, make_env, run_episode, sku_cost, sku_inventory_cost
from skurl.commands.train_cmd import EMBEDDED
from skurl.config import load_config
from skurl.policy.baselines import make_policy
from skurl.policy.tuning import tune
from skurl.train.evaluation import BASELINE


def _group_reduce(group: np.ndarray, values: np.ndarray, ufunc: np.ufunc, empty: float) -> np.ndarray:
    """Per SKU: ufunc-reduction of `values` over its substitution group (itself if none)."""
    out = values.astype(np.float64).copy()
    grouped = group >= 0
    if grouped.any():
        ids, inverse = np.unique(group[grouped], return_inverse=True)
        acc = np.full(ids.size, empty)
        ufunc.at(acc, inverse, out[grouped])
        out[grouped] = acc[inverse]
    return out


def unit_fates(catalog: Catalog, substitution: bool) -> dict[str, np.ndarray]:
    """Per SKU: (cost, profit) of a unit served by the SKU, and bounds for a unit it does
    not serve (module docstring)."""
    c = catalog.unit_cost.astype(np.float64)
    p = catalog.lost_sale_cost.astype(np.float64)
    price = catalog.price.astype(np.float64)
    f = np.where((catalog.group >= 0) & substitution, catalog.sub_frac.astype(np.float64), 0.0)
    sub_cost = _group_reduce(catalog.group, c, np.minimum, np.inf)
    sub_margin = _group_reduce(catalog.group, price - c, np.maximum, -np.inf)
    return {"serve_cost": c, "serve_profit": price - c,
            "refuse_cost": (1 - f) * p + f * np.minimum(sub_cost, p),
            "refuse_profit": -(1 - f) * p + f * np.maximum(sub_margin, -p)}


def best_profit_at_cost(demand: np.ndarray, fates: dict[str, np.ndarray], target: float) -> float:
    """Upper bound on the profit (sum over SKUs) of a policy whose cost is <= target."""
    cost = float((demand * fates["serve_cost"]).sum())
    profit = float((demand * fates["serve_profit"]).sum())
    saving = fates["serve_cost"] - fates["refuse_cost"]  # per unit refused
    loss = fates["serve_profit"] - fates["refuse_profit"]
    useful = np.flatnonzero((saving > 0) & (demand > 0))
    order = useful[np.argsort(loss[useful] / saving[useful], kind="stable")]
    for i in order:
        if cost <= target:
            break
        units = min(demand[i], (cost - target) / saving[i])
        cost -= units * saving[i]
        profit -= units * loss[i]
    return profit if cost <= target + 1e-9 * abs(target) else float("nan")


def floor_at_service(demand: np.ndarray, fates: dict[str, np.ndarray], max_refused: float) -> float:
    """Least total cost when at most `max_refused` units go unserved by their own SKU."""
    cost = float((demand * fates["serve_cost"]).sum())
    saving = fates["serve_cost"] - fates["refuse_cost"]
    useful = np.flatnonzero((saving > 0) & (demand > 0))
    left = max_refused
    for i in useful[np.argsort(-saving[useful], kind="stable")]:
        if left <= 0:
            break
        units = min(demand[i], left)
        cost -= units * saving[i]
        left -= units
    return cost


def bounds(catalog: Catalog, totals: dict[str, np.ndarray], sku_days: float, substitution: bool,
           fbs_cost: float, cut: float, fbs_other: float, shares: list[float]) -> dict[str, float]:
    """`fbs_other`: the baseline's holding + ordering + waste per SKU-day; a policy paying
    share s of it has s * fbs_other less room under the cost target, and that much less profit."""
    demand = totals["demand"]
    fates = unit_fates(catalog, substitution)
    floor = np.minimum(fates["serve_cost"], fates["refuse_cost"])
    refuse = fates["refuse_cost"] < fates["serve_cost"]
    target = (1.0 - cut) * fbs_cost
    return {
        "full_service_floor": float((demand * fates["serve_cost"]).sum() / sku_days),
        "any_policy_floor": float((demand * floor).sum() / sku_days),
        "any_policy_floor_profit": float((demand * np.where(refuse, fates["refuse_profit"],
                                                            fates["serve_profit"])).sum() / sku_days),
        "any_policy_floor_refused_share": float(demand[refuse].sum() / max(demand.sum(), 1.0)),
        "equal_service_floor": floor_at_service(demand, fates, float(totals["lost"].sum())) / sku_days,
        **{f"best_profit_at_target_cost_paying_{s:g}": best_profit_at_cost(
            demand, fates, (target - s * fbs_other) * sku_days) / sku_days - s * fbs_other for s in shares},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config")
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    ap.add_argument("--cut", type=float, default=0.05, help="cost target: this share below the baseline")
    ap.add_argument("--inventory-shares", type=float, nargs="+", default=[0.0, 0.5, 0.8, 1.0],
                    help="shares of the baseline's holding + ordering + waste the policy still pays")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    cfg = load_config(args.config, [*([] if args.config else EMBEDDED), *args.overrides])
    catalog = eval_subset(load_catalog(cfg.catalog), cfg.eval.skus)
    tuned = tune(BASELINE, catalog, cfg.sim, eval_seed=cfg.eval.seed, days=cfg.eval.days,
                 warmup=cfg.eval.warmup)
    policy = make_policy(BASELINE, catalog, cfg.sim, tuned.params)
    env = make_env(catalog, dataclasses.replace(cfg.sim, days=cfg.eval.warmup + cfg.eval.days))
    totals, failed = run_episode(env, policy, seed=cfg.eval.seed, episode=0, days=cfg.eval.days,
                                 warmup=cfg.eval.warmup)
    if failed.any():
        raise SystemExit(f"{int(failed.sum())} SKUs failed in the simulator; floors need all of them")
    sku_days = float(len(catalog) * cfg.eval.days)
    cost = float(sku_cost(totals).sum() / sku_days)
    inventory = float(sku_inventory_cost(totals, catalog.unit_cost).sum() / sku_days)
    kept = cost - inventory  # the purchase of units sold or still in stock
    profit = float((totals["revenue"].sum()) / sku_days) - cost
    out = {"skus": len(catalog), "days": cfg.eval.days, "seed": cfg.eval.seed,
           "fbs_cost": cost, "fbs_purchase_kept": kept, "fbs_inventory_cost": inventory,
           "fbs_profit": profit,
           "fbs_fill_rate": 1.0 - float(totals["lost"].sum() / max(totals["demand"].sum(), 1.0)),
           "cut": args.cut}
    other = inventory - float(totals["penalty_cost"].sum() / sku_days)  # holding + ordering + waste
    out["fbs_holding_ordering_waste"] = other
    out.update(bounds(catalog, totals, sku_days, cfg.sim.substitution, cost, args.cut, other,
                      args.inventory_shares))
    for key in ("full_service_floor", "equal_service_floor", "any_policy_floor"):
        out[key + "_vs_fbs_pct"] = 100.0 * (out[key] / cost - 1.0)
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"{out['skus']} SKUs x {out['days']} days, evaluation seed {out['seed']}")
    print(f"tuned {BASELINE}: cost {cost:.4f}/SKU-day = purchase of units sold or in stock {kept:.4f} "
          f"({100 * kept / cost:.1f}%) + inventory cost {cost - kept:.4f} ({100 * (cost - kept) / cost:.1f}%); "
          f"profit {profit:.4f}; fill rate {out['fbs_fill_rate']:.4f}")
    print(f"full-service floor (every customer served the item asked for, nothing else paid): "
          f"{out['full_service_floor']:.4f} ({out['full_service_floor_vs_fbs_pct']:+.2f}% vs {BASELINE})")
    print(f"equal-service floor (turning away at most as many customers as {BASELINE}, nothing "
          f"else paid): {out['equal_service_floor']:.4f} ({out['equal_service_floor_vs_fbs_pct']:+.2f}%)")
    print(f"any-policy floor: {out['any_policy_floor']:.4f} ({out['any_policy_floor_vs_fbs_pct']:+.2f}%), "
          f"by refusing {100 * out['any_policy_floor_refused_share']:.1f}% of demand; "
          f"its profit at most {out['any_policy_floor_profit']:.4f}")
    print(f"most profit a policy can make at cost <= {1 - args.cut:.2f} x {BASELINE}'s "
          f"({BASELINE}'s profit {profit:.4f}), if it pays this share of {BASELINE}'s holding + "
          f"ordering + waste ({other:.4f}/SKU-day):")
    for s in args.inventory_shares:
        bound = out[f"best_profit_at_target_cost_paying_{s:g}"]
        print(f"  {s:g}: {bound:.4f} ({100 * (bound / profit - 1):+.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
