"""`skurl ab`: stratified A/B tests of replenishment policies on SKUs.

    skurl ab assign --catalog CAT.parquet --share 0.5 --strata category,velocity --seed 7 --out groups.parquet
    skurl ab simulate --groups groups.parquet --policy-a forecast-base-stock --run-b runs/R --days 28 --out outcomes.parquet
    skurl ab report --groups groups.parquet --outcomes outcomes.parquet

Group A is the control (the policy in use), group B the treatment; --share is B's share.
The split, the KPIs and the interval are described in serve/ab.py and serve/ab_stats.py.
"""

from __future__ import annotations

import argparse
import sys
import types
from typing import TYPE_CHECKING, Any

import numpy as np

from skurl.columns.strata import STRATA_COLUMNS, VELOCITY
from skurl.commands.common import add_config_flags, config_from_args, print_json
from skurl.errors import UserError
from skurl.serve import ab

if TYPE_CHECKING:
    import pyarrow as pa
    from rich.table import Table

    from skurl.catalog import Catalog
    from skurl.config import Config
    from skurl.policy.api import Policy


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ab", help="A/B tests on SKUs: stratified split, simulated rehearsal, KPI report")
    ab_sub = p.add_subparsers(dest="ab_command", required=True, parser_class=type(p))
    _assign_parser(ab_sub)
    _simulate_parser(ab_sub)
    _report_parser(ab_sub)


def _assign_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("assign", help="split a catalog's SKUs into groups A and B within strata")
    add_config_flags(p)
    p.add_argument("--catalog", metavar="FILE", help="Parquet/CSV catalog (default: the config's catalog)")
    p.add_argument("--share", type=float, default=0.5, help="share of SKUs in group B, in (0, 1)")
    p.add_argument("--strata", default="category,velocity",
                   help=f"comma-separated: {VELOCITY} (demand-rate tercile) or integer catalog columns "
                   f"({', '.join(STRATA_COLUMNS)}); '' = none")
    p.add_argument("--seed", type=int, default=0, help="seed of the split")
    p.add_argument("--out", required=True, metavar="GROUPS.parquet", help="sku_id, group, stratum")
    p.set_defaults(func=run_assign)


def _simulate_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("simulate", help="rehearse a test: simulate both groups with common random numbers")
    add_config_flags(p)
    p.add_argument("--groups", required=True, metavar="GROUPS.parquet")
    p.add_argument("--policy-a", default="forecast-base-stock", metavar="NAME", help="group A's baseline policy")
    p.add_argument("--run-a", metavar="RUN_DIR", help="group A's trained policy instead of --policy-a")
    b = p.add_mutually_exclusive_group(required=True)
    b.add_argument("--run-b", metavar="RUN_DIR", help="group B's trained policy (RUN_DIR of `skurl train`)")
    b.add_argument("--policy-b", metavar="NAME", help="group B's baseline policy")
    p.add_argument("--no-tune", action="store_true",
                   help="use baselines with their default parameters (default: tuned as `skurl eval --tune`)")
    p.add_argument("--days", type=int, help="days counted (default eval.days)")
    p.add_argument("--warmup", type=int, help="days simulated before counting (default eval.warmup)")
    p.add_argument("--seed", type=int, help="first seed (default eval.seed)")
    p.add_argument("--episodes", type=int, default=1, help="episodes (seeds seed, seed+1, ...)")
    p.add_argument("--no-pre-period", action="store_true",
                   help="skip the pre-period (one more episode, every SKU on policy A) whose pre_* columns "
                   "give the report's CUPED estimate")
    p.add_argument("--out", required=True, metavar="OUTCOMES.parquet", help="per-SKU outcomes")
    p.set_defaults(func=run_simulate)


def _report_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="compare the groups' KPIs: stratified B - A with bootstrap intervals")
    p.add_argument("--groups", required=True, metavar="GROUPS.parquet")
    p.add_argument("--outcomes", required=True, metavar="OUTCOMES.parquet",
                   help=f"one row per SKU: sku_id, {', '.join(ab_stats_columns())}")
    p.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples")
    p.add_argument("--level", type=float, default=0.95, help="confidence level of the intervals")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap")
    p.add_argument("--min-cell", type=int, default=5,
                   help="strata with fewer SKUs (networks, on a network catalog) than this in group A or B "
                   "are compared as one pooled stratum")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run_report)


