"""`skurl train` around the training itself: MLflow tracking (tracking.mlflow) and
`--repeats K`, K seeds as child runs of one parent whose figures are their mean and spread
(the production practice this project descends from: at least 3 repeats per configuration).

The repeats run one after another in RUN_DIR/repeat_k (k = 0..K-1, train.seed + k); the
parent RUN_DIR gets repeats.json and a report.md with one row per seed and the mean, standard
deviation (ddof 1), min and max of each final figure.
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from skurl import atomic
from skurl.commands.common import config_from_args, print_json
from skurl.config import Config, config_to_dict, load_config
from skurl.telemetry import tracking
from skurl.telemetry.sinks import metric_sink

if TYPE_CHECKING:
    from skurl.train.loop import TrainResult

log = logging.getLogger("skurl.tracking")

REPEATS_FILE = "repeats.json"
REPEAT_DIR = "repeat_{k}"


def resolved_config(args: argparse.Namespace, extra: list[str]) -> Config:
    """The config the training will run with (a resumed run's own, plus --set)."""
    if args.resume:
        from skurl.policy.learned import run_config_file

        return load_config(run_config_file(args.resume, "--resume"), list(args.overrides) + extra)
    return config_from_args(args, extra)


def tracked(cfg: Config, run_dir: Path, train: Callable[[], TrainResult], *,
            parent: tracking.MlflowRun | None = None) -> TrainResult:
    """Run `train()`; with tracking.mlflow, inside an MLflow run of `run_dir` that gets the
    params first, every iteration's scalars, then the final figures and the run's files."""
    if not cfg.tracking.mlflow:
        return train()
    run = tracking.open_run(cfg.tracking, run_dir, name=run_dir.name, parent=parent,
                            params=tracking.flatten(config_to_dict(cfg)))
    ok = False
    try:
        with metric_sink(run):
            result = train()
        run.log_metrics(tracking.final_metrics(result.eval, result.baseline), step=result.iterations)
        _export_model(Path(result.run_dir))
        run.log_run_files(Path(result.run_dir))
        ok = True
        return result
    finally:
        run.end(ok)


def _export_model(run_dir: Path) -> None:
    """RUN_DIR/model.onnx (skurl export) for the run's MLflow artifacts; a missing onnx
    extra or a failed export is one warning, never a lost training."""
    try:
        from skurl.serve.export import export_run

        export_run(run_dir, run_dir / "model.onnx")
    except ImportError as exc:
        log.warning("tracking: no model.onnx artifact (%s; install the onnx extra)", exc)
    except Exception as exc:  # the training itself is done and saved
        log.warning("tracking: no model.onnx artifact: export failed (%s)", exc)


def train_repeats(args: argparse.Namespace, extra: list[str], repeats: int,
                  train_once: Callable[[argparse.Namespace, list[str]], Any]) -> int:
    """K trainings with seeds train.seed + k under one parent (run and report)."""
    cfg = resolved_config(args, extra)
    root = Path(args.run_dir)
    parent = None
    if cfg.tracking.mlflow:
        parent = tracking.open_run(cfg.tracking, root, name=root.name,
                                   params=tracking.flatten(config_to_dict(cfg)))
        parent.client.set_tag(parent.run_id, "skurl.repeats", str(repeats))
    ok = False
    try:
        rows = []
        for k in range(repeats):
            seed = cfg.train.seed + k
            child = copy.copy(args)
            child.run_dir = str(root / REPEAT_DIR.format(k=k))
            child_extra = [*extra, f"train.seed={seed}"]
            result = tracked(resolved_config(child, child_extra), Path(child.run_dir),
                             functools.partial(train_once, child, child_extra), parent=parent)
            rows.append({"repeat": k, "seed": seed, "run_dir": str(result.run_dir),
                         **tracking.final_metrics(result.eval, result.baseline)})
        summary = summarize(rows)
        write_summary(root, rows, summary)
        if parent is not None:
            parent.log_metrics(summary)
            parent.log_run_files(root)
        ok = True
    finally:
        if parent is not None:
            parent.end(ok)
    if args.json:
        print_json({"run_dir": str(root), "repeats": rows, "summary": summary})
    else:
        shown = ("avg_profit_per_sku_day", "avg_cost_per_sku_day")
        print(f"{repeats} repeats in {root}: " + ", ".join(
            f"{k} {summary[f'final/{k}_mean']:.4f} ± {summary[f'final/{k}_std']:.4f}"
            for k in shown if f"final/{k}_mean" in summary))
        print(f"report: {root / 'report.md'}")
    return 0


def summarize(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Mean, std (ddof 1; 0 for one row), min and max of every final figure over the rows."""
    keys = sorted({k for row in rows for k in row if k.startswith("final/")})
    out: dict[str, float] = {}
    for key in keys:
        values = np.array([row[key] for row in rows if key in row], dtype=np.float64)
        out[f"{key}_mean"] = float(values.mean())
        out[f"{key}_std"] = float(values.std(ddof=1)) if values.size > 1 else 0.0
        out[f"{key}_min"] = float(values.min())
        out[f"{key}_max"] = float(values.max())
    return out


def write_summary(root: Path, rows: list[dict[str, Any]], summary: dict[str, float]) -> None:
    """RUN_DIR/repeats.json and RUN_DIR/report.md (one row per seed, then mean ± std)."""
    atomic.write_text(root / REPEATS_FILE, json.dumps({"repeats": rows, "summary": summary}, indent=1) + "\n")
    keys = sorted({k for row in rows for k in row if k.startswith("final/")})
    lines = [f"# {len(rows)} repeats of one configuration", "",
             "Each repeat trains with its own seed (train.seed + k) and is scored on the same held-out "
             "seeds; figures per SKU-day (fill rate as a share; lost and waste units in total; "
             "`baseline_`: the tuned baseline). The spread is the standard deviation over repeats (ddof 1).", "",
             "| figure | " + " | ".join(f"[seed {r['seed']}]({REPEAT_DIR.format(k=r['repeat'])}/report.md)"
                                     for r in rows) + " | mean | std | min | max |",
             "|---|" + "---|" * (len(rows) + 4)]
    for key in keys:
        cells = [f"{row[key]:.4f}" if key in row else "n/a" for row in rows]
        cells += [f"{summary[f'{key}_{stat}']:.4f}" for stat in ("mean", "std", "min", "max")]
        lines.append(f"| {key.removeprefix('final/')} | " + " | ".join(cells) + " |")
    atomic.write_text(root / "report.md", "\n".join(lines) + "\n")
