"""Issue 25's bad input and wrong output, through the `skurl` entry point: each bad input
exits 2 with one line naming the key (or SKU and field); each wrong result is corrected."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from skurl.cli import main

UNIFORM = ["--set", "catalog.kind=uniform", "--set", "catalog.skus=5"]
EXTREME = ["--set", "catalog.kind=uniform", "--set", "catalog.skus=2", "--set", "catalog.demand.mean=1e7",
           "--set", "catalog.lead_time=60", "--set", "sim.review_days=100"]


def one_line(err: str) -> str:
    assert "Traceback" not in err and "Warning" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def fails(capsys: pytest.CaptureFixture[str], args: list[str], *expected: str) -> str:
    assert main(args) == 2
    captured = capsys.readouterr()
    line = one_line(captured.err)
    for text in expected:
        assert text in line, line
    return captured.out


def test_control_characters_in_a_key_stay_on_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """Found by the hypothesis sweep: a key holding a record separator split the error in two."""
    fails(capsys, ["config", "show", "--set", "0\x1e0=1"], "unknown config key '0\\x1e0'")


@pytest.mark.parametrize(("args", "expected"), [
    (["config", "show", "--set", "policy.hidden=[256,256"], ("config key 'policy.hidden'", "'[256,256'")),
    (["bench", "sync", "--interval", "nan"], ("--interval", "'nan'", "finite")),
    (["bench", "sync", "--interval", "inf"], ("--interval", "'inf'")),
    (["config", "show", *UNIFORM, "--set", "catalog.supplier_delay_max=99"],
     ("config key 'catalog.supplier_delay_max'", "[0, 30]")),
    (["config", "show", *UNIFORM, "--set", "catalog.lead_time=61"], ("config key 'catalog.lead_time'",)),
    (["catalog", "describe", *UNIFORM, "--set", "catalog.holding_cost=1e40"],  # no numpy overflow warning
     ("config key 'catalog.holding_cost'",)),
    (["eval", "--policy", "base-stock", "--set", "eval.skus=-1"], ("config key 'eval.skus'", ">= 0")),
    (["config", "show", "--set", "catalog.path=some.csv"], ("config key 'catalog.path'", "catalog.kind=file")),
    (["train", "--address", "10.0.0.1:6379", "--iterations", "1"], ("--address", "--mode ray")),
])
def test_bad_values_name_their_key(capsys: pytest.CaptureFixture[str], args: list[str],
                                   expected: tuple[str, ...]) -> None:
    assert fails(capsys, args, *expected) == ""


def test_a_list_as_a_yaml_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("catalog:\n  ? [a, b]\n  : 1\n")
    fails(capsys, ["config", "show", "--config", str(path)], "line 2", "a key is a list")


def test_a_parquet_column_name_that_is_not_utf8(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.parquet"
    pq.write_table(pa.table({"sku_id": [1], "demand_mean": [1.0], "lead_time": [2], "holding_cost": [1.0],
                             "lost_sale_cost": [9.0]}), good)
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(good.read_bytes().replace(b"lead_time", b"\xff\xfead_time"))
    fails(capsys, ["catalog", "validate", str(bad)], "column 3", "not UTF-8")


def test_resume_with_another_network_names_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"policy": {"hidden": [16, 16]}}))
    fails(capsys, ["train", "--resume", str(tmp_path), "--set", "policy.hidden=[8]"],
          "--set policy.hidden=[8]", "policy.hidden=[16, 16]")


def test_checkpoint_shapes_are_checked_before_loading() -> None:
    import torch

    from skurl.learn.checkpoint import CheckpointError, check_shapes

    saved = torch.nn.Linear(4, 16).state_dict()
    with pytest.raises(CheckpointError, match=r"'weight' has shape \[16, 4\], this config builds \[8, 4\]"):
        check_shapes(saved, torch.nn.Linear(4, 8))
    check_shapes(saved, torch.nn.Linear(4, 16))


def test_mode_ray_without_ray_fails_before_any_work(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ModuleNotFoundError
    fails(capsys, ["train", "--mode", "ray", "--iterations", "1"], "--mode ray", "ray package is not installed")


def test_describe_refuses_a_file_with_config_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.csv"
    assert main(["catalog", "synth", "--skus", "10", "--out", str(path)]) == 0
    capsys.readouterr()
    fails(capsys, ["catalog", "describe", str(path), "--set", "catalog.skus=5"], "FILE", "--config/--set")


def test_synth_does_not_overwrite_without_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.csv"
    path.write_text("mine\n")
    fails(capsys, ["catalog", "synth", "--skus", "10", "--out", str(path)], "exists", "--force")
    assert path.read_text() == "mine\n"
    assert main(["catalog", "synth", "--skus", "10", "--out", str(path), "--force"]) == 0
    assert path.read_text().startswith("\"sku_id\"")


def eval_json(capsys: pytest.CaptureFixture[str], args: list[str]) -> dict:
    assert main(["eval", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.mark.parametrize("policy", ["base-stock", "s-S", "forecast-base-stock"])
def test_extreme_valid_configs_evaluate(capsys: pytest.CaptureFixture[str], policy: str) -> None:
    """Levels above the simulator's per-day order limit are reached over several days."""
    data = eval_json(capsys, [*EXTREME, "--policy", policy, "--days", "100", "--warmup", "50"])
    assert data["fill_rate"] > 0.9 and data["mean_on_hand"] > 1e8