def ab_stats_columns() -> tuple[str, ...]:
    from skurl.serve.ab_stats import OUTCOME_COLUMNS

    return OUTCOME_COLUMNS


def run_assign(args: argparse.Namespace) -> int:
    ab.check_share(args.share)
    strata = ab.parse_strata(args.strata)
    if args.catalog:
        from skurl.catalog.io import read_catalog

        catalog = read_catalog(args.catalog)
    else:
        from skurl.catalog import load_catalog

        catalog = load_catalog(config_from_args(args, embedded=True).catalog)
    groups = ab.assign(catalog, share=args.share, strata=strata, seed=args.seed)
    ab.write_table(groups.table(), args.out)
    n_b = int(groups.is_b.sum())
    strata_n = np.unique(groups.stratum.astype(str)).size
    print(f"{args.out}: {len(catalog)} SKUs, A {len(catalog) - n_b}, B {n_b} ({n_b / len(catalog):.1%}), "
          f"{strata_n} strata{_network_counts(groups)}")
    return 0


def _network_counts(groups: ab.Groups) -> str:
    """', in N networks (A a, B b)' for a split by network; '' otherwise."""
    if groups.network is None:
        return ""
    nets, first = np.unique(groups.network, return_index=True)
    n_b = int(groups.is_b[first].sum())
    return f", in {nets.size} networks (A {nets.size - n_b}, B {n_b})"


def _side_policy(args: argparse.Namespace, cfg: Config, catalog: Catalog, run: str | None,
                 name: str | None) -> Policy:
    """One group's policy through `skurl eval`'s resolve_policy (tuned like `eval --tune`)."""
    from skurl.commands.eval_cmd import resolve_policy

    flags = types.SimpleNamespace(run=run, policy=name, tune=not args.no_tune)
    return resolve_policy(flags, cfg, catalog)[0]


def run_simulate(args: argparse.Namespace) -> int:
    from skurl.catalog import load_catalog
    from skurl.commands.eval_cmd import _check_run_overrides, feature_widths
    from skurl.policy.baselines import check_policy_name
    from skurl.policy.learned import run_config_file
    from skurl.serve.ab_sim import SplitPolicy, simulate

    for value, flag in ((args.days, "--days"), (args.episodes, "--episodes")):
        if value is not None and value < 1:
            raise UserError(f"skurl ab simulate: {flag} {value}, expected an integer >= 1")
    for name in (args.policy_a if not args.run_a else None, args.policy_b):
        if name is not None:
            check_policy_name(name)
    run = args.run_b or args.run_a
    if run:
        run_config = run_config_file(run, "--run-b" if args.run_b else "--run-a")
        _check_run_overrides(args.overrides)
        args.config = args.config or str(run_config)
    groups = ab.read_groups(args.groups)
    extra = [f"eval.{k}={v}" for k, v in (("days", args.days), ("warmup", args.warmup), ("seed", args.seed))
             if v is not None]
    cfg = config_from_args(args, extra, embedded=True)  # without --config: `skurl train`'s catalog
    full = load_catalog(cfg.catalog)
    catalog, is_b = _split_catalog(full, groups, args.groups)
    policy = SplitPolicy(_side_policy(args, cfg, catalog, args.run_a, args.policy_a),
                         _side_policy(args, cfg, catalog, args.run_b, args.policy_b), is_b)
    table, failed = simulate(catalog, cfg.sim, policy, days=cfg.eval.days, warmup=cfg.eval.warmup,
                             seed=cfg.eval.seed, episodes=args.episodes, widths=feature_widths(full, run),
                             pre_period=not args.no_pre_period)
    if failed.any():
        print(f"skurl ab simulate: {int(failed.sum())} SKUs failed in the simulator and are left out",
              file=sys.stderr)
        table = table.filter(~failed)
    ab.write_table(table, args.out)
    print(f"{args.out}: {table.num_rows} SKUs x {cfg.eval.days * args.episodes} days ({policy.name})")
    return 0


