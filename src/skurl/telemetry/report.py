"""The run report: run_dir/report.md with PNG plots under run_dir/plots/.

Inputs, both optional (a missing piece makes the report say so, never crash): run_dir/metrics.jsonl
(RunLogger, one record per iteration) and run_dir/eval.json (`write_eval`, after each evaluation):

    {"iteration": 40,                      # training iteration of the latest evaluation
     "trained": "ppo",                     # which policy is the trained one (optional)
     "policies": {name: PolicyResult, ...},
     "history": [{"iteration": 5, "ppo": 3.1, "base_stock": 2.9}, ...]}   # cost/SKU-day

The trained policy is `eval["trained"]`, else a policy named "ppo"; every other policy
is a baseline. All money figures are averages per SKU-day of evaluation."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NotRequired, TypedDict

import numpy as np

from skurl import atomic
from skurl.errors import UserError
from skurl.json_ready import json_ready
from skurl.telemetry.logger import METRICS_FILE, read_metrics
from skurl.telemetry.plots import (
    plot_cost_breakdown,
    plot_diagnostics,
    plot_learning_curve,
    plot_segments,
    plot_stage_times,
)
from skurl.telemetry.report_md import DEFAULT_TRAINED, EVAL_FILE, ReportData, render_markdown

__all__ = ["DEFAULT_TRAINED", "EVAL_FILE", "PLOTS_DIR", "REPORT_FILE", "CostBreakdown",
           "EvalFile", "PolicyResult", "SegmentResult", "forget_evaluations_from",
           "read_eval", "write_eval", "write_report"]

REPORT_FILE = "report.md"
PLOTS_DIR = "plots"
PLOT_FILES = {
    "learning_curve": "learning_curve.png",
    "cost_breakdown": "cost_breakdown.png",
    "segments": "segments.png",
    "diagnostics": "diagnostics.png",
    "stage_times": "stage_times.png",
}


class CostBreakdown(TypedDict, total=False):
    """Per SKU-day averages; the five costs (and ship, transfer: supply networks, present only
    when not 0) add up to avg_cost_per_sku_day."""

    holding: float
    penalty: float
    purchase: float
    order: float
    waste: float
    revenue: float
    ship: float
    transfer: float
    expired_purchase: float  # purchase cost of expired units, inside purchase (not a sixth cost)


class SegmentResult(TypedDict):
    """A SKU segment (fast/slow movers, perishables, promoted, substitutable, ...)."""

    skus: int
    avg_cost_per_sku_day: float
    avg_inventory_cost_per_sku_day: NotRequired[float]  # costs a policy controls (collect/evaluate.py)
    avg_profit_per_sku_day: NotRequired[float]


class PolicyResult(TypedDict):
    """One policy's evaluation. Units (lost, waste, on-hand) are as the evaluator reports
    them (per SKU-day averages by convention); fill_rate is sold / demanded in [0, 1]."""

    avg_cost_per_sku_day: float
    avg_profit_per_sku_day: NotRequired[float]
    avg_inventory_cost_per_sku_day: NotRequired[float]  # costs a policy controls (collect/evaluate.py)
    fill_rate: NotRequired[float]
    lost_units: NotRequired[float]  # 0 under sim.backorders: the unmet units are owed
    backordered_units: NotRequired[float]
    waste_units: NotRequired[float]
    mean_on_hand: NotRequired[float]
    breakdown: NotRequired[CostBreakdown]
    segments: NotRequired[dict[str, SegmentResult]]
    params: NotRequired[dict[str, Any]]  # tuned parameters (e.g. base-stock levels)


class EvalFile(TypedDict):
    iteration: int
    trained: NotRequired[str]
    policies: dict[str, PolicyResult]
    history: list[dict[str, float]]


def write_eval(
    run_dir: str | Path,
    iteration: int,
    results: Mapping[str, Mapping[str, Any]],
    *,
    trained: str | None = None,
    history: bool = True,
) -> Path:
    """Write run_dir/eval.json with the results of the evaluation at `iteration`.

    `results` maps policy name -> PolicyResult. The cost of each policy is appended to
    the history; history entries at or past `iteration` are replaced (a resumed run
    re-evaluates them). history=False leaves the history as it is (the run's final
    result is a policy picked from earlier evaluations, train.keep_best). Written
    atomically (never a half-written file).
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    policies = {}
    for name, result in results.items():
        cost = result.get("avg_cost_per_sku_day")
        if not isinstance(cost, int | float | np.number) or isinstance(cost, bool):
            raise ValueError(f"eval result {name!r}: avg_cost_per_sku_day must be a number")
        policies[str(name)] = json_ready(result, f"eval result {name}")
    previous, _ = read_eval(run_dir)
    entries = list(previous.get("history", [])) if previous else []
    if history:
        entry: dict[str, Any] = {"iteration": int(iteration)}
        entry.update({name: r["avg_cost_per_sku_day"] for name, r in policies.items()})
        entries = [*[h for h in entries if h["iteration"] < iteration], entry]
    data: dict[str, Any] = {"iteration": int(iteration)}
    if trained is not None:
        data["trained"] = trained
    data["policies"] = policies
    data["history"] = entries
    path = run_dir / EVAL_FILE
    atomic.write_text(path, json.dumps(data, indent=1, allow_nan=False) + "\n")
    return path


