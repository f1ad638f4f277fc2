"""Acceptance of the A/B rehearsal (issue 23): B = a trained policy, A = the tuned baseline,
on a small synthetic catalog (the embedded defaults' generator). The stratified bootstrap
interval of `skurl ab report` must contain the difference `skurl eval` measures on the same
SKUs, seeds and days (each policy on every SKU), for every KPI it gives; the CUPED interval
from the rehearsal's pre-period is much narrower."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from skurl.cli import main

pytestmark = pytest.mark.slow
CATALOG = ["catalog.skus=400", "sim.days=20", "policy.hidden=[16,16]", "ppo.epochs=2", "ppo.minibatch=256",
           "train.eval_every=2", "train.torch_threads=1", "eval.days=30", "eval.warmup=10", "eval.skus=0",
           "train.warm_start=none", "train.keep_best=false"]
DAYS = ["--days", "30", "--warmup", "10"]


def sets(items: list[str]) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


def last_json(capsys: pytest.CaptureFixture[str]) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_report_interval_contains_the_eval_difference(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    assert main(["train", "--run-dir", str(run), "--iterations", "2", "--no-baseline", *sets(CATALOG)]) == 0
    capsys.readouterr()
    catalog = tmp_path / "catalog.parquet"
    assert main(["catalog", "synth", "--skus", "400", "--out", str(catalog)]) == 0
    groups, outcomes = tmp_path / "groups.parquet", tmp_path / "outcomes.parquet"
    assert main(["ab", "assign", "--catalog", str(catalog), "--share", "0.5", "--strata", "category,velocity",
                 "--seed", "11", "--out", str(groups)]) == 0
    assert main(["ab", "simulate", "--groups", str(groups), "--policy-a", "forecast-base-stock",
                 "--run-b", str(run), *DAYS, "--out", str(outcomes)]) == 0
    capsys.readouterr()
    assert main(["ab", "report", "--groups", str(groups), "--outcomes", str(outcomes), "--json"]) == 0
    reports = last_json(capsys)
    report = reports["kpis"]
    assert main(["eval", "--run", str(run), "--skus", "0", *DAYS, "--json"]) == 0
    policy = last_json(capsys)
    assert main(["eval", "--config", str(run / "config.yaml"), "--policy", "forecast-base-stock", "--tune",
                 "--skus", "0", *DAYS, "--json"]) == 0
    baseline = last_json(capsys)
    measured = eval_differences(policy, baseline)
    cuped = reports["kpis_cuped"]
    print({k: {"eval": measured[k], "ab": report[k]["diff"], "ci": report[k]["ci"], "cuped": cuped[k]["ci"]}
           for k in measured})
    for kpi in measured:  # every KPI the report gives
        low, high = report[kpi]["ci"]
        assert low <= measured[kpi] <= high, (kpi, measured[kpi], report[kpi])
    # CUPED (the rehearsal's pre-period as covariate) is much narrower. Its coverage is a
    # property of many splits, not of this one: over 100 splits of this catalog and policy
    # pair its 95% intervals held eval's difference 89-98 times per KPI (plain: 91-99), see
    # docs/ab_acceptance.md (commands/ab_coverage.py); this split (seed 11) happens to miss it
    # for inventory cost (+0.069 vs [-0.26, +0.04]).
    for kpi in ("profit_per_sku_day", "inventory_cost_per_sku_day", "fill_rate"):
        assert np.diff(cuped[kpi]["ci"])[0] < 0.5 * np.diff(report[kpi]["ci"])[0], (cuped[kpi], report[kpi])
        assert report[kpi]["ci"][0] <= cuped[kpi]["diff"] <= report[kpi]["ci"][1]


def eval_differences(policy: dict, baseline: dict) -> dict[str, float]:
    """B - A of every KPI of `skurl ab report`, from the two `skurl eval --json` figures."""
    def per_sku_day(result: dict, total: str) -> float:
        return result[total] / (result["skus"] * result["days"] * len(result["seeds"]))

    return {
        "profit_per_sku_day": policy["avg_profit_per_sku_day"] - baseline["avg_profit_per_sku_day"],
        "inventory_cost_per_sku_day": (policy["avg_inventory_cost_per_sku_day"]
                                       - baseline["avg_inventory_cost_per_sku_day"]),
        "fill_rate": policy["fill_rate"] - baseline["fill_rate"],
        "lost_units_per_sku_day": per_sku_day(policy, "lost_units") - per_sku_day(baseline, "lost_units"),
        "waste_units_per_sku_day": per_sku_day(policy, "waste_units") - per_sku_day(baseline, "waste_units"),
    }
