"""PNG plots of the run report (matplotlib, Agg canvas; pyplot's global state is not used,
so plotting is safe in any thread and never opens a window).

Each function takes plain data, writes one PNG and returns its path, or None when there
is nothing to draw (the report then says what is missing).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

if TYPE_CHECKING:
    from typing import TypeGuard

COST_PARTS = ("holding", "penalty", "purchase", "order", "waste")
DIAGNOSTIC_KEYS = ("policy_loss", "value_loss", "entropy", "approx_kl", "explained_variance",
                   "clip_frac", "grad_norm")
STAGE_ORDER = ("simulate", "infer", "learn", "sync")
_DPI = 110
_BETTER, _WORSE = "#2e7d32", "#c62828"


@dataclass(frozen=True)
class SegmentRow:
    """One segment: trained cost vs the best baseline in that segment (per SKU-day)."""

    segment: str
    skus: int | None
    trained_cost: float | None
    best_baseline: str | None
    baseline_cost: float | None
    # Inventory cost (cost less cost of goods sold) and profit, where the evaluation has them.
    trained_inventory: float | None = None
    baseline_inventory: float | None = None
    trained_profit: float | None = None
    baseline_profit: float | None = None

    @property
    def diff_pct(self) -> float | None:
        if self.trained_cost is None or not self.baseline_cost:
            return None
        return 100.0 * (self.trained_cost / self.baseline_cost - 1.0)


def _figure(width: float = 8.0, height: float = 4.5) -> Figure:
    fig = Figure(figsize=(width, height), dpi=_DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


def _series(records: Sequence[Mapping[str, Any]], key: str) -> tuple[np.ndarray, np.ndarray]:
    """(iterations, values) of the records holding a numeric `key`."""
    pts = [(r["iteration"], float(r[key])) for r in records
           if isinstance(r.get(key), int | float) and not isinstance(r.get(key), bool)]
    if not pts:
        return np.zeros(0), np.zeros(0)
    its, vals = zip(*pts, strict=True)
    return np.asarray(its, dtype=float), np.asarray(vals, dtype=float)


def plot_learning_curve(
    path: Path,
    trained_name: str | None,
    trained_curve: Sequence[tuple[int, float]],
    baselines: Mapping[str, float],
) -> Path | None:
    """Evaluated cost/SKU-day of the trained policy per iteration, baselines as lines."""
    if not trained_curve and not baselines:
        return None
    fig = _figure()
    ax = fig.add_subplot()
    if trained_curve:
        its, costs = zip(*trained_curve, strict=True)
        ax.plot(its, costs, marker="o", lw=2, color="C0", label=trained_name or "trained",
                zorder=3)
    for k, (name, cost) in enumerate(sorted(baselines.items(), key=lambda kv: kv[1])):
        ax.axhline(cost, ls="--", lw=1.5, color=f"C{k + 1}", label=f"{name} ({cost:.4g})")
    ax.set_xlabel("training iteration")
    ax.set_ylabel("cost per SKU-day (evaluation)")
    ax.set_title("Learning curve: trained policy vs tuned baselines")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    return _save(fig, path)


def plot_cost_breakdown(path: Path, breakdowns: Mapping[str, Mapping[str, Any]]) -> Path | None:
    """Stacked bars per policy: holding, penalty, purchase, order, waste (per SKU-day)."""
    names = [n for n, b in breakdowns.items() if any(_is_num(b.get(p)) for p in COST_PARTS)]
    if not names:
        return None
    fig = _figure(max(6.0, 1.4 * len(names) + 3.0), 4.5)
    ax = fig.add_subplot()
    x = np.arange(len(names))
    bottom = np.zeros(len(names))
    for k, part in enumerate(COST_PARTS):
        vals = np.array([_num(breakdowns[n].get(part)) for n in names])
        ax.bar(x, vals, 0.6, bottom=bottom, label=part, color=f"C{k}")
        bottom += vals
    for xi, total in zip(x, bottom, strict=True):
        ax.annotate(f"{total:.4g}", (xi, total), ha="center", va="bottom", fontsize="small",
                    xytext=(0, 2), textcoords="offset points")
    ax.set_xticks(x, names, rotation=20 if len(names) > 4 else 0)
    ax.set_ylabel("cost per SKU-day")
    ax.set_title("Cost breakdown per policy (evaluation)")
    ax.margins(y=0.12)
    ax.grid(axis="y", alpha=0.3)
    _stack_legend(ax)
    return _save(fig, path)


def plot_segments(path: Path, rows: Sequence[SegmentRow], trained_name: str) -> Path | None:
    """Per segment: trained cost vs best baseline, with the % difference above."""
    rows = [r for r in rows if r.trained_cost is not None or r.baseline_cost is not None]
    if not rows:
        return None
    fig = _figure(max(7.0, 1.1 * len(rows) + 2.5), 4.8)
    ax = fig.add_subplot()
    x = np.arange(len(rows))
    trained = np.array([_num(r.trained_cost) for r in rows])
    base = np.array([_num(r.baseline_cost) for r in rows])
    ax.bar(x - 0.2, trained, 0.4, label=trained_name, color="C0")
    ax.bar(x + 0.2, base, 0.4, label="best baseline (per segment)", color="C7")
    for xi, row in zip(x, rows, strict=True):
        pct = row.diff_pct
        if pct is None:
            continue
        top = max(_num(row.trained_cost), _num(row.baseline_cost))
        ax.annotate(f"{pct:+.1f}%", (xi, top), ha="center", va="bottom", fontsize="small",
                    xytext=(0, 3), textcoords="offset points",
                    color=_BETTER if pct <= 0 else _WORSE, weight="bold")
    labels = [f"{r.segment}\n({r.skus} SKUs)" if r.skus is not None else r.segment
              for r in rows]
    ax.set_xticks(x, labels, rotation=20 if len(rows) > 5 else 0, fontsize="small")
    ax.set_ylabel("cost per SKU-day")
    ax.set_title("Per-segment cost: trained vs best baseline (negative % = cheaper)")
    ax.margins(y=0.15)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize="small")
    return _save(fig, path)


def plot_diagnostics(path: Path, records: Sequence[Mapping[str, Any]]) -> Path | None:
    """Reward (p5-p95 band) and PPO diagnostics per iteration, one panel per metric."""
    panels: list[tuple[str, tuple[np.ndarray, np.ndarray]]] = []
    for key in ("reward_mean", *DIAGNOSTIC_KEYS):
        its, vals = _series(records, key)
        if its.size:
            panels.append((key, (its, vals)))
    if not panels:
        return None
    ncols = min(3, len(panels))
    nrows = -(-len(panels) // ncols)
    fig = _figure(4.0 * ncols, 2.8 * nrows)
    for k, (key, (its, vals)) in enumerate(panels):
        ax = fig.add_subplot(nrows, ncols, k + 1)
        if key == "reward_mean":
            _reward_band(ax, records)
        ax.plot(its, vals, lw=1.5, color="C0", marker="." if its.size < 40 else None)
        ax.set_title(key, fontsize="medium")
        ax.set_xlabel("iteration", fontsize="small")
        ax.grid(alpha=0.3)
    fig.suptitle("Training diagnostics")
    return _save(fig, path)


def _reward_band(ax: Axes, records: Sequence[Mapping[str, Any]]) -> None:
    lo_its, lo = _series(records, "reward_p5")
    hi_its, hi = _series(records, "reward_p95")
    if lo.size and lo.size == hi.size and np.array_equal(lo_its, hi_its):
        ax.fill_between(lo_its, lo, hi, alpha=0.2, color="C0", label="p5-p95")
        ax.legend(fontsize="x-small")


def plot_stage_times(path: Path, records: Sequence[Mapping[str, Any]]) -> Path | None:
    """Seconds per stage per iteration (stacked), from the time_* keys of the log."""
    stages = stage_names(records)
    if not stages:
        return None
    its = np.array([r["iteration"] for r in records], dtype=float)
    data = np.array([[_num(r.get(f"time_{s}")) for r in records] for s in stages])
    keep = data.sum(axis=0) > 0
    its, data = its[keep], data[:, keep]
    if not its.size:
        return None
    fig = _figure()
    ax = fig.add_subplot()
    colors = [f"C{k}" for k in range(len(stages))]
    if its.size <= 60:
        bottom = np.zeros(its.size)
        for name, vals, color in zip(stages, data, colors, strict=True):
            ax.bar(its, vals, 0.8, bottom=bottom, label=name, color=color)
            bottom += vals
    else:
        ax.stackplot(its, data, labels=stages, colors=colors, alpha=0.85)
    ax.set_xlabel("training iteration")
    ax.set_ylabel("wall seconds")
    ax.set_title("Time per iteration by stage")
    ax.grid(axis="y", alpha=0.3)
    _stack_legend(ax)
    return _save(fig, path)


def _stack_legend(ax: Axes) -> None:
    """Legend outside the axes, top entry = top of the stack."""
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles[::-1], labels[::-1], loc="upper left", bbox_to_anchor=(1.01, 1.0),
              fontsize="small")


def stage_names(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """Stages logged as time_<stage>: the usual four first, then others by name."""
    found = {k[5:] for r in records for k, v in r.items()
             if k.startswith("time_") and _is_num(v)}
    return [s for s in STAGE_ORDER if s in found] + sorted(found - set(STAGE_ORDER))


def _is_num(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _num(value: object) -> float:
    """A plottable number: missing/null/non-finite -> 0 (only used for stacked bars)."""
    if not _is_num(value):
        return 0.0
    f = float(value)
    return f if np.isfinite(f) else 0.0
