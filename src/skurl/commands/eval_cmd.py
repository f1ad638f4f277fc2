"""`skurl eval`: score a policy on held-out seeds (eval.seed, ...) and print the figures.

    skurl eval --policy base-stock --tune --set catalog.kind=uniform --days 200 --json

Baselines come by name (--policy NAME, tuned by simulation on separate tuning seeds with
--tune). `resolve_policy` is the one place that turns flags into a Policy, so other
policy sources (a learned policy from a run directory) plug in beside --policy.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time
import types
from pathlib import Path
from typing import Any

from skurl.catalog import Catalog, load_catalog
from skurl.collect.evaluate import EvalResult, eval_subset, evaluate, make_env
from skurl.commands.common import add_config_flags, config_from_args, print_json
from skurl.config import Config
from skurl.errors import UserError
from skurl.policy.api import Policy
from skurl.policy.baselines import POLICY_NAMES, check_policy_name, make_policy
from skurl.policy.learned import run_config_file
from skurl.sim.layout import catalog_widths
from skurl.telemetry.progress import throttled_lines


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="evaluate a policy on held-out seeds (cost, fill rate, waste)")
    add_config_flags(p)
    p.add_argument("--policy", metavar="NAME", help=f"baseline policy: {' | '.join(POLICY_NAMES)}")
    p.add_argument("--run", metavar="RUN_DIR",
                   help="a trained policy: RUN_DIR of `skurl train` (its config and latest checkpoint)")
    p.add_argument("--tune", action="store_true",
                   help="tune the baseline by simulation on dedicated tuning seeds first")
    p.add_argument("--skus", type=int, help="SKUs evaluated (default eval.skus; 0 = whole catalog)")
    p.add_argument("--days", type=int, help="days counted per episode (default eval.days)")
    p.add_argument("--warmup", type=int, help="days simulated before counting (default eval.warmup)")
    p.add_argument("--seed", type=int, help="first held-out seed (default eval.seed)")
    p.add_argument("--episodes", type=int, default=1, help="episodes (seeds seed, seed+1, ...)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def _eval_overrides(args: argparse.Namespace) -> list[str]:
    flags = {"days": args.days, "warmup": args.warmup, "seed": args.seed, "skus": args.skus}
    return [f"eval.{k}={v}" for k, v in flags.items() if v is not None]


def resolve_policy(args: argparse.Namespace | types.SimpleNamespace, cfg: Config, catalog: Catalog,
                   ) -> tuple[Policy, dict[str, Any] | None]:
    """The policy the flags ask for, and its tuning summary (None when not tuned)."""
    if getattr(args, "run", None):
        from skurl.learn.run_policy import policy_of_run

        return policy_of_run(args.run, catalog=catalog), None
    if args.policy is None:
        raise UserError(f"skurl eval: --policy is required (one of: {', '.join(POLICY_NAMES)})")
    name = check_policy_name(args.policy)
    if not args.tune:
        return make_policy(name, catalog, cfg.sim), None
    from skurl.policy.tuning import tune

    start = time.perf_counter()
    result = tune(name, catalog, cfg.sim, eval_seed=cfg.eval.seed, days=cfg.eval.days,
                  warmup=cfg.eval.warmup, sku_days=cfg.eval.tune_sku_days, max_skus=cfg.eval.tune_max_skus,
                  network_tuning=cfg.eval.network_tuning, progress=throttled_lines(2.0))
    summary = {**result.summary(), "seconds": round(time.perf_counter() - start, 3)}
    return make_policy(name, catalog, cfg.sim, result.params), summary


# Keys that define a trained policy: its network, action grid and training; `eval --run`
# takes them from RUN_DIR/config.yaml, so an override of one would be silently ignored.
POLICY_KEYS = ("policy.", "ppo.", "train.", "sim.review_days")


def _check_run_overrides(overrides: list[str]) -> None:
    for item in overrides:
        key = item.split("=", 1)[0].strip()
        if key.startswith(POLICY_KEYS):
            raise UserError(f"skurl eval --run: --set {item} cannot change a trained policy (its network, "
                            "action grid and training come from RUN_DIR/config.yaml); expected catalog.*, "
                            "sim.* or eval.* keys")


def run(args: argparse.Namespace) -> int:
    if args.skus is not None and args.skus < 0:
        raise UserError(f"skurl eval: --skus {args.skus}, expected an integer >= 0")
    if args.episodes < 1:
        raise UserError(f"skurl eval: --episodes {args.episodes}, expected an integer >= 1")
    if args.policy is not None:
        check_policy_name(args.policy)  # fail before building the catalog
    if getattr(args, "run", None):
        if args.policy is not None or args.tune:
            raise UserError("skurl eval: --run scores a trained run; --policy/--tune pick a baseline; "
                            "expected one of the two")
        run_config = run_config_file(args.run, "skurl eval --run")
        _check_run_overrides(args.overrides)
        if not args.config:  # a run is scored on its own catalog
            args.config = str(run_config)
    # Without --config (or --run) on the embedded defaults: the catalog a bare `skurl train` trains on.
    cfg = config_from_args(args, _eval_overrides(args), embedded=True)
    # The first eval.skus SKUs of the configured catalog, as the in-training evaluation
    # scores them; features as wide as the whole catalog's, the width a network trained
    # on it expects (a subset alone may need fewer pipeline or age columns).
    full = load_catalog(cfg.catalog)
    catalog = eval_subset(full, cfg.eval.skus)
    policy, tuning = resolve_policy(args, cfg, catalog)
    widths = feature_widths(full, getattr(args, "run", None))
    env = make_env(catalog, dataclasses.replace(cfg.sim, days=cfg.eval.warmup + cfg.eval.days), widths)
    start = time.perf_counter()
    result = evaluate(catalog, cfg.sim, policy, days=cfg.eval.days, warmup=cfg.eval.warmup,
                      seed=cfg.eval.seed, episodes=args.episodes, env=env)
    seconds = time.perf_counter() - start
    if args.json:
        print_json({**result.to_json(), "tuning": tuning, "seconds": round(seconds, 3)})
    else:
        print_table(result, tuning, seconds, backorders=cfg.sim.backorders)
    return 0


def feature_widths(full: Catalog, run: str | None) -> tuple[int, int]:
    """The feature widths a policy is scored with: the whole catalog's (a subset alone may need
    fewer pipeline or age columns); a run whose catalog changed keeps its network's widths."""
    widths = catalog_widths(full)
    if run:
        from skurl.train.catalog_change import CatalogChange

        change = CatalogChange.load(Path(run))
        if change is not None:
            widths = (max(widths[0], change.widths[0]), max(widths[1], change.widths[1]))
    return widths


