"""Bad input end to end: the `skurl` process exits with code 2 and prints one line, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from skurl.cli import main

HEADER = "sku_id,demand_mean,lead_time,holding_cost,lost_sale_cost\n"


def _run(args: list[str]) -> tuple[int, str, str]:
    """The real entry point in a fresh interpreter, as a user would run it."""
    proc = subprocess.run(
        [sys.executable, "-m", "skurl.cli", *args], capture_output=True, text=True, timeout=120
    )
    return proc.returncode, proc.stdout, proc.stderr


def _one_line_error(err: str) -> str:
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    return lines[0]


def test_malformed_catalog_file_in_a_real_process(tmp_path: Path) -> None:
    path = tmp_path / "broken.csv"
    path.write_text(HEADER + "0,1,2,1,9\n1,1,2\n")
    rc, out, err = _run(["catalog", "validate", str(path)])
    assert rc == 2 and out == ""
    assert "not a readable CSV file" in _one_line_error(err)


def test_unknown_config_key_in_a_real_process() -> None:
    rc, _, err = _run(["config", "show", "--set", "sim.dayz=3"])
    assert rc == 2
    assert "unknown config key 'sim.dayz'" in _one_line_error(err)


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ("7,nan,2,1,9\n", "SKU 7: field 'demand_mean' = nan"),
        ("7,-2,2,1,9\n", "SKU 7: field 'demand_mean' = -2.0"),
        ("7,1,2,-1,9\n", "SKU 7: field 'holding_cost' = -1.0"),
        ("7,1,-1,1,9\n", "SKU 7: field 'lead_time' = -1"),
        ("7,1,2,1,lots\n", "column 'lost_sale_cost' at SKU 7: got 'lots'"),
    ],
)
def test_bad_parameters_in_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], row: str, expected: str
) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(HEADER + "0,1,2,1,9\n" + row)
    for args in (["catalog", "validate", str(path)], ["catalog", "describe", str(path)],
                 ["catalog", "describe", "--set", "catalog.kind=file", "--set", f"catalog.path={path}"]):
        assert main(args) == 2
        captured = capsys.readouterr()
        assert expected in _one_line_error(captured.err) and captured.out == ""


def test_malformed_parquet_and_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"PAR1 but not really")
    assert main(["catalog", "validate", str(junk)]) == 2
    assert "not a readable Parquet file" in _one_line_error(capsys.readouterr().err)
    assert main(["catalog", "validate", str(tmp_path / "none.csv")]) == 2
    assert "not found" in _one_line_error(capsys.readouterr().err)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["config", "show", "--set", "catalog.synthetic.colour=red"], "unknown config key 'catalog.synthetic.colour'"),
        (["config", "show", "--set", "sim.days=ten"], "config key 'sim.days': got 'ten', expected int"),
        (["config", "show", "--set", "sim.issuing=random"], "config key 'sim.issuing'"),
        (["config", "show", "--set", "catalog.synthetic.promo_share=2"], "catalog.synthetic.promo_share"),
        (["config", "show", "--set", "nonsense"], "expected key=value"),
        (["catalog", "synth", "--out", "x.csv", "--set", "catalog.skus=-5"], "config key 'catalog.skus'"),
        (["catalog", "synth", "--out", "x.csv", "--skus", "many"], "invalid int value: 'many'"),
        (["catalog", "synth", "--skus", "10"], "--out"),
        (["catalog", "synth", "--skus", "10", "--out", "x.json"], "unknown extension '.json'"),
        (["catalog", "frobnicate"], "invalid choice: 'frobnicate'"),
        (["config", "show", "--set", "train.warm_start=oracle"], "config key 'train.warm_start'"),
        (["config", "show", "--set", "train.warm_start_smoothing=1"], "train.warm_start_smoothing"),
    ],
)
def test_bad_flags_and_config_values(
    capsys: pytest.CaptureFixture[str], args: list[str], expected: str
) -> None:
    assert main(args) == 2
    assert expected in _one_line_error(capsys.readouterr().err)


def test_unknown_key_in_a_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("catalog:\n  skuz: 10\n")
    assert main(["catalog", "describe", "--config", str(path)]) == 2
    assert "unknown config key 'catalog.skuz'" in _one_line_error(capsys.readouterr().err)


def test_synth_into_a_missing_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["catalog", "synth", "--skus", "10", "--out", str(tmp_path / "no" / "c.csv")]) == 2
    assert "does not exist" in _one_line_error(capsys.readouterr().err)


def test_train_run_dir_that_cannot_be_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert main(["train", "--run-dir", str(afile), "--iterations", "1"]) == 2
    assert "--run-dir" in (err := _one_line_error(capsys.readouterr().err)) and "is a file" in err
    assert main(["train", "--run-dir", str(afile / "sub"), "--iterations", "1"]) == 2
    assert "cannot create it (Not a directory)" in _one_line_error(capsys.readouterr().err)


@pytest.mark.parametrize("mode", ["decoupled", "colocated"])
def test_a_bad_staleness_key_is_one_line_before_anything_is_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: str) -> None:
    """A breaker threshold below the staleness it guards is one line naming the key."""
    run = tmp_path / "run"
    code = main(["train", "--mode", mode, "--run-dir", str(run), "--set", "sync.backend=grpc",
                 "--set", "catalog.skus=40", "--set", "collect.staleness=2", "--set", "collect.staleness_mode=bounded",
                 "--set", "collect.max_lag=1"])
    line = _one_line_error(capsys.readouterr().err)
    assert code == 2 and "collect.max_lag" in line, line
    assert not any(run.rglob("*")) if run.exists() else True  # no decoupled/, rollouts/, config
