"""Run report from synthetic metrics.jsonl / eval.json, and the eval.json writer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from skurl.errors import UserError
from skurl.telemetry.logger import RunLogger
from skurl.telemetry.report import main, read_eval, write_eval, write_report

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
ALL_PLOTS = ("learning_curve", "cost_breakdown", "segments", "diagnostics", "stage_times")
SEGMENTS = {"fast movers": 1.5, "slow movers": 0.5, "perishables": 1.2}


def _policy(cost: float, segment_factor: float = 1.0) -> dict[str, Any]:
    return {
        "avg_cost_per_sku_day": cost, "avg_profit_per_sku_day": 10.0 - cost,
        "avg_inventory_cost_per_sku_day": cost / 2, "fill_rate": 0.95, "lost_units": 0.25, "waste_units": 0.125, "mean_on_hand": 6.5,
        "breakdown": {"holding": cost * 0.4, "penalty": cost * 0.3, "purchase": cost * 0.2,
                      "order": cost * 0.05, "waste": cost * 0.05, "revenue": 10.0},
        "segments": {name: _segment(100 * (k + 1), cost * f * (segment_factor if name == "perishables" else 1.0))
                     for k, (name, f) in enumerate(SEGMENTS.items())},
        "params": {"level": 3},
    }


def _segment(skus: int, cost: float) -> dict[str, Any]:
    return {"skus": skus, "avg_cost_per_sku_day": cost, "avg_inventory_cost_per_sku_day": cost / 4,
            "avg_profit_per_sku_day": 10.0 - cost}


def _write_metrics(run_dir: Path, iterations: int = 8, sample_skus: int = 0) -> None:
    with RunLogger(run_dir, tensorboard=False) as log:
        for it in range(iterations):
            scalars = {"reward_mean": -5.0 + it, "reward_p5": -7.0 + it, "reward_p95": -4.0 + it,
                       "policy_loss": 0.1 / (it + 1), "value_loss": 1.0 / (it + 1),
                       "entropy": 2.0 - 0.1 * it, "approx_kl": 0.01, "explained_variance": 0.1 * it,
                       "transitions_per_s": 5e4, "time_simulate": 2.0, "time_infer": 1.0,
                       "time_learn": 3.0, "time_sync": 0.5}
            if sample_skus:
                scalars["sample_skus"] = sample_skus
            log.log(it, scalars)


def _assert_png(path: Path) -> None:
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        assert image.size[0] >= 400 and image.size[1] >= 300


def _plots(run_dir: Path) -> set[str]:
    return {p.stem for p in (run_dir / "plots").glob("*.png")}


@pytest.fixture
def full_run(tmp_path: Path) -> Path:
    _write_metrics(tmp_path, sample_skus=2000)
    for it, cost in ((3, 5.0), (7, 3.0)):
        write_eval(tmp_path, it, {"ppo": _policy(cost, segment_factor=0.5),
                                  "base_stock": _policy(4.0), "s_S": _policy(4.5)})
    return tmp_path


def test_full_report(full_run: Path) -> None:
    path = write_report(full_run)
    assert path == full_run / "report.md"
    md = path.read_text()
    for name in ("ppo", "base_stock", "s_S", *SEGMENTS):
        assert name in md
    assert "| **ppo** (trained) | 3 | -25.0% | 1.5 | -25.0% | 7 | 95.0% |" in md
    assert "| base_stock (best baseline) | 4 | +0.0% | 2 | +0.0% | 6 |" in md
    assert "is 25.0% cheaper per SKU-day" in md and "Its profit per SKU-day is 7 against 6 (16.7% more)." in md
    assert "with the purchase of expired units) is 25.0% lower." in md
    # segments: ppo 3*f (perishables halved) vs base_stock 4*f; inventory cost a quarter
    assert "| fast movers | 100 | 4.5 | base_stock | 6 | -25.0% | 1.125 | 1.5 | -25.0% | 5.5 | 4 |" in md
    assert "| perishables | 300 | 1.8 | base_stock | 4.8 | -62.5% | 0.45 | 1.2 | -62.5% | 8.2 | 5.2 |" in md
    assert "Trained on a sample of 2,000 SKUs per iteration." in md
    assert "| simulate | 16 | 2 | 30.8% |" in md
    assert _plots(full_run) == set(ALL_PLOTS)
    for name in ALL_PLOTS:
        assert f"](plots/{name}.png)" in md
        _assert_png(full_run / "plots" / f"{name}.png")


def test_missing_eval_says_so_and_drops_stale_plots(full_run: Path) -> None:
    write_report(full_run)
    (full_run / "eval.json").unlink()
    md = write_report(full_run).read_text()
    assert "No evaluation yet" in md and "_No evaluation results yet._" in md
    assert "## Results by SKU segment\n\n_Not available" in md
    assert _plots(full_run) == {"diagnostics", "stage_times"}  # stale PNGs removed
    assert "segments.png" not in md


def test_empty_run_dir(tmp_path: Path) -> None:
    md = write_report(tmp_path).read_text()
    assert "No training metrics yet" in md and "No evaluation yet" in md
    assert _plots(tmp_path) == set()


def test_corrupt_eval_and_torn_metrics(tmp_path: Path) -> None:
    _write_metrics(tmp_path, iterations=3)
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"iteration": 3, "rew')  # a crash mid-line
    (tmp_path / "eval.json").write_text("{not json")
    md = write_report(tmp_path).read_text()
    assert "eval.json could not be read" in md
    assert "3 iterations (0..2)" in md


def test_eval_without_trained_policy_or_segments(tmp_path: Path) -> None:
    bare = {"avg_cost_per_sku_day": 2.0, "fill_rate": None}
    write_eval(tmp_path, 0, {"base_stock": bare, "s_S": {"avg_cost_per_sku_day": 2.5}})
    md = write_report(tmp_path).read_text()
    assert "names no trained policy" in md and "No per-segment results" in md
    assert "No cost breakdown for: base_stock, s_S." in md
    assert "| base_stock (best baseline) | 2 | +0.0% | n/a | n/a |" in md
    assert _plots(tmp_path) == {"learning_curve"}


def test_learning_curve_from_metrics_alone(tmp_path: Path) -> None:
    with RunLogger(tmp_path, tensorboard=False) as log:
        log.log(0, {"eval_cost": 5.0, "baseline_cost": 4.0})
        log.log(1, {"reward_mean": 1.0})
        log.log(2, {"eval_cost": 3.5, "baseline_cost": 4.0})
    md = write_report(tmp_path).read_text()
    assert "](plots/learning_curve.png)" in md
    _assert_png(tmp_path / "plots" / "learning_curve.png")


def test_named_trained_policy_and_stale_eval_note(tmp_path: Path) -> None:
    _write_metrics(tmp_path, iterations=6)
    write_eval(tmp_path, 2, {"net": _policy(3.0), "base_stock": _policy(4.0)}, trained="net")
    md = write_report(tmp_path).read_text()
    assert "| **net** (trained) |" in md
    assert "The evaluation is from iteration 2; training logged up to iteration 5." in md


def test_write_eval_history_and_resume(tmp_path: Path) -> None:
    for it, cost in ((5, 3.0), (10, 2.5), (15, 2.0)):
        write_eval(tmp_path, it, {"ppo": {"avg_cost_per_sku_day": np.float64(cost)},
                                  "base_stock": {"avg_cost_per_sku_day": 2.2}})
    write_eval(tmp_path, 10, {"ppo": {"avg_cost_per_sku_day": 2.4,
                                      "fill_rate": float("nan"),
                                      "params": {"levels": np.arange(2)}},
                              "base_stock": {"avg_cost_per_sku_day": 2.2}})
    data = json.loads((tmp_path / "eval.json").read_text())
    assert data["iteration"] == 10
    assert data["history"] == [{"iteration": 5, "ppo": 3.0, "base_stock": 2.2},
                               {"iteration": 10, "ppo": 2.4, "base_stock": 2.2}]
    assert data["policies"]["ppo"]["fill_rate"] is None
    assert data["policies"]["ppo"]["params"] == {"levels": [0, 1]}
    evaluation, error = read_eval(tmp_path)
    assert error is None and evaluation is not None and set(evaluation["policies"]) == {
        "ppo", "base_stock"}


def test_write_eval_rejects_missing_cost(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"'ppo'.*avg_cost_per_sku_day"):
        write_eval(tmp_path, 0, {"ppo": {"fill_rate": 0.9}})
    assert not (tmp_path / "eval.json").exists()


def test_not_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UserError, match="not a directory"):
        write_report(tmp_path / "nope")
    assert main([str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err.startswith("error: run dir")


def test_best_baseline_follows_the_runs_objective(tmp_path: Path) -> None:
    # Under sim.reward=profit the best baseline is the most profitable one, even when
    # another costs less (it buys less and sells less): as the evaluator picks it.
    def profit_run(cost: float, profit: float) -> dict[str, Any]:
        return {**_policy(cost), "objective": "profit", "avg_profit_per_sku_day": profit}

    _write_metrics(tmp_path, iterations=2)
    write_eval(tmp_path, 1, {"ppo": profit_run(3.0, 8.0), "cheap": profit_run(2.0, 5.0),
                             "rich": profit_run(4.0, 7.0)})
    md = write_report(tmp_path).read_text()
    assert "| rich (best baseline) |" in md and "| cheap |" in md
    write_eval(tmp_path, 1, {"ppo": _policy(3.0), "cheap": _policy(2.0), "rich": _policy(4.0)})
    assert "| cheap (best baseline) |" in write_report(tmp_path).read_text()  # cost: the cheapest


def test_each_segments_best_baseline_follows_the_runs_objective_too(tmp_path: Path) -> None:
    # Issue 42, defect 16: in a profit run the segment table named the cheapest baseline
    # (it sells less) while the summary named the most profitable one.
    def run(cost: float, profit: float, objective: str | None = "profit") -> dict[str, Any]:
        seg = {"skus": 10, "avg_cost_per_sku_day": cost, "avg_inventory_cost_per_sku_day": cost / 4,
               "avg_profit_per_sku_day": profit}
        out = {**_policy(cost), "avg_profit_per_sku_day": profit, "segments": {"whole": seg}}
        return {**out, "objective": objective} if objective else out

    _write_metrics(tmp_path, iterations=2)
    write_eval(tmp_path, 1, {"ppo": run(3.0, 8.0), "cheap": run(2.0, 5.0), "rich": run(4.0, 7.0)})
    md = write_report(tmp_path).read_text()
    row = next(line for line in md.splitlines() if line.startswith("| whole |"))
    assert "| rich |" in row and "cheap" not in row
    assert "| rich (best baseline) |" in md  # the summary agrees
    write_eval(tmp_path, 1, {"ppo": run(3.0, 8.0, None), "cheap": run(2.0, 5.0, None),
                             "rich": run(4.0, 7.0, None)})
    row = next(line for line in write_report(tmp_path).read_text().splitlines()
               if line.startswith("| whole |"))
    assert "| cheap |" in row  # a cost run: the cheapest
