"""`skurl catalog synth|describe|validate`: make, summarize and check catalog files."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from skurl.catalog.schema import DIST_NAMES, Catalog
from skurl.commands.common import add_config_flags, config_from_args, print_json
from skurl.errors import UserError

SLOW_RATE = 0.1  # units/day: "a few units a month"
FAST_RATE = 100.0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("catalog", help="generate, describe and validate SKU catalogs")
    cmds = p.add_subparsers(dest="catalog_command", required=True)

    synth = cmds.add_parser("synth", help="write a synthetic retailer-like catalog (Parquet or CSV)")
    synth.add_argument("--skus", type=int, help="number of SKUs (default: catalog.skus)")
    synth.add_argument("--out", required=True, help="output file: .parquet, .pq or .csv")
    synth.add_argument("--seed", type=int, help="generator seed (default: catalog.seed)")
    synth.add_argument("--force", action="store_true", help="replace --out if it exists")
    add_config_flags(synth)
    synth.set_defaults(func=_synth)

    describe = cmds.add_parser("describe", help="summarize a catalog file or the configured catalog")
    describe.add_argument("file", nargs="?", help="catalog file (default: the catalog of the config)")
    describe.add_argument("--json", action="store_true", help="print the summary as JSON")
    add_config_flags(describe)
    describe.set_defaults(func=_describe)

    validate = cmds.add_parser("validate", help="check a catalog file: 'ok: N SKUs' or the first error")
    validate.add_argument("file", help="catalog file (.parquet, .pq or .csv)")
    validate.set_defaults(func=_validate)


def summarize(catalog: Catalog) -> dict[str, Any]:
    """The catalog's distribution in a few figures (for `describe` and reports)."""
    rate = catalog.demand_mean.astype(np.float64)
    q = np.quantile(rate, [0.1, 0.5, 0.9, 0.99])
    grouped = catalog.group >= 0
    perishable = catalog.shelf_life > 0
    dist = np.bincount(catalog.demand_dist, minlength=len(DIST_NAMES)) / len(catalog)
    return {
        "skus": len(catalog),
        "categories": int(np.unique(catalog.category).shape[0]),
        "demand_p10": float(q[0]),
        "demand_median": float(q[1]),
        "demand_p90": float(q[2]),
        "demand_p99": float(q[3]),
        "demand_max": float(rate.max()),
        "slow_share": float((rate < SLOW_RATE).mean()),
        "fast_share": float((rate >= FAST_RATE).mean()),
        "dist_shares": {DIST_NAMES[k]: float(v) for k, v in enumerate(dist)},
        "lead_time_min": int(catalog.lead_time.min()),
        "lead_time_median": float(np.median(catalog.lead_time)),
        "lead_time_max": int(catalog.lead_time.max()),
        "delay_share": float((catalog.delay_prob > 0).mean()),
        "perishable_share": float(perishable.mean()),
        "shelf_life_median": float(np.median(catalog.shelf_life[perishable])) if perishable.any() else 0.0,
        "groups": int(np.unique(catalog.group[grouped]).shape[0]),
        "substitutable_share": float(grouped.mean()),
        "promo_share": float((catalog.promo_period > 0).mean()),
        "order_cost_share": float((catalog.order_cost > 0).mean()),
        "price_median": float(np.median(catalog.price)),
    }


def _rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    dists = ", ".join(f"{k} {v:.0%}" for k, v in s["dist_shares"].items())
    return [
        ("SKUs", f"{s['skus']:,}"),
        ("categories", f"{s['categories']:,}"),
        ("demand/day p10 / median / p90", f"{s['demand_p10']:.3g} / {s['demand_median']:.3g} / {s['demand_p90']:.3g}"),
        ("demand/day p99 / max", f"{s['demand_p99']:.4g} / {s['demand_max']:.4g}"),
        (f"slow (< {SLOW_RATE:g}/day) / fast (>= {FAST_RATE:g}/day)", f"{s['slow_share']:.1%} / {s['fast_share']:.1%}"),
        ("demand distributions", dists),
        ("lead time min / median / max", f"{s['lead_time_min']} / {s['lead_time_median']:g} / {s['lead_time_max']} days"),
        ("late-prone suppliers", f"{s['delay_share']:.1%}"),
        ("perishable (median shelf life)", f"{s['perishable_share']:.1%} ({s['shelf_life_median']:g} days)"),
        ("substitution groups (SKUs in them)", f"{s['groups']:,} ({s['substitutable_share']:.1%})"),
        ("promoted", f"{s['promo_share']:.1%}"),
        ("fixed order cost", f"{s['order_cost_share']:.1%}"),
        ("median price", f"{s['price_median']:.3g}"),
    ]


def _synth(args: argparse.Namespace) -> int:
    from skurl.catalog.io import write_catalog
    from skurl.catalog.synthetic import synthetic_catalog

    extra = [f"catalog.seed={args.seed}"] if args.seed is not None else []
    extra += [f"catalog.skus={args.skus}"] if args.skus is not None else []
    cfg = config_from_args(args, extra)
    if Path(args.out).exists() and not args.force:
        raise UserError(f"skurl catalog synth: --out '{args.out}' exists; expected a new path "
                        "(or --force to replace it)")
    start = time.perf_counter()
    catalog = synthetic_catalog(cfg.catalog)
    path = write_catalog(catalog, args.out)
    s = summarize(catalog)
    print(
        f"wrote {s['skus']:,} SKUs to {path} ({path.stat().st_size / 1e6:.1f} MB, "
        f"{time.perf_counter() - start:.1f} s, seed {cfg.catalog.seed}): demand/day median "
        f"{s['demand_median']:.3g}, p99 {s['demand_p99']:.4g}, max {s['demand_max']:.4g}; "
        f"{s['perishable_share']:.0%} perishable, {s['substitutable_share']:.0%} in "
        f"{s['groups']:,} substitution groups, {s['promo_share']:.0%} promoted, lead time "
        f"{s['lead_time_min']}-{s['lead_time_max']} days"
    )
    return 0


def _describe(args: argparse.Namespace) -> int:
    from skurl.catalog import load_catalog
    from skurl.catalog.io import read_catalog

    if args.file:
        if args.config or args.overrides:
            # FILE is the catalog: --config/--set would be ignored (catalog.* keys describe
            # another catalog; the others do not change a file's rows).
            raise UserError(f"skurl catalog describe: FILE '{args.file}' and --config/--set both "
                            "name a catalog; expected one of them (e.g. --set catalog.kind=file "
                            "--set catalog.path=FILE)")
        catalog, source = read_catalog(args.file), str(Path(args.file))
    else:
        cfg = config_from_args(args, embedded=True)  # without --config: the catalog of a bare `skurl train`
        catalog, source = load_catalog(cfg.catalog), f"{cfg.catalog.kind} catalog from the config"
    s = summarize(catalog)
    if args.json:
        print_json(s)
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=source, show_header=False)
    table.add_column("metric", style="bold")
    table.add_column("value", justify="right")
    for name, value in _rows(s):
        table.add_row(name, value)
    Console().print(table)
    return 0


def _validate(args: argparse.Namespace) -> int:
    from skurl.catalog.io import read_catalog

    catalog = read_catalog(args.file)
    print(f"ok: {len(catalog)} SKUs ({args.file})")
    return 0
