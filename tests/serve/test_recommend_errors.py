"""Bad input to `skurl recommend`: one line naming the SKU id and column, exit code 2, and
no output file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tiny_runs import lost_sales_onnx, lost_sales_run, synthetic_onnx, synthetic_run  # noqa: F401

from skurl.catalog.io import write_catalog
from skurl.cli import main


@pytest.fixture(scope="module")
def state(synthetic_run: Path, tmp_path_factory: pytest.TempPathFactory) -> pa.Table:  # noqa: F811
    path = tmp_path_factory.mktemp("state") / "state.parquet"
    assert main(["snapshot", "--run", str(synthetic_run), "--day", "3", "--out", str(path)]) == 0
    return pq.read_table(path)


def _set(table: pa.Table, name: str, row: int, value: object) -> pa.Table:
    values = table.column(name).to_pylist()
    values[row] = value
    return table.set_column(table.column_names.index(name), name, pa.array(values, table.column(name).type))


def _float(table: pa.Table, name: str, row: int, value: float) -> pa.Table:
    values = np.asarray(table.column(name).to_pylist(), np.float64)
    values[row] = value
    return table.set_column(table.column_names.index(name), name, pa.array(values))


CASES: dict[str, tuple[Callable[[pa.Table], pa.Table], str]] = {
    "missing column": (lambda t: t.drop(["due_2"]), "column 'due_2' missing"),
    "NaN forecast": (lambda t: _float(t, "forecast_1", 4, float("nan")), "column 'forecast_1' = nan"),
    "null": (lambda t: _set(t, "backlog", 5, None), "column 'backlog': missing value"),
    "negative stock": (lambda t: _set(t, "due_1", 6, -2), "column 'due_1' = -2: negative, expected stock"),
    "negative on hand": (lambda t: _set(t, "on_hand", 2, -1), "column 'on_hand' = -1: negative"),
    "SKU not in catalog": (lambda t: _set(t, "sku_id", 7, 10**9), "SKU 1000000000 column 'sku_id': not in the catalog"),
    "extra pipeline column": (lambda t: t.append_column("due_99", pa.array(np.zeros(len(t), np.int64))), None),
    "wider expiring block than the model": (
        lambda t: t.append_column(f"expiring_{sum(c.startswith('expiring_') for c in t.column_names)}",
                                  pa.array(np.zeros(len(t), np.int64))), "the model's observation schema"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_snapshot(case: str, state: pa.Table, synthetic_onnx: Path, tmp_path: Path, capsys) -> None:  # noqa: F811
    change, expected = CASES[case]
    bad, out = tmp_path / "bad.parquet", tmp_path / "orders.parquet"
    pq.write_table(change(state), bad)
    code = main(["recommend", "--model", str(synthetic_onnx), "--state", str(bad), "--out", str(out)])
    err = capsys.readouterr().err
    if case == "extra pipeline column":  # due_99 is no block column: ignored (not contiguous with due_P)
        assert code == 0 and out.is_file()
        return
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert expected in err, err
    if case not in ("missing column", "wider expiring block than the model"):
        assert "SKU " in err, err
    assert not out.exists() and not list(tmp_path.glob(".orders*"))


def test_model_schema_mismatch(state: pa.Table, synthetic_onnx: Path, synthetic_run: Path,  # noqa: F811
                               tmp_path: Path, capsys) -> None:
    from skurl.catalog import load_catalog
    from skurl.config import load_config

    cfg = load_config(synthetic_run / "config.yaml")
    catalog = load_catalog(cfg.catalog)
    sku = int(state.column("sku_id")[0].as_py())
    row = int(np.flatnonzero(catalog.sku_id == sku)[0])
    lead = catalog.lead_time.copy()
    lead[row] = 59  # beyond the pipeline the model shows
    from dataclasses import replace

    cat_path, bad_state, out = tmp_path / "cat.parquet", tmp_path / "s.parquet", tmp_path / "o.parquet"
    write_catalog(replace(catalog, lead_time=lead), cat_path)
    pq.write_table(state, bad_state)
    code = main(["recommend", "--model", str(synthetic_onnx), "--state", str(bad_state), "--out", str(out),
                 "--catalog", str(cat_path)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and f"SKU {sku} column 'lead_time'" in err, err
    assert "model schema mismatch" in err and not out.exists()
    # an unknown baseline for group B
    assert main(["recommend", "--model", str(synthetic_onnx), "--state", str(bad_state), "--out", str(out),
                 "--ab", str(tmp_path / "none.parquet"), "--policy-b", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nope" in err and not out.exists(), err


def test_bad_flags_and_files(synthetic_onnx: Path, tmp_path: Path, capsys) -> None:  # noqa: F811
    out = tmp_path / "o.parquet"
    for argv, expected in (
        (["recommend", "--state", "x.parquet", "--out", str(out)], "exactly one of --model"),
        (["recommend", "--model", str(tmp_path / "none.onnx"), "--state", "x", "--out", str(out)], "no such file"),
        (["recommend", "--model", str(synthetic_onnx), "--state", str(tmp_path / "no.parquet"), "--out", str(out)],
         "--state"),
        (["export", "--run", str(tmp_path), "--out", str(tmp_path / "m.onnx")], "not a run directory"),
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and expected in err, err
        assert not out.exists()


def test_model_of_another_layout(state: pa.Table, lost_sales_onnx: Path, tmp_path: Path, capsys) -> None:  # noqa: F811
    bad, out = tmp_path / "s.parquet", tmp_path / "o.parquet"
    pq.write_table(state, bad)
    assert main(["recommend", "--model", str(lost_sales_onnx), "--state", str(bad), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "model's observation schema" in err and not out.exists(), err


def test_snapshot_day_out_of_range(synthetic_run: Path, tmp_path: Path, capsys) -> None:  # noqa: F811
    out = tmp_path / "s.parquet"
    for day in ("100", "-1"):
        assert main(["snapshot", "--run", str(synthetic_run), "--day", day, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"--day {day}" in err and not out.exists(), err


def test_read_only_inputs_give_no_torch_warning() -> None:
    # Issue 42, defect 13: `skurl recommend --run` printed PyTorch's "NumPy array is not
    # writable" warning for features read from buffers.
    import warnings

    import numpy as np

    from skurl.serve.models import as_tensor

    arr = np.frombuffer(np.arange(6, dtype=np.float32).tobytes(), np.float32).reshape(2, 3)
    assert not arr.flags.writeable
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = as_tensor(arr)
    assert t.tolist() == arr.tolist()
    writable = np.ones(4)
    assert as_tensor(writable).data_ptr() == writable.ctypes.data  # no copy when not needed
