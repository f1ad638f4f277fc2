"""Headroom of supply networks: how much any policy could gain over the tuned echelon base-stock,
bounded above by exact DP of a relaxation (docs/networks.md, "dc networks: headroom").

The relaxation gives each store of a network what its DC can at best give it: unlimited
supply at the store link's lead time, bought at the item's unit cost plus the link's ship
cost, with no DC (no DC holding, no DC order cost, no freight in transit charged). Any policy
of the network is a policy of the relaxed stores that pays at least as much, so the relaxed
stores' optimum (embedded_dp.py, one finite-horizon DP per store, calendar known) bounds the
network's expected profit from above. The DC's own costs are what the bound leaves out: the
tighter the gap, the less room a learned policy has.

Per catalog seed: the networks whose every store is DP-solvable (short lead, short shelf life,
small state: embedded_optimum.select) are compared; echelon base-stock is tuned as `skurl
eval --tune` tunes it (per network), on the whole catalog; the relaxed stores keep their
sku_ids, so both see the same customer demand on eval.seed, eval.seed + 1, ...; a trained
run (--run) is scored on the same days. Profits are per network-day (the sum over the
network's locations), with the paired SE over networks. Caveats: the DP maximizes the whole
horizon's profit, the table counts the days after eval.warmup (so the bound is the relaxed
optimum's profit on those days, not a supremum over every window-tuned policy), and states
beyond its position bound B order nothing (`outside` counts them).

    PYTHONPATH=src .venv/bin/python benchmarks/dc_headroom.py [--catalog-seeds 0 1 2] [--episodes 4]
        [--run RUN_DIR ...] [--set KEY=VALUE] [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from embedded_optimum import add_selection_args, run_cli, score, select, solve_all, tuned_params
from embedded_policy import TablePolicy

from skurl.catalog import Catalog, load_catalog
from skurl.catalog.network import echelons
from skurl.config import Config, load_config
from skurl.errors import UserError
from skurl.policy.baselines import make_policy
from skurl.sim.episode import make_env
from skurl.sim.layout import catalog_widths
from skurl.sim.state import make_params

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "dc.yaml"
BASELINE = "echelon-base-stock"


def config_for(args: argparse.Namespace, seed: int) -> Config:
    cfg = load_config(args.config, [*args.set, f"catalog.seed={seed}"])
    if cfg.sim.backorders or cfg.sim.issuing != "fifo" or cfg.sim.review_days != 1:
        raise UserError("dc_headroom: sim.backorders=false, sim.issuing=fifo and sim.review_days=1 "
                        "expected (the DP's model)")
    if cfg.sim.transfers.enabled:
        raise UserError("dc_headroom: sim.transfers.enabled=false expected (the relaxation has no transfers)")
    return cfg


def relaxed_stores(catalog: Catalog) -> tuple[np.ndarray, np.ndarray, Catalog]:
    """(store rows, each store's network root row, the stores as lone SKUs): upstream -1,
    the link's lead time, no supplier delay, unit cost + ship cost, the same sku_ids."""
    return store_relaxation(catalog, *echelons(catalog))


def store_relaxation(catalog: Catalog, parent: np.ndarray, root: np.ndarray, echelon: np.ndarray,
                     ) -> tuple[np.ndarray, np.ndarray, Catalog]:
    """relaxed_stores from the catalog's echelons() (computed once by the caller)."""
    stores = np.flatnonzero((echelon == 1) & (parent >= 0))
    sub = catalog.subset(stores)
    relaxed = dataclasses.replace(
        sub, upstream=np.full(len(sub), -1), item=np.full(len(sub), -1), ship_cost=np.zeros(len(sub)),
        unit_cost=sub.unit_cost + sub.ship_cost, delay_prob=np.zeros(len(sub)), delay_max=np.zeros(len(sub)))
    return stores, root[stores], relaxed


def covered_networks(roots: np.ndarray, store_ok: np.ndarray) -> np.ndarray:
    """Root rows of the networks whose every store was solved."""
    all_roots = np.unique(roots)
    failed = np.unique(roots[~store_ok])
    return np.setdiff1d(all_roots, failed)


def per_network(values: np.ndarray, roots: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Sum of per-row values by network root, for the roots in `keep` (sorted)."""
    idx = np.searchsorted(keep, roots)
    idx = np.minimum(idx, keep.size - 1)
    inside = keep[idx] == roots
    out = np.zeros(keep.size)
    np.add.at(out, idx[inside], values[inside])
    return out


def where_it_goes(fields: dict[str, np.ndarray], roots: np.ndarray, nets: np.ndarray,
                  is_store: np.ndarray | None = None) -> dict[str, float]:
    """Revenue and each cost per network-day over the compared networks; with `is_store`,
    each cost split into stores' and upstream locations' ("dc ...")."""
    out = {}
    for f, v in fields.items():
        if f == "demand":
            continue
        if is_store is None or f == "revenue":
            out[f] = float(per_network(v, roots, nets).mean())
            continue
        out[f] = float(per_network(np.where(is_store, v, 0.0), roots, nets).mean())
        out[f"dc {f}"] = float(per_network(np.where(is_store, 0.0, v), roots, nets).mean())
    return out


def gap_row(bound: np.ndarray, profit: np.ndarray) -> dict[str, float]:
    """The bound's lead over `profit`, per network-day and % of profit, paired SE over networks."""
    diff = bound - profit
    n = diff.size
    se = float(diff.std(ddof=1) / math.sqrt(n)) if n > 1 else float("nan")
    p = float(profit.mean())
    return {"profit_per_network_day": p, "gap_per_network_day": float(diff.mean()), "gap_se": se,
            "gap_pct": 100 * float(diff.mean()) / abs(p), "gap_se_pct": 100 * se / abs(p)}


def whole_catalog(full: Catalog, is_store: np.ndarray, roots: np.ndarray, nets: np.ndarray, dp_bound: np.ndarray,
                  demand: np.ndarray, adjusted: dict[str, np.ndarray]) -> dict:
    """A bound for every network: each store's demand all sold at its margin (price - unit - ship
    cost; or all lost, where the penalty is the smaller loss) with no other cost, or, where the DP
    solved the network, the smaller of that and the relaxed optimum (stock-adjusted). Its lead
    over each policy's stock-adjusted profit, summed over the catalog, with the paired SE over
    networks."""
    every = np.unique(roots)
    margin = np.maximum(full.price - full.unit_cost - full.ship_cost, -full.lost_sale_cost).astype(np.float64)
    perfect = per_network(np.where(is_store, demand * margin, 0.0), roots, every)
    bound = perfect.copy()
    at = np.searchsorted(every, nets)
    bound[at] = np.minimum(perfect[at], dp_bound)
    out: dict = {"networks": int(every.size), "dp_tighter": int((dp_bound < perfect[at]).sum())}
    for name, adj in adjusted.items():
        profit = per_network(adj, roots, every)
        diff = bound - profit
        total = float(profit.sum())
        out[name] = {"profit_per_day": total, "bound_lead_pct": 100 * float(diff.sum()) / abs(total),
                     "se_pct": 100 * float(diff.std(ddof=1)) * math.sqrt(diff.size) / abs(total)}
    return out


def solvable_networks(args: argparse.Namespace, relaxed: Catalog, par: np.ndarray, roots: np.ndarray,
                      horizon: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, int]]:
    """(root rows of the networks whose every store the DP solves, those stores' rows of
    `relaxed` (parameters `par`), their position bounds, what each rule left out); `roots`:
    each store's network root."""
    solved, bounds, dropped = select(relaxed, par, horizon, args)
    ok = np.zeros(len(relaxed), bool)
    ok[solved] = True
    same_day = relaxed.lead_time < 1  # a same-day link: no outside supplier has one (the DP's L >= 1)
    dropped["store link lead time 0"] = int((ok & same_day).sum())
    ok &= ~same_day
    nets = covered_networks(roots, ok)
    keep = np.isin(roots[solved], nets) & ok[solved]
    return nets, solved[keep], bounds[keep], dropped


def run_seed(args: argparse.Namespace, seed: int, runs: dict[int, str]) -> dict:
    start = time.perf_counter()
    cfg = config_for(args, seed)
    full = load_catalog(cfg.catalog)
    if not (full.upstream >= 0).any():
        raise UserError(f"dc_headroom: catalog seed {seed} has no networks (catalog.synthetic.network=dc expected)")
    keep_days = cfg.eval.warmup + cfg.eval.days
    parent, all_roots, echelon = echelons(full)
    stores, roots, relaxed = store_relaxation(full, parent, all_roots, echelon)
    networks = int(np.unique(roots).size)
    par = make_params(relaxed, False).par
    nets, rows, bounds, dropped = solvable_networks(args, relaxed, par, roots, keep_days + args.tail)
    if nets.size == 0:
        raise UserError(f"dc_headroom: no network of catalog seed {seed} has every store DP-solvable ({dropped})")
    print(f"catalog seed {seed}: {len(full)} rows, {networks} networks, {stores.size} stores; "
          f"{nets.size} networks with every store solvable ({rows.size} stores); left out: {dropped}", flush=True)
    sol = solve_all(par, rows, bounds, keep_days + args.tail, keep_days)
    print(f"  DP of {rows.size} stores in {time.perf_counter() - start:.0f} s", flush=True)
    sub = relaxed.subset(rows)
    sim_cfg = dataclasses.replace(cfg.sim, days=keep_days)
    env = make_env(sub, sim_cfg, catalog_widths(sub))
    parts: dict[str, dict[str, np.ndarray]] = {"relaxed optimum": {}}
    bound_row, bound_adj, info = score(env, TablePolicy(env, sol["models"], sol["optimal"]), cfg, args.episodes,
                                       full.unit_cost[stores[rows]].astype(np.float64), parts["relaxed optimum"])
    results = {"relaxed optimum": (per_network(bound_row, roots[rows], nets),
                                   per_network(bound_adj, roots[rows], nets))}
    breakdown = {"relaxed optimum": where_it_goes(parts["relaxed optimum"], roots[rows], nets)}
    net_env = make_env(full, sim_cfg, catalog_widths(full))
    policies = {BASELINE: make_policy(BASELINE, full, cfg.sim, tuned_params(BASELINE, cfg, full, args.tune_cache))}
    if seed in runs:
        from skurl.learn.run_policy import policy_of_run

        policies["trained"] = policy_of_run(runs[seed], catalog=full)
    is_store = np.zeros(len(full), bool)
    is_store[stores] = True
    row_profit, row_adjusted = {}, {}
    for name, pol in policies.items():
        parts[name] = {}
        row_profit[name], row_adjusted[name], _ = score(net_env, pol, cfg, args.episodes,
                                                        full.unit_cost.astype(np.float64), parts[name])
        results[name] = (per_network(row_profit[name], all_roots, nets), per_network(row_adjusted[name], all_roots, nets))
        breakdown[name] = where_it_goes(parts[name], all_roots, nets, is_store)
    bound, bound_adjusted = results["relaxed optimum"]
    table = {name: {"as eval counts": gap_row(bound, p), "stock-adjusted": gap_row(bound_adjusted, adj)}
             for name, (p, adj) in results.items() if name != "relaxed optimum"}
    whole = whole_catalog(full, is_store, all_roots, nets, bound_adjusted, parts[BASELINE]["demand"], row_adjusted)
    return {"catalog_seed": seed, "rows": len(full), "networks": networks,
            "networks_compared": int(nets.size), "stores_solved": int(rows.size), "left_out": dropped,
            # the compared networks are the small ones: their share of the baseline's money
            "compared_profit_share": float(results[BASELINE][0].sum() / row_profit[BASELINE].sum()),
            "bound_per_network_day": float(bound.mean()), "policy_info": info, "gaps": table,
            "per_network_day": breakdown, "whole_catalog": whole,
            "seconds": round(time.perf_counter() - start, 1)}


def print_seed(r: dict) -> None:
    print(f"\ncatalog seed {r['catalog_seed']}: {r['networks_compared']} of {r['networks']} networks "
          f"({100 * r['compared_profit_share']:.1f}% of {BASELINE}'s profit), relaxed optimum "
          f"{r['bound_per_network_day']:.3f} per network-day; its lead over each policy (paired SE):")
    for name, kinds in r["gaps"].items():
        cells = "  ".join(f"{kind}: {g['profit_per_network_day']:.3f}, +{g['gap_pct']:.2f}% ({g['gap_se_pct']:.2f})"
                          for kind, g in kinds.items())
        print(f"  {name:<20} {cells}")
    w = r["whole_catalog"]
    print(f"every network ({w['networks']}; the DP's bound tighter on {w['dp_tighter']}), all demand sold at "
          "its margin with no other cost, stock-adjusted; its lead over each policy (paired SE):")
    for name, g in w.items():
        if isinstance(g, dict):
            print(f"  {name:<20} {g['profit_per_day']:.1f} per day, +{g['bound_lead_pct']:.2f}% ({g['se_pct']:.2f})")
    print("per network-day (dc: the upstream locations' share):")
    for name, b in r["per_network_day"].items():
        print(f"  {name:<20} " + ", ".join(f"{k.replace('_cost', '')} {v:.3f}" for k, v in b.items() if v))


def parse_runs(items: list[str]) -> dict[int, str]:
    from skurl.policy.learned import run_config_file

    return {int(load_config(run_config_file(item, "dc_headroom --run")).catalog.seed): item for item in items}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--catalog-seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--config", default=str(DEFAULT_CONFIG), help="a network config (default configs/dc.yaml)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    add_selection_args(ap)  # --max-lead (a store's link), --max-life, --max-states, --max-work, --max-dense, --tail
    ap.add_argument("--episodes", type=int, default=4, help="held-out episodes (seeds eval.seed, ...)")
    ap.add_argument("--run", action="append", default=[], metavar="RUN_DIR", help="a trained run to score")
    ap.add_argument("--tune-cache", metavar="DIR", help="keep the tuned baseline's parameters here")
    ap.add_argument("--json", help="write the results to this JSON file")
    args = ap.parse_args(argv)
    for name in ("max_lead", "max_states", "episodes"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} {getattr(args, name)}: expected an integer >= 1")
    if args.max_life < 0 or args.tail < 0:
        ap.error("--max-life and --tail: expected integers >= 0")
    runs = parse_runs(args.run)
    results = []
    for seed in args.catalog_seeds:
        results.append(run_seed(args, seed, runs))
        print_seed(results[-1])
        if args.json:  # after each seed: a long run leaves what it has
            Path(args.json).write_text(json.dumps({"args": vars(args), "seeds": results}, indent=1))
    return 0


if __name__ == "__main__":
    run_cli(main)
