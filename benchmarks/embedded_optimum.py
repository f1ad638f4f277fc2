"""Headroom, measured: the exact optimum of the embedded catalog's DP-solvable SKUs against the
tuned heuristics and a trained policy, on the same held-out demand (docs/headroom.md).

Per catalog seed: the SKUs without substitution group or supplier delay, lead time <=
--max-lead, shelf life 0 or <= --max-life and a small enough state each get a finite-horizon
DP (embedded_dp.py, calendar known); forecast-base-stock and forecast-s-S are tuned on the
whole catalog as a run tunes them; all are simulated by VectorEnv on eval.seed, eval.seed +
1, ...; the tables give each policy's profit gap to the optimum per segment, with the paired
SE over SKUs. --grid adds the best policy on today's cover grid; --lot-factors F ... also the
best on the joint (lot factor, offset) grid of policy.actions.lot_factors.

    PYTHONPATH=src .venv/bin/python benchmarks/embedded_optimum.py [--catalog-seeds 0 1 2] [--grid]
        [--lot-factors 0 0.5 1 2] [--run RUN_DIR ...] [--episodes 8] [--tune-cache DIR] [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import embedded_dp as dp
from embedded_grid import grid_levels, joint_grid
from embedded_policy import TablePolicy

from skurl.catalog import Catalog, load_catalog
from skurl.catalog.schema import catalog_digest
from skurl.catalog.synthetic import segments
from skurl.commands.common import embedded_overrides
from skurl.config import Config, load_config
from skurl.errors import UserError
from skurl.policy.baselines import make_policy
from skurl.policy.tuning import tune
from skurl.sim.episode import COST_FIELDS, make_env, sku_cost, totals_dict
from skurl.sim.layout import catalog_widths
from skurl.sim.state import make_params

BASELINES = ("forecast-base-stock", "forecast-s-S")


def config_for(args: argparse.Namespace, seed: int) -> Config:
    base = [] if args.config else embedded_overrides()
    cfg = load_config(args.config, [*base, *args.set, f"catalog.seed={seed}"])
    if cfg.sim.backorders or cfg.sim.issuing != "fifo" or cfg.sim.review_days != 1:
        raise UserError("embedded_optimum: sim.backorders=false, sim.issuing=fifo and sim.review_days=1 "
                        "expected (the DP's model)")
    return cfg


def select(catalog: Catalog, par: np.ndarray, days: int, args: argparse.Namespace,
           ) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """(rows, bound B per row) of the DP-solvable SKUs, and how many each rule left out."""
    life, lead = catalog.shelf_life.astype(np.int64), catalog.lead_time.astype(np.int64)
    rules = {"substitution group": catalog.group >= 0, "supplier delay": catalog.delay_prob > 0,
             f"lead time > {args.max_lead}": lead > args.max_lead,
             f"shelf life > {args.max_life}": life > args.max_life}
    ok = ~np.logical_or.reduce(list(rules.values()))
    dropped = {k: int(v.sum()) for k, v in rules.items()}
    rows = np.flatnonzero(ok)
    bounds = np.array([dp.position_bound(par, int(i), dp.daily_means(par, int(i), days)) for i in rows], np.int64)
    dims = np.maximum(life[rows], 1) + lead[rows] - 1
    states = np.array([dp.state_count(int(d), int(b)) for d, b in zip(dims, bounds, strict=True)])
    # state x order x demand outcomes per day, about: y and q average B / (dims + 1)
    work = states * (bounds / (dims + 1.0) + 1.0) ** 2
    big = (states > args.max_states) | ((bounds + 1.0) ** dims > args.max_dense) | (work > args.max_work)
    dropped[f"states > {args.max_states} or work > {args.max_work:g}"] = int(big.sum())
    return rows[~big], bounds[~big], dropped


def solve_all(par: np.ndarray, rows: np.ndarray, bounds: np.ndarray, days: int, keep: int,
              extra: dict[str, np.ndarray] | None = None, offsets: np.ndarray | None = None,
              factors: np.ndarray | None = None) -> dict:
    """The optimum of each row (models, tables, V_0); with `extra` ({"z", "lot"}: the tuned
    forecast-s-S), also the best policy on the cover grid and the grid's centre alone, both
    with exact means in place of forecasts (embedded_grid.py); with lot `factors`, the best on
    the joint grid too."""
    out = {"models": [], "optimal": [], "v0": []}
    if extra is not None:
        out.update(grid=[], center=[], lots=[])
    start = time.perf_counter()
    for j, i in enumerate(rows):
        if j and j % 100 == 0:
            print(f"  DP: {j} of {rows.size} SKUs, {time.perf_counter() - start:.0f} s", flush=True)
        model = dp.build_model(par, int(i), days, int(bounds[j]))
        v, table = dp.solve(model, keep)
        out["models"].append(model)
        out["optimal"].append(table)
        out["v0"].append(float(v[dp.initial_state(model)]))
        if extra is not None:
            levels, center = grid_levels(par, int(i), days, float(extra["z"][j]), offsets)
            lot = int(extra["lot"][j])
            out["grid"].append(dp.solve(model, keep, levels=levels, lot=lot)[1])
            out["center"].append(dp.solve(model, keep, levels=levels[:, center:center + 1], lot=lot)[1])
            if factors is not None:
                joint, lots = joint_grid(levels, lot, factors)
                out["lots"].append(dp.solve(model, keep, levels=joint, lot=lots)[1])
    return out


def tuned_params(name: str, cfg: Config, full: Catalog, cache: str | None) -> dict[str, np.ndarray]:
    """Baseline `name` tuned per SKU on the whole catalog, as a run tunes it; with `cache`, kept
    in CACHE/<digest of catalog, sim and eval settings>-<name>.npz (arrays only, no pickle)."""
    key = json.dumps([catalog_digest(full), dataclasses.asdict(cfg.sim), dataclasses.asdict(cfg.eval)], sort_keys=True)
    path = Path(cache) / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}-{name}.npz" if cache else None
    if path is not None and path.exists():
        with np.load(path, allow_pickle=False) as f:
            return {k: f[k] for k in f.files}
    result = tune(name, full, cfg.sim, eval_seed=cfg.eval.seed, days=cfg.eval.days, warmup=cfg.eval.warmup,
                  sku_days=cfg.eval.tune_sku_days, max_skus=cfg.eval.tune_max_skus)
    params = {k: np.broadcast_to(np.asarray(v, np.float64), (len(full),)).copy() for k, v in result.params.items()}
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, **params)
    return params


def profit_of(totals: dict[str, np.ndarray], days: int) -> np.ndarray:
    return (totals["revenue"] - sku_cost(totals)) / days


def position(obs) -> np.ndarray:
    return obs.raw.on_hand + obs.raw.pipeline.sum(axis=1)


def score(env, policy, cfg: Config, episodes: int, unit_cost: np.ndarray,
          breakdown: dict[str, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """Per-SKU profit per SKU-day over the counted days, mean over the held-out episodes (as
    sim/episode.run_episode counts it), and the same plus the unit cost of the change in
    stock position over those days: purchases are paid when ordered, so a lot bought just
    before the window ends (or just before it starts) swings the window's profit by the lot's
    cost; valuing the stock change removes most of that noise (docs/headroom.md). `breakdown`,
    when given, receives each SKU's demand, revenue and every cost per SKU-day (episode mean)."""
    days, warmup = cfg.eval.days, cfg.eval.warmup
    profit = np.zeros(env.num_skus)
    adjusted = np.zeros(env.num_skus)
    for k in range(episodes):
        if callable(getattr(policy, "reset", None)):
            policy.reset()
        obs = env.reset(cfg.eval.seed + k, 0)
        start = position(obs)
        for t in range(warmup + days):
            if t == warmup:
                env.reset_totals()
                start = position(obs)
            res = env.step(policy.orders(obs))
            if res.failed.size and res.failed.any():
                raise RuntimeError(f"{int(res.failed.sum())} SKUs failed in the simulator")
            obs = res.obs
        totals = totals_dict(env.totals())
        p = profit_of(totals, days)
        if breakdown is not None:
            for f in ("demand", "revenue", *COST_FIELDS):
                breakdown[f] = breakdown.get(f, 0.0) + totals[f] / (days * episodes)
        profit += p
        adjusted += p + unit_cost * (position(obs) - start) / days
    info = {k: getattr(policy, k) for k in ("outside", "at_bound") if hasattr(policy, k)}
    return profit / episodes, adjusted / episodes, info


