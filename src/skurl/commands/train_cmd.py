"""`skurl train`: co-located PPO training on embedded defaults (no servers, no files).

    skurl train                                  # synthetic catalog, defaults
    skurl train --config configs/lost_sales.yaml --set catalog.lead_time=4
    skurl train --resume runs/20250101-120000    # continue exactly where it stopped
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from skurl.commands.common import add_config_flags, config_from_args, print_json
from skurl.commands.embedded import EMBEDDED, EMBEDDED_GRID
from skurl.errors import UserError, missing_extra

if TYPE_CHECKING:
    from collections.abc import Callable

    from skurl.train.loop import TrainResult


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a PPO replenishment policy (co-located: one process)",
                       description="Without --config: synthetic catalog with " + ", ".join(EMBEDDED)
                       + ", " + ", ".join(EMBEDDED_GRID))
    add_config_flags(p)
    p.add_argument("--run-dir", help="where checkpoints, logs and the report go (default runs/TIMESTAMP)")
    p.add_argument("--iterations", type=int, help="total training iterations (sets train.iterations)")
    p.add_argument("--resume", metavar="RUN_DIR",
                   help="continue a run from its latest checkpoint with its own config (--set may extend it)")
    p.add_argument("--catalog", metavar="FILE",
                   help="Parquet/CSV catalog to train on (sets catalog.kind=file, catalog.path); with --resume "
                   "the run continues on it: SKUs added and removed by id, shards recomputed, same network")
    p.add_argument("--no-baseline", action="store_true",
                   help="skip tuning and scoring the baselines (eval.baselines)")
    p.add_argument("--json", action="store_true", help="print the final evaluation as one JSON object")
    p.add_argument("--mode", choices=("colocated", "decoupled", "ray"), default=None,
                   help="colocated (default): one process | decoupled: sim servers, collectors and learner "
                   "as processes (gRPC, Redis or gRPC weights, rollout store) | ray: Ray actors; "
                   "--resume continues in the run's own mode unless --mode says otherwise")
    p.add_argument("--address", help="--mode ray: Ray cluster address (sets ray.address); "
                   "default: start a local Ray instance")
    p.add_argument("--repeats", type=int, default=1, metavar="K",
                   help="train K seeds (train.seed, +1, ...) in RUN_DIR/repeat_k; RUN_DIR/report.md shows "
                   "their mean and spread (with tracking.mlflow: child runs of one parent run)")
    p.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                   help="serve this process's Prometheus /metrics on 127.0.0.1:PORT (0 = a free port, "
                   "logged); --mode decoupled: sets deploy.metrics_base_port (learner, then its children)")
    p.set_defaults(func=run_as_role)


def run_as_role(args: argparse.Namespace) -> int:
    """`run` with this process exporting its mode's metrics: the driver of decoupled and
    ray is the learner; colocated holds the learner and the collector in one."""
    from skurl.telemetry.metrics import as_role

    mode = args.mode = _mode(args)
    port = getattr(args, "metrics_port", None)
    if mode == "decoupled" and port is not None:
        args.overrides = [*args.overrides, f"deploy.metrics_base_port={port}"]
    elif port is not None:
        return as_role("colocated" if mode == "colocated" else "learner", _serving_metrics(port, run))(args)
    return as_role("colocated" if mode == "colocated" else "learner", run)(args)


def _serving_metrics(port: int, command: Callable[[argparse.Namespace], int]
                     ) -> Callable[[argparse.Namespace], int]:
    """`command` with /metrics served for as long as it runs (colocated and ray drivers;
    the decoupled learner serves its own)."""
    def served(args: argparse.Namespace) -> int:
        from skurl.telemetry.metrics import serve_metrics

        with serve_metrics(port) as metrics:
            print(f"metrics on {metrics.url}", file=sys.stderr, flush=True)
            return int(command(args))
    return served


def run(args: argparse.Namespace) -> int:
    from skurl.commands import train_tracked

    repeats = getattr(args, "repeats", 1)
    if repeats < 1:
        raise UserError(f"skurl train: --repeats {repeats}, expected an integer >= 1")
    if repeats > 1 and args.resume:
        raise UserError("skurl train: --repeats K trains K new runs; drop --resume "
                        "(to continue one repeat: --resume RUN_DIR/repeat_k)")
    extra = _prepare(args)
    if repeats > 1:
        return train_tracked.train_repeats(args, extra, repeats, train_once)
    run_dir = Path(args.resume or args.run_dir)
    result = train_tracked.tracked(train_tracked.resolved_config(args, extra), run_dir,
                                   lambda: train_once(args, extra))
    return _finish(args, result)


def _prepare(args: argparse.Namespace) -> list[str]:
    """Check the flags, add the embedded defaults, pick the run dir; the overrides that
    other flags imply."""
    if not args.config and not args.resume:
        args.overrides = [*EMBEDDED, *EMBEDDED_GRID, *args.overrides]
    extra = []
    if args.iterations is not None:
        if args.iterations < 0:
            raise UserError(f"skurl train: --iterations {args.iterations}, expected an integer >= 0")
        extra.append(f"train.iterations={args.iterations}")
    if args.resume and (args.config or args.run_dir):
        raise UserError("skurl train: --resume RUN_DIR takes the run's own config and directory; "
                        "drop --config/--run-dir (use --set to change keys)")
    if not args.resume:
        args.run_dir = args.run_dir or f"runs/{time.strftime('%Y%m%d-%H%M%S')}"
        _check_run_dir(Path(args.run_dir))
    if getattr(args, "mode", None) is None:
        args.mode = _mode(args)
    mode = args.mode
    _check_mode_flags(mode, getattr(args, "address", None))
    if getattr(args, "address", None):
        extra.append(f"ray.address={args.address}")
    if args.resume:
        _check_resume_network(Path(args.resume), list(args.overrides))
    catalog = getattr(args, "catalog", None)
    if catalog and not args.resume:
        extra += ["catalog.kind=file", f"catalog.path={catalog}"]
    return extra


def train_once(args: argparse.Namespace, extra: list[str]) -> TrainResult:
    """One training (fresh or resumed) in the mode asked for; its TrainResult."""
    from skurl.modes import mode_for
    from skurl.train.run import resume, start

    mode = getattr(args, "mode", "colocated")
    catalog = getattr(args, "catalog", None)
    if args.resume and _changes_catalog(args.resume, catalog, list(args.overrides)):
        return _resume_changed(args, catalog, list(args.overrides) + extra, mode)
    if args.resume:
        return resume(mode_for(mode), args.resume, list(args.overrides) + extra, baseline=not args.no_baseline)
    return start(mode_for(mode), config_from_args(args, extra), Path(args.run_dir), baseline=not args.no_baseline)


def _resume_changed(args: argparse.Namespace, catalog: str | None, overrides: list[str], mode: str) -> TrainResult:
    """--resume RUN --catalog NEW (or catalog.* overrides): the run on its changed SKU set."""
    from skurl.modes import mode_for
    from skurl.train.catalog_change import resume_changed

    if mode not in ("colocated", "ray"):
        raise UserError(f"skurl train --catalog: --mode {mode} cannot change the SKU set yet; "
                        "expected --mode colocated or ray")
    return resume_changed(mode_for(mode), args.resume, catalog, overrides, baseline=not args.no_baseline)


def _mode(args: argparse.Namespace) -> str:
    """--mode; with --resume and no --mode, the mode the run was started in (its MODE_FILE;
    colocated for runs that predate it)."""
    from skurl.policy.learned import CONFIG_FILE
    from skurl.train.loop import recorded_mode

    mode = getattr(args, "mode", None)
    if mode is None and args.resume:
        mode = recorded_mode(args.resume)
        if mode == "ddp":
            raise UserError(f"skurl train --resume {args.resume}: the run was started by the DDP "
                            "learner; resume it with python -m skurl.modes.ddp.learner --run-dir "
                            f"{args.resume} --config {Path(args.resume) / CONFIG_FILE} [--nproc K]")
        if mode and mode != "colocated":
            print(f"skurl train: resuming {args.resume} in --mode {mode}, the mode it was started in",
                  file=sys.stderr)
    return mode or "colocated"


def _check_mode_flags(mode: str, address: str | None) -> None:
    """Flags of --mode ray, before any work: --address means nothing elsewhere, and a
    missing ray package would fail only after the catalog is built and the baseline tuned."""
    if address and mode != "ray":
        raise UserError(f"skurl train: --address {address} is the Ray cluster of --mode ray; "
                        f"expected --mode ray with it (got --mode {mode})")
    if mode == "ray":
        try:
            import ray  # noqa: F401
        except ModuleNotFoundError as exc:
            if exc.name != "ray":
                raise
            raise missing_extra("ray", "skurl train --mode ray") from None


# Keys that set the shapes of a run's networks: its checkpoints cannot load into others.
NETWORK_KEYS = ("policy.hidden", "policy.actions.n")


def _check_resume_network(run_dir: Path, overrides: list[str]) -> None:
    """--resume with --set of a network key: name the key before any work, not a torch
    size mismatch after the catalog is built."""
    from skurl.config import load_config

    own = run_dir / "config.yaml"
    touched = [o for o in overrides if o.split("=", 1)[0].strip() in NETWORK_KEYS]
    if not touched or not own.is_file():
        return  # nothing to compare (a missing run dir is reported by the resume itself)
    before, after = load_config(own), load_config(own, overrides)
    for item in touched:
        key = item.split("=", 1)[0].strip()
        old, new = _get(before, key), _get(after, key)
        if old != new:
            raise UserError(f"skurl train --resume: --set {item} changes the network of the run "
                            f"({key}={list(old) if isinstance(old, tuple) else old} in {own}); expected "
                            "that value (start a new run to change it)")


def _get(cfg: object, key: str) -> object:
    for part in key.split("."):
        cfg = getattr(cfg, part)
    return cfg


def _check_run_dir(run_dir: Path) -> None:
    """--run-dir must be (or become) a writable directory: one line before any work, not a
    traceback when the first file is written."""
    if run_dir.exists() and not run_dir.is_dir():
        raise UserError(f"skurl train: --run-dir '{run_dir}' is a file; expected a directory (new or a run's)")
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"skurl train: --run-dir '{run_dir}': cannot create it ({exc.strerror}); "
                        "expected a writable directory path") from None
    if not os.access(run_dir, os.W_OK | os.X_OK):
        raise UserError(f"skurl train: --run-dir '{run_dir}': not writable; expected a writable directory path")


def _changes_catalog(run_dir: str, catalog: str | None, overrides: list[str]) -> bool:
    """--resume through train/catalog_change.py: with --catalog or catalog.* overrides, or
    for a run whose SKU set changed before (its network keeps its first feature widths)."""
    from skurl.train.catalog_change import CHANGE_FILE

    touched = any(o.strip().startswith("catalog.") for o in overrides)
    return bool(catalog) or touched or (Path(run_dir) / CHANGE_FILE).is_file()


def _finish(args: argparse.Namespace, result: TrainResult) -> int:
    summary = {
        "run_dir": str(result.run_dir),
        "iterations": result.iterations,
        "eval_cost": (result.eval or {}).get("avg_cost_per_sku_day"),
        "baseline_cost": (result.baseline or {}).get("avg_cost_per_sku_day"),
    }
    if args.json:
        print_json({**summary, "eval": result.eval, "baseline": result.baseline})
    else:
        print(_summary_line(result))
        print(f"report: {result.run_dir / 'report.md'}")
    return 0


def _summary_line(result: TrainResult) -> str:
    """One line: the objective of the last evaluation vs the best tuned baseline (cost,
    or profit when the run optimizes profit)."""
    line = f"run {result.run_dir}: {result.iterations} iterations"
    ev, base = result.eval or {}, result.baseline or {}
    key, label = ("avg_cost_per_sku_day", "cost")
    if ev.get("objective") == "profit":
        key, label = ("avg_profit_per_sku_day", "profit")
    value, ref = ev.get(key), base.get(key)
    if value is not None:
        line += f", {label}/SKU-day {value:.4f}"
        if ref:
            line += f" vs {base.get('policy', 'baseline')} {ref:.4f} ({100 * (value - ref) / abs(ref):+.1f}%)"
    return line
