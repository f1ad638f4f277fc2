"""`skurl eval` end to end on small catalogs: JSON output, tuning, the table, bad input."""

from __future__ import annotations

import json

import pytest

from skurl.cli import main

UNIFORM = ["--set", "catalog.kind=uniform", "--set", "sim.reward=cost", "--set", "catalog.lead_time=1"]


def run_json(capsys, argv: list[str]) -> dict:
    assert main(["eval", *argv, "--json"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1  # one JSON object, progress goes to stderr
    return json.loads(out[0])


def test_eval_json_untuned_base_stock(capsys):
    data = run_json(capsys, [*UNIFORM, "--policy", "base-stock", "--skus", "200", "--days", "60",
                             "--warmup", "10"])
    assert data["policy"] == "base-stock" and data["skus"] == 200 and data["days"] == 60
    assert data["seeds"] == [10_000] and data["tuning"] is None
    assert data["params"]["S"] == 15.0  # newsvendor level: 10 + z(0.9) sqrt(10), rounded up
    assert 3.0 < data["avg_cost_per_sku_day"] < 10.0
    assert 0.8 < data["fill_rate"] <= 1.0
    parts = data["breakdown"]
    assert parts["holding"] + parts["penalty"] == pytest.approx(data["avg_cost_per_sku_day"])


def test_eval_json_tuned_on_other_seeds(capsys):
    data = run_json(capsys, [*UNIFORM, "--policy", "constant", "--tune", "--skus", "100", "--days", "40",
                             "--warmup", "10", "--seed", "5"])
    tuning = data["tuning"]
    assert tuning["method"] == "uniform-exhaustive" and tuning["seed"] != 5
    assert tuning["params"]["c"] == data["params"]["c"]
    assert 2.5 <= data["params"]["c"] <= 5.0


def test_eval_heterogeneous_catalog_per_sku_tuning(capsys):
    data = run_json(capsys, ["--set", "catalog.kind=synthetic", "--policy", "forecast-base-stock",
                             "--tune", "--skus", "60", "--days", "20", "--warmup", "5"])
    assert data["tuning"]["method"] == "per-sku-grid"
    assert set(data["params"]["z"]) >= {"min", "p50", "max"}  # per-SKU values, summarized
    assert 0.0 <= data["fill_rate"] <= 1.0


def test_eval_table(capsys):
    assert main(["eval", *UNIFORM, "--policy", "s-S", "--skus", "50", "--days", "20", "--warmup", "5"]) == 0
    out = capsys.readouterr().out
    assert "avg cost / SKU-day" in out and "param s" in out and "fill rate" in out


def test_unknown_policy_lists_names(capsys):
    assert main(["eval", "--policy", "magic", "--skus", "10"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "unknown policy 'magic'" in err and "forecast-base-stock" in err


def test_missing_policy_and_bad_flags_exit_2(capsys):
    assert main(["eval", "--skus", "10"]) == 2
    assert "--policy is required" in capsys.readouterr().err
    assert main(["eval", "--policy", "base-stock", "--days", "0"]) == 2
    assert "eval.days" in capsys.readouterr().err


def test_one_sku_episode_has_no_standard_error_and_stays_strict_json(capsys):
    """One SKU-episode gives no spread: null in the JSON (a bare NaN is not JSON), n/a in the table."""
    argv = [*UNIFORM, "--policy", "base-stock", "--skus", "1", "--days", "10", "--warmup", "2"]
    assert main(["eval", *argv, "--json"]) == 0
    line = capsys.readouterr().out.strip()
    data = json.loads(line, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c} in {line}"))
    assert data["cost_se"] is None and data["avg_cost_per_sku_day"] > 0
    assert main(["eval", *argv]) == 0
    assert "n/a (one SKU-episode)" in capsys.readouterr().out