def _fmt(value: object) -> str:
    if isinstance(value, dict):
        return "  ".join(f"{k} {_fmt(v)}" for k, v in value.items())
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _se(value: float) -> str:
    """A standard error, or why there is none (one SKU-episode: nothing to spread)."""
    return f"{value:.4f}" if math.isfinite(value) else "n/a (one SKU-episode)"


def print_table(result: EvalResult, tuning: dict[str, Any] | None, seconds: float, *,
                backorders: bool = False) -> None:
    from rich.console import Console
    from rich.table import Table

    sku_days = result.skus * result.days * len(result.seeds)
    table = Table(title=f"skurl eval: {result.policy}{' (tuned)' if tuning else ''}", show_header=False)
    table.add_column("figure", style="bold")
    table.add_column("value")
    rows = [
        ("SKUs x days x seeds", f"{result.skus} x {result.days} x {len(result.seeds)} "
                                f"(warm-up {result.warmup}, seeds from {result.seeds[0]})"),
        ("avg cost / SKU-day", f"{result.avg_cost_per_sku_day:.4f} ± {_se(result.cost_se)}"),
        ("avg profit / SKU-day", f"{result.avg_profit_per_sku_day:.4f}"),
        ("avg inventory cost / SKU-day", f"{result.avg_inventory_cost_per_sku_day:.4f} "
                                         "(holding, penalty, ordering, waste)"),
        ("fill rate (customers)", f"{result.fill_rate:.4%}"),
        ("fill rate (own item)", f"{result.item_fill_rate:.4%}"),
        # with backorders the unmet units are owed, not lost (lost_units is 0 then)
        ("units backordered", f"{result.backordered_units:,.0f} "
                              f"({result.backordered_units / max(sku_days, 1):.4g} / SKU-day)")
        if backorders else
        ("lost units", f"{result.lost_units:,.0f} ({result.lost_units / max(sku_days, 1):.4g} / SKU-day)"),
        ("waste units", f"{result.waste_units:,.0f} ({result.waste_units / max(sku_days, 1):.4g} / SKU-day)"),
        ("mean on hand / SKU", f"{result.mean_on_hand:.4g}"),
        ("cost breakdown / SKU-day", _fmt(result.breakdown)),
    ]
    rows += [(f"param {k}", _fmt(v)) for k, v in result.params_summary().items()]
    if result.failed_skus:
        rows.append(("failed SKUs (excluded)", str(result.failed_skus)))
    if tuning:
        rows.append(("tuning", f"{tuning['method']}: {tuning['runs']} runs, {tuning['sku_days']:,} SKU-days, "
                               f"{tuning['objective_is']} {tuning['objective']:.4f} / SKU-day, {tuning['seconds']:.1f}s, "
                               f"seed {tuning['seed']}"))
    rows.append(("evaluation time", f"{seconds:.1f}s"))
    for k, v in rows:
        table.add_row(k, v)
    Console().print(table)