def _split_catalog(full: Catalog, groups: ab.Groups, path: str) -> tuple[Catalog, np.ndarray]:
    """The catalog rows of the grouped SKUs (catalog order) and their B mask."""
    present = np.isin(groups.sku_id, full.sku_id)
    if not present.all():
        raise UserError(f"--groups {path}: SKU {groups.sku_id[~present][0]} is not in the catalog "
                        f"({int((~present).sum())} such SKUs); expected SKUs of the simulated catalog")
    index = np.flatnonzero(np.isin(full.sku_id, groups.sku_id))
    catalog = full.subset(index)
    order = np.argsort(groups.sku_id)
    pos = order[np.searchsorted(groups.sku_id, catalog.sku_id, sorter=order)]
    if full.has_network:
        _check_network_groups(full, catalog, groups, pos, path)
    return catalog, groups.is_b[pos]


def _check_network_groups(full: Catalog, catalog: Catalog, groups: ab.Groups, pos: np.ndarray, path: str) -> None:
    """A network catalog's groups: whole networks (every location grouped), each in one
    group, and the file's `network` column (when there) the catalog's networks."""
    root = ab.network_ids(full)
    grouped = np.isin(full.sku_id, catalog.sku_id)
    ungrouped = np.isin(root, root[grouped]) & ~grouped
    if ungrouped.any():
        i = int(np.argmax(ungrouped))
        raise UserError(f"--groups {path}: SKU {int(full.sku_id[i])} of network {int(root[i])} is in no group "
                        f"({int(ungrouped.sum())} such SKUs); expected whole networks (`skurl ab assign`)")
    mine = ab.network_ids(catalog)
    if groups.network is not None:
        bad = groups.network[pos] != mine
        if bad.any():
            i = int(np.argmax(bad))
            raise UserError(f"--groups {path}: SKU {int(catalog.sku_id[i])} column 'network' = "
                            f"{int(groups.network[pos][i])}, the catalog's network is {int(mine[i])}; expected "
                            "the groups of this catalog")
    ab.check_networks_whole(f"--groups {path}", catalog.sku_id, mine, groups.is_b[pos])


def _read_outcomes(path: str, groups: ab.Groups) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """OUTCOMES.parquet checked and aligned with the groups: (columns, row of each group SKU).
    The pre-period columns (serve/ab_cuped.py) are read when any is there, and then all must be."""
    from skurl.serve.ab_cuped import PRE_COLUMNS
    from skurl.serve.ab_stats import OUTCOME_COLUMNS

    required = {"sku_id": "integer SKU ids", **{c: "numbers (per-SKU totals)" for c in OUTCOME_COLUMNS}}
    table = ab.read_parquet(path, "--outcomes", required)
    if set(table.column_names) & set(PRE_COLUMNS):
        what = f"numbers (per-SKU pre-period totals: all of {', '.join(PRE_COLUMNS)} or none)"
        pre = {c: what for c in PRE_COLUMNS}
        ab.check_columns(table, path, "--outcomes", pre)
        required |= pre
    cols = _outcome_columns(table, path, required)
    sku = cols["sku_id"]
    unique, counts = np.unique(sku, return_counts=True)
    if (counts > 1).any():
        raise UserError(f"--outcomes {path}: SKU {unique[counts > 1][0]} appears more than once; expected one row per SKU")
    for ids, other, what in ((groups.sku_id, sku, "has no outcome"), (sku, groups.sku_id, "is in no group")):
        missing = ~np.isin(ids, other)
        if missing.any():
            raise UserError(f"--outcomes {path}: SKU {ids[missing][0]} {what} ({int(missing.sum())} such SKUs); "
                            "expected the groups file's SKUs exactly")
    order = np.argsort(sku)
    return cols, order[np.searchsorted(sku, groups.sku_id, sorter=order)]


def _outcome_columns(table: pa.Table, path: str, required: dict[str, str]) -> dict[str, np.ndarray]:
    """The required columns as arrays, each value checked: finite; days > 0; units and
    inventory cost >= 0 (profit may be negative)."""
    import pyarrow as pa

    cols = {}
    for name in required:
        column = table.column(name)
        if not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)):
            raise UserError(f"--outcomes {path}: column '{name}' is {column.type}; expected {required[name]}")
        cols[name] = column.to_numpy().astype(np.int64 if name == "sku_id" else np.float64)
    for name in required:
        if name == "sku_id":
            continue
        days, signed = name.endswith("sku_days"), name.endswith("profit")
        bad = ~np.isfinite(cols[name]) | ((cols[name] <= 0) if days else False if signed else (cols[name] < 0))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise UserError(f"--outcomes {path}: SKU {cols['sku_id'][i]}: {name} {cols[name][i]}; expected a finite "
                            "number" + (" > 0" if days else "" if signed else " >= 0"))
    return cols


