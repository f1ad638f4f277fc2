"""Serving a policy trained on a `dc` supply network: `skurl export` writes the network
observation columns into the graph's schema, `skurl snapshot` the network columns, and
`skurl recommend` orders for every location, the same through torch and ONNX and the same
as the trained policy orders in the simulator; mismatched snapshots exit 2 in one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_parity import check_parity
from tiny_runs import network_onnx, network_run, synthetic_onnx, synthetic_run  # noqa: F401

from skurl.cli import main
from skurl.serve.export import read_metadata
from skurl.serve.snapshot import NETWORK_COLUMNS
from skurl.sim.layout import NETWORK_FIELDS


@pytest.fixture(scope="module")
def network_state(network_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    path = tmp_path_factory.mktemp("network_state") / "state.parquet"
    assert main(["snapshot", "--run", str(network_run), "--day", "9", "--seed", "2", "--out", str(path)]) == 0
    return path


def test_export_and_snapshot_carry_the_network(network_onnx: Path, network_state: Path) -> None:  # noqa: F811
    names = json.loads(read_metadata(network_onnx)["obs_schema"])
    assert names[-len(NETWORK_FIELDS):] == [name for name, _ in NETWORK_FIELDS]
    table = pq.read_table(network_state)
    assert table.column_names[-len(NETWORK_COLUMNS):] == list(NETWORK_COLUMNS)
    upstream = table.column("upstream").to_numpy()
    assert (upstream >= 0).any() and (upstream == -1).any()  # stores and their DCs
    assert set(upstream[upstream >= 0]) <= set(table.column("sku_id").to_numpy())


def test_network_recommend_run_and_model_agree(network_run: Path, network_onnx: Path,  # noqa: F811
                                               network_state: Path, tmp_path: Path) -> None:
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    assert main(["recommend", "--run", str(network_run), "--state", str(network_state), "--out", str(a)]) == 0
    assert main(["recommend", "--model", str(network_onnx), "--state", str(network_state), "--out", str(b)]) == 0
    ta, tb = pq.read_table(a), pq.read_table(b)
    assert ta.column("sku_id").equals(pq.read_table(network_state).column("sku_id"))
    assert ta.column("order_units").equals(tb.column("order_units"))
    assert ta.column("action").equals(tb.column("action"))


def test_network_parity_with_the_simulator(network_run: Path, network_onnx: Path, tmp_path: Path) -> None:  # noqa: F811
    check_parity(network_run, network_onnx, tmp_path, days=30)


def _recommend(model: Path, table: pa.Table, tmp_path: Path, *extra: str) -> int:
    bad, out = tmp_path / "bad.parquet", tmp_path / "orders.parquet"
    pq.write_table(table, bad)
    code = main(["recommend", "--model", str(model), "--state", str(bad), "--out", str(out), *extra])
    assert not out.exists()
    return code


def test_network_model_given_a_snapshot_without_network_columns(network_onnx: Path, network_state: Path,  # noqa: F811
                                                                tmp_path: Path, capsys) -> None:
    table = pq.read_table(network_state).drop(list(NETWORK_COLUMNS))
    assert _recommend(network_onnx, table, tmp_path) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "column 'upstream' missing: the model was trained on a catalog with supply networks" in err


def test_network_free_model_given_network_columns(synthetic_run: Path, synthetic_onnx: Path,  # noqa: F811
                                                  tmp_path: Path, capsys) -> None:
    state = tmp_path / "plain.parquet"
    assert main(["snapshot", "--run", str(synthetic_run), "--day", "3", "--out", str(state)]) == 0
    table = pq.read_table(state)
    for name in NETWORK_COLUMNS:
        table = table.append_column(name, pa.array(np.full(len(table), -1 if name != "owed" else 0, np.int64)))
    assert _recommend(synthetic_onnx, table, tmp_path) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "column 'upstream': the model was trained on a catalog without supply networks" in err


def test_network_upstream_row_missing(network_onnx: Path, network_state: Path, tmp_path: Path, capsys) -> None:  # noqa: F811
    table = pq.read_table(network_state)
    upstream = table.column("upstream").to_numpy()
    dc = int(upstream[upstream >= 0][0])
    table = table.filter(pa.compute.not_equal(table.column("sku_id"), dc))
    assert _recommend(network_onnx, table, tmp_path) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"column 'upstream' = {dc}: not a sku_id of the snapshot" in err


def test_network_ab_split_by_sku_is_refused(network_onnx: Path, network_state: Path, tmp_path: Path,  # noqa: F811
                                             capsys) -> None:
    """Groups by SKU split networks (tests/serve/test_network_ab.py: groups by network)."""
    table = pq.read_table(network_state)
    groups = tmp_path / "groups.parquet"
    ids = table.column("sku_id").to_numpy()
    pq.write_table(pa.table({"sku_id": ids, "group": np.where(ids % 2 == 0, "A", "B"),
                             "stratum": np.full(ids.size, "all")}), groups)
    assert _recommend(network_onnx, table, tmp_path, "--ab", str(groups), "--policy-b", "base-stock") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is split: SKU" in err

