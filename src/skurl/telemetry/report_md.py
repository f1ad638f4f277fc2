"""The data behind the run report (ReportData) and its Markdown rendering."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from skurl.telemetry.logger import METRICS_FILE
from skurl.telemetry.plots import COST_PARTS, DIAGNOSTIC_KEYS, SegmentRow, stage_names

EVAL_FILE = "eval.json"
DEFAULT_TRAINED = "ppo"  # the trained policy's name when eval.json does not say
_TRAINING_KEYS = ("reward_mean", "reward_p5", "reward_p50", "reward_p95", *DIAGNOSTIC_KEYS,
                  "transitions_per_s",
                  # train.algo=dcl's iterations (train/dcl_step.py)
                  "dcl_label_changed", "dcl_q_gap", "dcl_fit_accuracy", "dcl_fit_entropy", "dcl_horizon",
                  "rollout_sku_days_per_s", "rollout_row_days_per_s")


def _num(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def fmt(value: object, digits: int = 4) -> str:
    v = _num(value)
    if v is None or v != v:
        return "n/a"
    if abs(v) >= 10 ** digits:  # large counts read better grouped than in e-notation
        return f"{v:,.0f}"
    return f"{v:.{digits}g}"


def fmt_pct(value: float | None, signed: bool = True) -> str:
    if value is None:
        return "n/a"
    return f"{value:+.1f}%" if signed else f"{value:.1f}%"


def _cost(result: Mapping[str, Any] | None) -> float | None:
    return _num((result or {}).get("avg_cost_per_sku_day"))


def _inventory(result: Mapping[str, Any] | None) -> float | None:
    """Holding, penalty, ordering and waste incl. the expired units' purchase (collect/
    evaluate.py); absent in older eval files."""
    return _num((result or {}).get("avg_inventory_cost_per_sku_day"))


def _profit(result: Mapping[str, Any]) -> float | None:
    profit = _num(result.get("avg_profit_per_sku_day"))
    revenue = _num((result.get("breakdown") or {}).get("revenue"))
    cost = _cost(result)
    if profit is None and revenue is not None and cost is not None:
        profit = revenue - cost
    return profit


def _vs(cost: float | None, reference: float | None) -> float | None:
    if cost is None or not reference:
        return None
    return 100.0 * (cost / reference - 1.0)


@dataclass
class ReportData:
    records: list[dict[str, Any]]
    evaluation: Mapping[str, Any] | None
    eval_error: str | None
    trained: str | None = None
    policies: dict[str, dict[str, Any]] = field(default_factory=dict)
    baselines: list[str] = field(default_factory=list)  # best first (_rank)
    baseline_costs: dict[str, float] = field(default_factory=dict)
    learning_curve: list[tuple[int, float]] = field(default_factory=list)
    breakdowns: dict[str, dict[str, Any]] = field(default_factory=dict)
    segment_rows: list[SegmentRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def best_baseline(self) -> str | None:
        return self.baselines[0] if self.baselines else None

    @classmethod
    def build(cls, records: list[dict[str, Any]], evaluation: Mapping[str, Any] | None,
              eval_error: str | None) -> ReportData:
        data = cls(records=records, evaluation=evaluation, eval_error=eval_error)
        if evaluation is not None:
            data._take_eval(evaluation)
        data._take_metrics()
        data._add_notes()
        return data

    def _take_eval(self, evaluation: Mapping[str, Any]) -> None:
        self.policies = dict(evaluation["policies"])
        named = evaluation.get("trained")
        if named in self.policies:
            self.trained = named
        elif DEFAULT_TRAINED in self.policies:
            self.trained = DEFAULT_TRAINED
        others = [n for n in self.policies if n != self.trained and _cost(self.policies[n])
                  is not None]
        self.baselines = sorted(others, key=self._rank)
        self.baseline_costs = {n: _cost(self.policies[n]) or 0.0 for n in self.baselines}
        if self.trained is not None:
            self.learning_curve = [(h["iteration"], float(h[self.trained]))
                                   for h in evaluation.get("history", [])
                                   if _num(h.get(self.trained)) is not None]
        self.breakdowns = {n: dict(p["breakdown"]) for n, p in self.policies.items()
                           if isinstance(p.get("breakdown"), dict)}
        self.segment_rows = self._segments()

    def _rank(self, name: str) -> float:
        """Lower ranks first: by cost, or by profit when the run optimizes profit (as the
        evaluator picks the run's baseline, train/evaluation.py)."""
        p = self.policies[name]
        if (self.policies.get(self.trained or "") or p).get("objective") == "profit":
            return -(_profit(p) or 0.0)
        return _cost(p) or 0.0

    def _seg_rank(self, stats: Mapping[str, Any], cost: float) -> float:
        """Lower ranks first within one segment, by the objective _rank uses."""
        profit = _num(stats.get("avg_profit_per_sku_day"))
        if profit is not None and self._objective() == "profit":
            return -profit
        return cost

    def _objective(self) -> str | None:
        mine = self.policies.get(self.trained or "") or {}
        first = self.policies.get(self.baselines[0]) if self.baselines else None
        return mine.get("objective") or (first or {}).get("objective")

    def _segments(self) -> list[SegmentRow]:
        def segs(name: str | None) -> dict[str, Any]:
            s = self.policies.get(name, {}).get("segments") if name else None
            return s if isinstance(s, dict) else {}

        names = list(segs(self.trained))
        for b in self.baselines:
            names += [s for s in segs(b) if s not in names]
        rows = []
        for seg in names:
            mine = segs(self.trained).get(seg) or {}
            costs = {b: c for b in self.baselines if (c := _cost(segs(b).get(seg))) is not None}
            # Each segment's best by the run's objective, as the summary's (_rank): by cost
            # alone a baseline that sells less would win a profit run's segments.
            best = min(costs, key=lambda b: self._seg_rank(segs(b).get(seg) or {}, costs[b])) if costs else None
            skus = _num(mine.get("skus", (segs(best).get(seg) or {}).get("skus") if best else None))
            theirs = segs(best).get(seg) if best else None
            rows.append(SegmentRow(seg, int(skus) if skus is not None else None,
                                   _cost(mine), best, costs.get(best) if best else None,
                                   _inventory(mine), _inventory(theirs),
                                   _num(mine.get("avg_profit_per_sku_day")),
                                   _num((theirs or {}).get("avg_profit_per_sku_day"))))
        return rows

    def _take_metrics(self) -> None:
        if not self.learning_curve:  # no eval history: the loop's own eval_cost log
            self.learning_curve = [(r["iteration"], float(r["eval_cost"])) for r in self.records
                                   if _num(r.get("eval_cost")) is not None]
        if not self.baseline_costs:
            last = [r["baseline_cost"] for r in self.records
                    if _num(r.get("baseline_cost")) is not None]
            if last:
                self.baseline_costs = {"baseline": float(last[-1])}

    def _add_notes(self) -> None:
        notes = self.notes
        if not self.records:
            notes.append(f"No training metrics yet ({METRICS_FILE} missing or empty): "
                         "training diagnostics and stage times are not shown.")
        samples = [r["sample_skus"] for r in self.records if _num(r.get("sample_skus"))]
        if samples:
            notes.append(f"Trained on a sample of {int(samples[-1]):,} SKUs per iteration.")
        if self.eval_error:
            notes.append(f"Evaluation results could not be used: {self.eval_error}.")
        elif self.evaluation is None:
            notes.append(f"No evaluation yet ({EVAL_FILE} not found): the summary, cost "
                         "breakdown and segment results appear after the first evaluation.")
        else:
            self._eval_notes()

    def _eval_notes(self) -> None:
        notes = self.notes
        if self.trained is None:
            notes.append(f"{EVAL_FILE} names no trained policy (expected 'trained' or a "
                         f"policy named '{DEFAULT_TRAINED}'): all policies are shown as "
                         "baselines.")
        if not self.segment_rows:
            notes.append(f"No per-segment results in {EVAL_FILE}.")
        shipped = (self.policies.get(self.trained or "") or {}).get("params") or {}
        if shipped.get("selected") == "best":
            notes.append(f"The trained policy's results are those of the policy train.keep_best kept: the "
                         f"best validation score (seed {shipped.get('validation_seed')}) among the "
                         f"evaluated ones, after iteration {shipped.get('iteration')}; the learning curve "
                         f"shows every evaluation.")
        missing = [n for n in self.policies if n not in self.breakdowns]
        if missing:
            notes.append("No cost breakdown for: " + ", ".join(missing) + ".")
        it = self.evaluation.get("iteration") if self.evaluation else None
        if self.records and isinstance(it, int) and it < self.records[-1]["iteration"]:
            notes.append(f"The evaluation is from iteration {it}; training logged up to "
                         f"iteration {self.records[-1]['iteration']}.")


def render_markdown(data: ReportData, plots: Mapping[str, str]) -> str:
    """The report's Markdown; `plots` maps plot key -> relative PNG path (drawn ones only)."""
    out = ["# skurl run report", "", _source_line(data), ""]
    out += _summary(data)
    out += _section("Learning curve", [], plots.get("learning_curve"),
                    "no evaluated costs yet")
    out += _section("Cost breakdown (per SKU-day)", _breakdown_table(data),
                    plots.get("cost_breakdown"), "no cost breakdown in the evaluation")
    out += _section("Results by SKU segment", _segment_table(data), plots.get("segments"),
                    "no per-segment results")
    out += _new_skus_section(data)
    out += _section("Training diagnostics", _training_table(data), plots.get("diagnostics"),
                    "no training metrics")
    out += _section("Time by stage", _stage_table(data), plots.get("stage_times"),
                    "no stage timings in the metrics")
    out += ["## Notes", ""]
    out += [f"- {n}" for n in data.notes] or ["- none"]
    return "\n".join(out) + "\n"


def _source_line(data: ReportData) -> str:
    parts = []
    if data.records:
        its = [r["iteration"] for r in data.records]
        parts.append(f"{METRICS_FILE}: {len(its)} iterations ({its[0]}..{its[-1]})")
    else:
        parts.append(f"{METRICS_FILE}: none")
    if data.evaluation is not None:
        parts.append(f"{EVAL_FILE}: evaluation at iteration {data.evaluation.get('iteration')}")
    else:
        parts.append(f"{EVAL_FILE}: none")
    return "Sources: " + "; ".join(parts) + "."


def _section(title: str, body: list[str], plot: str | None, missing: str) -> list[str]:
    lines = [f"## {title}", ""]
    if not body and plot is None:
        return [*lines, f"_Not available: {missing}._", ""]
    lines += body
    if plot is not None:
        lines += [f"![{title}]({plot})", ""]
    return lines


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return [*lines, ""]


def _ordered_policies(data: ReportData) -> list[str]:
    first = [data.trained] if data.trained else []
    rest = [n for n in data.policies if n not in data.baselines and n != data.trained]
    return first + data.baselines + rest


def _label(data: ReportData, name: str) -> str:
    if name == data.trained:
        return f"**{name}** (trained)"
    return f"{name} (best baseline)" if name == data.best_baseline else name


def _summary(data: ReportData) -> list[str]:
    lines = ["## Summary", ""]
    if not data.policies:
        return [*lines, "_No evaluation results yet._", ""]
    best_result = data.policies.get(data.best_baseline) if data.best_baseline else None
    best = _cost(best_result)
    # Under sim.backorders nothing is lost (lost_units 0): the unmet units are owed.
    owed = any((_num(p.get("backordered_units")) or 0) > 0 for p in data.policies.values())
    unmet, unmet_label = ("backordered_units", "Backordered units") if owed else ("lost_units", "Lost units")
    rows = []
    for name in _ordered_policies(data):
        p = data.policies[name]
        fill = _num(p.get("fill_rate"))
        rows.append([_label(data, name), fmt(_cost(p)), fmt_pct(_vs(_cost(p), best)),
                     fmt(_inventory(p)), fmt_pct(_vs(_inventory(p), _inventory(best_result))),
                     fmt(_profit(p)), fmt_pct(100 * fill if fill is not None else None, False),
                     fmt(p.get(unmet)), fmt(p.get("waste_units")),
                     fmt(p.get("mean_on_hand"))])
    lines += _table(["Policy", "Cost/SKU-day", "vs best baseline", "Inventory cost/SKU-day",
                     "vs best baseline", "Profit/SKU-day", "Fill rate", unmet_label,
                     "Waste units", "Mean on-hand"], rows)
    if data.trained and data.best_baseline and best is not None:
        change = _vs(_cost(data.policies[data.trained]), best)
        word = "cheaper" if (change or 0) <= 0 else "costlier"
        sentence = (f"The trained policy **{data.trained}** is {fmt_pct(abs(change or 0), False)} "
                    f"{word} per SKU-day than the best tuned baseline, **{data.best_baseline}**.")
        # Cost includes purchases: a policy that sells less also buys less, so with prices
        # in the catalog the profit comparison says more (and may point the other way).
        mine, theirs = _profit(data.policies[data.trained]), _profit(data.policies[data.best_baseline])
        if mine is not None and theirs:
            delta = 100.0 * (mine - theirs) / abs(theirs)
            sentence += (f" Its profit per SKU-day is {fmt(mine)} against {fmt(theirs)} "
                         f"({fmt_pct(abs(delta), False)} {'more' if delta >= 0 else 'less'}).")
        inv = _vs(_inventory(data.policies[data.trained]), _inventory(best_result))
        if inv is not None:
            sentence += (f" Its inventory cost (holding, lost sales, ordering and waste, "
                         f"with the purchase of expired units) is "
                         f"{fmt_pct(abs(inv), False)} {'lower' if inv <= 0 else 'higher'}.")
        lines += [sentence, ""]
    return lines


def _breakdown_table(data: ReportData) -> list[str]:
    names = [n for n in _ordered_policies(data) if n in data.breakdowns]
    if not names:
        return []
    rows = []
    for name in names:
        b = data.breakdowns[name]
        rows.append([_label(data, name), *[fmt(b.get(part)) for part in COST_PARTS],
                     fmt(_cost(data.policies[name])), fmt(b.get("revenue")),
                     fmt(_profit(data.policies[name]))])
    return _table(["Policy", *COST_PARTS, "total cost", "revenue", "profit"], rows)


def _segment_table(data: ReportData) -> list[str]:
    if not data.segment_rows:
        return []
    mine = data.trained or "trained"
    header = ["Segment", "SKUs", f"{mine} cost", "Best baseline", "Baseline cost", "Difference"]
    rows = [[r.segment, fmt(r.skus), fmt(r.trained_cost), r.best_baseline or "n/a",
             fmt(r.baseline_cost), fmt_pct(r.diff_pct)] for r in data.segment_rows]
    if any(r.trained_inventory is not None for r in data.segment_rows):
        header += [f"{mine} inventory cost", "Baseline inventory cost", "Difference",
                   f"{mine} profit", "Baseline profit"]
        for row, r in zip(rows, data.segment_rows, strict=True):
            row += [fmt(r.trained_inventory), fmt(r.baseline_inventory),
                    fmt_pct(_vs(r.trained_inventory, r.baseline_inventory)),
                    fmt(r.trained_profit), fmt(r.baseline_profit)]
    return _table(header, rows)


def _training_table(data: ReportData) -> list[str]:
    if not data.records:
        return []
    last = data.records[-1]
    rows = [[key, fmt(last.get(key))] for key in _TRAINING_KEYS if key in last]
    if not rows:
        return []
    return [f"Last logged iteration ({last['iteration']}):", "",
            *_table(["Metric", "Value"], rows)]


def _stage_table(data: ReportData) -> list[str]:
    stages = stage_names(data.records)
    if not stages:
        return []
    totals, means = {}, {}
    for s in stages:
        vals = [v for r in data.records if (v := _num(r.get(f"time_{s}"))) is not None]
        totals[s], means[s] = sum(vals), sum(vals) / len(vals)
    grand = sum(totals.values())
    rows = [[s, fmt(totals[s]), fmt(means[s]),
             fmt_pct(100 * totals[s] / grand if grand else None, False)] for s in stages]
    return _table(["Stage", "Total seconds", "Mean seconds/iteration", "Share"], rows)


def _new_skus_section(data: ReportData) -> list[str]:
    """SKUs added mid-training (`skurl train --resume RUN --catalog NEW`): their cost and
    the tuned baseline's on them, from their first iteration on. Absent for other runs."""
    rows = [r for r in data.records if "new_skus" in r]
    if not rows:
        return []
    table = [[str(r["iteration"]), fmt(r.get("new_skus")), fmt(r.get("new_skus_reward_mean")),
              fmt(r.get("new_skus_eval_cost")), fmt(r.get("new_skus_baseline_cost")),
              fmt_pct(_vs(_num(r.get("new_skus_eval_cost")), _num(r.get("new_skus_baseline_cost"))))]
             for r in rows]
    intro = (f"SKUs added to the catalog from iteration {rows[0]['iteration']} on (the network, its "
             "observation statistics and the kept SKUs' state carried over; new SKUs' reward statistics "
             "started from their category's). Cost per SKU-day on the evaluation seeds:")
    return ["## New SKUs", "", intro, "",
            *_table(["Iteration", "New SKUs", "Training reward/SKU-day", "Cost/SKU-day",
                     "Baseline cost/SKU-day", "vs baseline"], table)]