def run_report(args: argparse.Namespace) -> int:
    from skurl.serve.ab_stats import compare

    if args.resamples < 100:
        raise UserError(f"skurl ab report: --resamples {args.resamples}, expected an integer >= 100")
    if not 0.5 <= args.level < 1.0:
        raise UserError(f"skurl ab report: --level {args.level}, expected a number in [0.5, 1)")
    if args.min_cell < 1:
        raise UserError(f"skurl ab report: --min-cell {args.min_cell}, expected an integer >= 1")
    groups = ab.read_groups(args.groups)
    cols, rows = _read_outcomes(args.outcomes, groups)
    aligned = {k: v[rows] for k, v in cols.items()}
    try:
        result = compare(aligned, groups.is_b, groups.stratum, resamples=args.resamples, level=args.level,
                         seed=args.seed, min_cell=args.min_cell, network=groups.network)
    except ValueError as exc:
        raise UserError(f"--groups {args.groups}: {exc}; expected groups A and B in at least one stratum") from None
    if args.json:
        out: dict[str, Any] = {**result, **{key: {k: v.to_json() for k, v in result[key].items()}
                                            for key in ("kpis", "kpis_cuped") if key in result}}
        print_json(out)
    else:
        print_report(result)
    return 0


def print_report(result: dict[str, Any]) -> None:
    """The KPI tables (plain, CUPED) and the notes; on a network catalog the unit compared
    and resampled is the network (serve/ab_stats.network_totals)."""
    from rich.console import Console

    from skurl.serve.ab_stats import MIN_EFFECTIVE_UNITS

    console = Console(width=140)  # the interval column stays on one line in logs too
    nets = result.get("networks")
    unit = "network" if nets else "SKU"
    counts = f" ({nets['A']} and {nets['B']} networks)" if nets else ""
    title = (f"skurl ab report: A {result['skus']['A']} SKUs, B {result['skus']['B']} SKUs{counts}, "
             f"{result['strata_compared']} of {result['strata']} strata")
    console.print(_kpi_table(title, result["kpis"], result["level"]))
    if "kpis_cuped" in result:
        console.print(_kpi_table(f"CUPED: adjusted by each {unit}'s pre-period figures", result["kpis_cuped"],
                                 result["level"], plain=result["kpis"]))
    if result["strata_pooled"]:
        console.print(f"{result['strata_pooled']} strata with fewer than {result['min_cell']} {unit}s in a group "
                      "are compared as one pooled stratum")
    left_out = result[f"{unit.lower()}s_left_out"]
    if left_out:
        console.print(f"{left_out} {unit}s in strata without both groups are left out")
    few = [name for name, kpi in result["kpis"].items() if kpi.few_units]
    if few:
        console.print(f"fewer than {MIN_EFFECTIVE_UNITS} effective {unit}s in a group (a few {unit}s carry the KPI), "
                      f"so the interval understates how far another split could move it: {', '.join(few)}")
    console.print(f"stratified difference in means (ratio estimates), percentile bootstrap of "
                  f"{result['resamples']} resamples {'of whole networks ' if nets else ''}within strata")


def _kpi_table(title: str, kpis: dict[str, Any], level: float, plain: dict[str, Any] | None = None) -> Table:
    """One table row per KPI; with `plain`, also the interval's width relative to plain's."""
    from rich.table import Table

    table = Table(title=title)
    columns = ["KPI", "A", "B", "B - A", f"{level:.0%} interval", "relative", "effective units"]
    for col in columns + (["width vs plain"] if plain else []):
        table.add_column(col)
    for name, kpi in kpis.items():
        rel = kpi.to_json()["relative"]
        row = [name, f"{kpi.a:.4f}", f"{kpi.b:.4f}", f"{kpi.diff:+.4f}", f"[{kpi.low:+.4f}, {kpi.high:+.4f}]",
               "n/a" if rel is None else f"{rel:+.2%}", f"{kpi.effective_units:,.1f}{' (few)' if kpi.few_units else ''}"]
        if plain:
            width = plain[name].high - plain[name].low
            row.append(f"{(kpi.high - kpi.low) / width:.0%}" if width > 0 else "n/a")
        table.add_row(*row)
    return table