def segment_masks(catalog: Catalog) -> dict[str, np.ndarray]:
    seg = {k: v for k, v in segments(catalog).items() if v.any()}
    seg["order cost"] = catalog.order_cost > 0
    seg["plain"] = (catalog.order_cost <= 0) & (catalog.shelf_life == 0) & (catalog.promo_period == 0)
    return {k: v for k, v in seg.items() if v.any()}


def gaps(profits: dict[str, np.ndarray], masks: dict[str, np.ndarray]) -> dict:
    """Per segment: SKUs, optimum per SKU-day and each policy's gap % with its paired SE."""
    opt = profits["optimal"]
    out = {}
    for seg, m in masks.items():
        o = float(opt[m].mean())
        row = {"skus": int(m.sum()), "optimal_profit": o}
        for name, p in profits.items():
            if name == "optimal":
                continue
            diff = opt[m] - p[m]
            se = float(diff.std(ddof=1) / math.sqrt(m.sum())) if m.sum() > 1 else float("nan")
            row[name] = {"profit": float(p[m].mean()), "gap_pct": 100 * float(diff.mean()) / abs(o),
                         "se_pct": 100 * se / abs(o)}
        out[seg] = row
    return out


def run_seed(args: argparse.Namespace, seed: int, runs: dict[int, str]) -> dict:
    start = time.perf_counter()
    cfg = config_for(args, seed)
    full = load_catalog(cfg.catalog)
    par = make_params(full, False).par
    keep = cfg.eval.warmup + cfg.eval.days
    horizon = keep + args.tail
    rows, bounds, dropped = select(full, par, horizon, args)
    sub = full.subset(rows)
    print(f"catalog seed {seed}: {len(full)} SKUs, {rows.size} DP-solvable; left out: {dropped}", flush=True)
    params = {name: {k: v[rows] for k, v in tuned_params(name, cfg, full, args.tune_cache).items()}
              for name in BASELINES}
    t_tune = time.perf_counter() - start
    print(f"  baselines tuned in {t_tune:.0f} s", flush=True)
    extra = params["forecast-s-S"] if args.grid else None
    a = cfg.policy.actions
    factors = np.asarray(args.lot_factors, np.float64) if args.lot_factors else None
    sol = solve_all(par, rows, bounds, horizon, keep, extra, np.linspace(a.z_min, a.z_max, a.n), factors)
    t_dp = time.perf_counter() - start - t_tune
    env = make_env(sub, dataclasses.replace(cfg.sim, days=keep), catalog_widths(full))
    policies = {"optimal": TablePolicy(env, sol["models"], sol["optimal"])}
    if args.grid:
        policies["grid-best"] = TablePolicy(env, sol["models"], sol["grid"])
        policies["fss-exact-mean"] = TablePolicy(env, sol["models"], sol["center"])
        if factors is not None:
            policies["lots-best"] = TablePolicy(env, sol["models"], sol["lots"])
    for name in BASELINES:
        policies[name] = make_policy(name, sub, cfg.sim, params[name])
    if seed in runs:
        from skurl.learn.run_policy import policy_of_run

        policies["trained"] = policy_of_run(runs[seed], catalog=sub)
    profits, adjusted, info = {}, {}, {}
    unit_cost = sub.unit_cost.astype(np.float64)
    for name, pol in policies.items():
        profits[name], adjusted[name], info[name] = score(env, pol, cfg, args.episodes, unit_cost)
        print(f"  simulated {name}: {profits[name].mean():.4f} per SKU-day, stock-adjusted "
              f"{adjusted[name].mean():.4f}", flush=True)
    masks = segment_masks(sub)
    result = {"catalog_seed": seed, "skus": len(full), "dp_skus": int(rows.size), "left_out": dropped,
              "states": summary([m.states.shape[0] for m in sol["models"]]), "bound": summary(bounds),
              "dp_v0_per_day": float(np.mean(sol["v0"]) / keep), "policy_info": info,
              "seconds": {"tune": round(t_tune, 1), "dp": round(t_dp, 1),
                          "simulate": round(time.perf_counter() - start - t_tune - t_dp, 1)},
              "segments": gaps(profits, masks), "segments_adjusted": gaps(adjusted, masks),
              "per_sku": {k: v.tolist() for k, v in profits.items()},
              "per_sku_adjusted": {k: v.tolist() for k, v in adjusted.items()},
              "sku_id": sub.sku_id.tolist()}
    if "trained" in profits:
        closed = adjusted["trained"] - adjusted["forecast-s-S"]
        room = adjusted["optimal"] - adjusted["forecast-s-S"]
        result["trained_gap_closed_pct"] = 100 * float(closed.sum() / room.sum()) if room.sum() > 0 else None
    return result