def test_backordered_units_are_not_lost(capsys: pytest.CaptureFixture[str]) -> None:
    args = [*UNIFORM, "--policy", "constant", "--days", "30", "--warmup", "5"]
    owed = eval_json(capsys, [*args, "--set", "sim.backorders=true"])
    assert owed["lost_units"] == 0 and owed["backordered_units"] > 0
    lost = eval_json(capsys, args)
    assert lost["lost_units"] > 0 and lost["backordered_units"] == 0
    assert main(["eval", *args, "--set", "sim.backorders=true"]) == 0
    table = capsys.readouterr().out
    assert f"{owed['backordered_units']:,.0f}" in table and "lost units" not in table


def test_backorder_report_column() -> None:
    from skurl.telemetry.report_md import ReportData, _summary

    data = ReportData(records=[], evaluation=None, eval_error=None, baselines=["a"],
                      policies={"a": {"avg_cost_per_sku_day": 1.0, "lost_units": 0.0, "backordered_units": 7.5}})
    text = "\n".join(_summary(data))
    assert "Backordered units" in text and "7.5" in text and "Lost units" not in text


def test_s_s_never_orders_without_demand(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "zero.csv"
    path.write_text("sku_id,demand_mean,lead_time,holding_cost,lost_sale_cost,unit_cost\n0,0,2,1,9,3\n")
    for tune in ([], ["--tune"]):
        data = eval_json(capsys, ["--set", "catalog.kind=file", "--set", f"catalog.path={path}", "--policy", "s-S",
                                  "--days", "30", "--warmup", "5", *tune])
        assert data["mean_on_hand"] == 0 and data["breakdown"]["purchase"] == 0 and data["params"]["s"] == -1


def test_config_show_and_eval_use_the_train_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    from skurl.commands.train_cmd import EMBEDDED, EMBEDDED_GRID

    assert main(["config", "show"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# the embedded defaults of a bare `skurl train`")
    assert all(item in out.splitlines()[0] for item in (*EMBEDDED, *EMBEDDED_GRID))
    shown = yaml.safe_load(out)
    assert shown["catalog"]["skus"] == 2000 and shown["policy"]["actions"]["kind"] == "cover"
    data = eval_json(capsys, ["--policy", "constant", "--days", "1", "--warmup", "0"])
    assert data["skus"] == 2000


def test_tuning_reports_progress_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    """Tuning before training (called without a callback, as the training loop does) is seen in a log."""
    from skurl.catalog.uniform import uniform_catalog
    from skurl.config import CatalogConfig, SimConfig
    from skurl.policy.tuning import tune

    tune("constant", uniform_catalog(CatalogConfig(kind="uniform", skus=20)), SimConfig(reward="cost"),
         eval_seed=0, days=10, warmup=2, uniform_skus=20, max_uniform_skus=20)
    err = capsys.readouterr().err
    assert "tune constant" in err


def test_throttled_lines() -> None:
    import io

    from skurl.telemetry.progress import throttled_lines

    out = io.StringIO()
    line = throttled_lines(3600.0, out)
    for k in range(5):
        line(f"step {k}")
    assert out.getvalue() == "step 0\n"