def forget_evaluations_from(run_dir: str | Path, start: int) -> None:
    """A run (re)starting at iteration `start` redoes its evaluations from there on: drop
    them from eval.json's history. On a fresh start (0) the whole file goes: it was left
    by an attempt that crashed before its first checkpoint. An unreadable file is left to
    write_eval (which replaces it)."""
    path = Path(run_dir) / EVAL_FILE
    if start == 0:
        path.unlink(missing_ok=True)
        return
    data, _ = read_eval(run_dir)
    if data is None:
        return
    kept = [h for h in data["history"] if h["iteration"] < start]
    if len(kept) < len(data["history"]):
        atomic.write_text(path, json.dumps({**data, "history": kept}, indent=1, allow_nan=False) + "\n")


def read_eval(run_dir: str | Path) -> tuple[EvalFile | None, str | None]:
    """(eval file, None); (None, None) when absent; (None, reason) when unreadable."""
    path = Path(run_dir) / EVAL_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as exc:
        return None, f"{EVAL_FILE} could not be read ({exc})"
    if not isinstance(data, dict) or not isinstance(data.get("policies"), dict):
        return None, f"{EVAL_FILE} has no 'policies' object"
    policies = {n: p for n, p in data["policies"].items() if isinstance(p, dict)}
    history = [h for h in data.get("history") or []
               if isinstance(h, dict) and isinstance(h.get("iteration"), int)]
    out: dict[str, Any] = {"iteration": data.get("iteration"), "policies": policies,
                           "history": history}
    if isinstance(data.get("trained"), str):
        out["trained"] = data["trained"]
    return out, None  # type: ignore[return-value]


def write_report(run_dir: str | Path) -> Path:
    """Write run_dir/report.md and its plots from metrics.jsonl and eval.json; returns the
    report's path. Raises UserError only if run_dir is not a directory."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(f"run dir {run_dir}: not a directory; expected a run directory "
                        f"holding {METRICS_FILE} and/or {EVAL_FILE}")
    records = _by_iteration(read_metrics(run_dir / METRICS_FILE))
    evaluation, eval_error = read_eval(run_dir)
    data = ReportData.build(records, evaluation, eval_error)
    plots = _draw_plots(run_dir / PLOTS_DIR, data)
    path = run_dir / REPORT_FILE
    atomic.write_text(path, render_markdown(data, {k: f"{PLOTS_DIR}/{p.name}"
                                               for k, p in plots.items()}))
    return path


def _by_iteration(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per iteration (the last written wins), sorted by iteration."""
    return sorted({r["iteration"]: r for r in records}.values(), key=lambda r: r["iteration"])


def _draw_plots(plot_dir: Path, data: ReportData) -> dict[str, Path]:
    """Draw every plot the data allows; delete stale PNGs of plots not drawn this time."""
    made = {
        "learning_curve": plot_learning_curve(
            plot_dir / PLOT_FILES["learning_curve"], data.trained, data.learning_curve,
            data.baseline_costs),
        "cost_breakdown": plot_cost_breakdown(
            plot_dir / PLOT_FILES["cost_breakdown"], data.breakdowns),
        "segments": plot_segments(
            plot_dir / PLOT_FILES["segments"], data.segment_rows, data.trained or "trained"),
        "diagnostics": plot_diagnostics(plot_dir / PLOT_FILES["diagnostics"], data.records),
        "stage_times": plot_stage_times(plot_dir / PLOT_FILES["stage_times"], data.records),
    }
    for key, name in PLOT_FILES.items():
        if made[key] is None:
            (plot_dir / name).unlink(missing_ok=True)
    return {k: p for k, p in made.items() if p is not None}


def main(argv: list[str] | None = None) -> int:
    """`python -m skurl.telemetry.report RUN_DIR`: (re)write a run's report."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m skurl.telemetry.report")
    parser.add_argument("run_dir")
    args = parser.parse_args(argv)
    try:
        print(write_report(args.run_dir))
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