def summary(values) -> dict:
    a = np.asarray(values, dtype=np.float64)
    return {"min": float(a.min()), "median": float(np.median(a)), "max": float(a.max())} if a.size else {}


def print_table(title: str, seg: dict) -> None:
    names = [k for k in next(iter(seg.values())) if k not in ("skus", "optimal_profit")]
    print(f"\n{title}: profit gap to the DP optimum, % of its profit (paired SE over SKUs)")
    print(f"{'segment':<12} {'SKUs':>5} {'optimum':>9}" + "".join(f" {n:>20}" for n in names))
    for s, row in seg.items():
        cells = "".join(f" {row[n]['gap_pct']:>12.3f} ({row[n]['se_pct']:.3f})" for n in names)
        print(f"{s:<12} {row['skus']:>5} {row['optimal_profit']:>9.4f}{cells}")


def parse_runs(items: list[str]) -> dict[int, str]:
    """--run RUN_DIR: scored on the catalog seed of the run's own config."""
    out = {}
    for item in items:
        from skurl.policy.learned import run_config_file

        cfg = load_config(run_config_file(item, "embedded_optimum --run"))
        out[int(cfg.catalog.seed)] = item
    return out


def add_selection_args(ap: argparse.ArgumentParser) -> None:
    """The options of `select` and the DP's horizon (shared with dc_headroom.py)."""
    ap.add_argument("--max-lead", type=int, default=3, help="longest lead time solved")
    ap.add_argument("--max-life", type=int, default=4, help="longest shelf life solved (perishables)")
    ap.add_argument("--max-states", type=int, default=20_000, help="most DP states per SKU")
    ap.add_argument("--max-work", type=float, default=3e5,
                    help="most state x order x demand outcomes per day of a SKU (DP time)")
    ap.add_argument("--max-dense", type=float, default=4e6, help="most entries of a SKU's state lookup")
    ap.add_argument("--tail", type=int, default=60, help="days solved beyond the episode (end effects)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--catalog-seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--config", help="a config file (default: the embedded defaults of `skurl train`)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    add_selection_args(ap)
    ap.add_argument("--episodes", type=int, default=8, help="held-out episodes (seeds eval.seed, ...)")
    ap.add_argument("--grid", action="store_true", help="also the best policy on the cover grid (exact means)")
    ap.add_argument("--lot-factors", type=float, nargs="+", default=[], metavar="F",
                    help="with --grid: also the best on the joint (lot factor x the tuned lot, offset) grid "
                         "of policy.actions.lot_factors")
    ap.add_argument("--run", action="append", default=[], metavar="RUN_DIR", help="a trained run to score")
    ap.add_argument("--json", help="write the results to this JSON file")
    ap.add_argument("--tune-cache", metavar="DIR", help="keep the tuned baselines' parameters here")
    args = ap.parse_args(argv)
    for name in ("max_lead", "max_life", "max_states", "tail", "episodes"):
        if getattr(args, name) < (1 if name in ("max_lead", "max_states", "episodes") else 0):
            ap.error(f"--{name.replace('_', '-')} {getattr(args, name)}: expected an integer >= "
                     f"{1 if name in ('max_lead', 'max_states', 'episodes') else 0}")
    if args.lot_factors and (not args.grid or any(not (math.isfinite(f) and f >= 0) for f in args.lot_factors)):
        ap.error(f"--lot-factors {args.lot_factors}: expected numbers >= 0, with --grid")
    runs = parse_runs(args.run)
    results = []
    for seed in args.catalog_seeds:
        r = run_seed(args, seed, runs)
        print(f"  {r['dp_skus']} SKUs, states {r['states']}, seconds {r['seconds']}, policy info {r['policy_info']}")
        if "trained_gap_closed_pct" in r:
            print(f"  trained policy closes {r['trained_gap_closed_pct']:.1f}% of forecast-s-S's gap")
        print_table(f"catalog seed {seed}, profit as skurl eval counts it", r["segments"])
        print_table(f"catalog seed {seed}, stock-adjusted profit", r["segments_adjusted"])
        results.append(r)
        if args.json:  # after each seed: a long run leaves what it has
            Path(args.json).write_text(json.dumps({"args": vars(args), "seeds": results}, indent=1))
    pool = None
    if len(results) > 1:
        seeds = " ".join(map(str, args.catalog_seeds))
        pool = {key: pooled_results(results, args, key) for key in ("per_sku", "per_sku_adjusted")}
        print_table(f"catalog seeds {seeds} pooled, profit as skurl eval counts it", pool["per_sku"])
        print_table(f"catalog seeds {seeds} pooled, stock-adjusted profit", pool["per_sku_adjusted"])
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "seeds": results, "pooled": pool}, indent=1))
    return 0


def pooled_results(results: list[dict], args: argparse.Namespace, key: str) -> dict:
    """All seeds' SKUs together (figures results[*][key]), segments by the same rules."""
    names = [k for k in results[0][key] if all(k in r[key] for r in results)]
    profits = {k: np.concatenate([np.asarray(r[key][k]) for r in results]) for k in names}
    per_seed = []
    for r in results:
        full = load_catalog(config_for(args, r["catalog_seed"]).catalog)
        sub = full.subset(np.searchsorted(full.sku_id, np.asarray(r["sku_id"])))
        per_seed.append((len(sub), segment_masks(sub)))
    segs = list(dict.fromkeys(seg for _, m in per_seed for seg in m))
    masks = {seg: np.concatenate([m.get(seg, np.zeros(n, bool)) for n, m in per_seed]) for seg in segs}
    return gaps(profits, masks)


def run_cli(entry: Callable[[], int]) -> NoReturn:
    """Exit with `entry()`'s status; a config or run-directory mistake (UserError) exits 2 with
    one line (shared with dc_headroom.py)."""
    try:
        sys.exit(entry())
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    run_cli(main)
