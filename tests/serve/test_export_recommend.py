"""`skurl export`, `skurl snapshot`, `skurl recommend` end to end through the CLI: a checked
ONNX graph with its metadata and a dynamic batch axis, the same orders from --run and
--model, and A/B groups getting their own group's orders."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tiny_runs import lost_sales_run, synthetic_onnx, synthetic_run  # noqa: F401

from skurl.cli import main
from skurl.serve.export import read_metadata


def test_export_metadata_checker_and_dynamic_batch(synthetic_run: Path, tmp_path: Path, capsys) -> None:  # noqa: F811
    out = tmp_path / "p.onnx"
    assert main(["export", "--run", str(synthetic_run), "--out", str(out), "--probabilities"]) == 0
    model = onnx.load(str(out))
    onnx.checker.check_model(model, full_check=True)
    meta = read_metadata(out)
    for key in ("run_id", "policy_version", "obs_schema", "skurl_version", "config_sha256", "grid_center"):
        assert meta[key], key
    assert meta["run_id"] == synthetic_run.name and int(meta["policy_version"]) >= 1
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    assert [o.name for o in session.get_outputs()] == ["order_units", "action", "probability", "probabilities"]
    for batch in (1, 7):
        feed = {}
        for i in session.get_inputs():
            shape = [batch if isinstance(d, str) else d for d in i.shape]
            dtype = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(int64)": np.int64}[i.type]
            feed[i.name] = np.ones(shape, dtype)
        units, action, prob, probs = session.run(None, feed)
        assert units.shape == action.shape == prob.shape == (batch,) and probs.shape[0] == batch
        assert np.allclose(probs.sum(axis=1), 1.0, atol=1e-5)
        assert np.allclose(prob, probs[np.arange(batch), action])


def test_snapshot_then_recommend_run_and_model_agree(synthetic_run: Path, synthetic_onnx: Path,  # noqa: F811
                                                     tmp_path: Path) -> None:
    state, a, b = tmp_path / "state.parquet", tmp_path / "a.parquet", tmp_path / "b.parquet"
    assert main(["snapshot", "--run", str(synthetic_run), "--day", "12", "--seed", "4", "--out", str(state)]) == 0
    assert pq.read_table(state).column("day").to_pylist()[0] == 12
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "NumPy array is not writable" from torch
        assert main(["recommend", "--run", str(synthetic_run), "--state", str(state), "--out", str(a)]) == 0
    assert main(["recommend", "--model", str(synthetic_onnx), "--state", str(state), "--out", str(b)]) == 0
    ta, tb = pq.read_table(a), pq.read_table(b)
    assert ta.column_names == ["sku_id", "order_units", "action", "probability", "policy_version"]
    assert ta.column("order_units").equals(tb.column("order_units"))
    # Defect 13 of issue 42: the action differed where several actions order the same units.
    assert ta.column("action").equals(tb.column("action"))
    assert ta.column("sku_id").equals(tb.column("sku_id"))
    assert set(ta.column("policy_version").to_pylist()) == {read_metadata(synthetic_onnx)["policy_version"]}
    assert pa.compute.sum(ta.column("order_units")).as_py() > 0


@pytest.mark.slow
def test_ab_groups_get_their_own_orders(synthetic_run: Path, synthetic_onnx: Path, tmp_path: Path) -> None:  # noqa: F811
    state, groups = tmp_path / "state.parquet", tmp_path / "groups.parquet"
    assert main(["snapshot", "--run", str(synthetic_run), "--day", "5", "--out", str(state)]) == 0
    ids = pq.read_table(state).column("sku_id").to_numpy()
    g = np.where(np.arange(ids.size) % 3 == 0, "B", "A")
    pq.write_table(pa.table({"sku_id": ids, "group": g, "stratum": np.full(ids.size, "all")}), groups)
    plain, ab_model, ab_base = (tmp_path / f"{n}.parquet" for n in ("plain", "m", "base"))
    assert main(["recommend", "--model", str(synthetic_onnx), "--state", str(state), "--out", str(plain)]) == 0
    assert main(["recommend", "--model", str(synthetic_onnx), "--state", str(state), "--out", str(ab_model),
                 "--ab", str(groups), "--model-b", str(synthetic_onnx)]) == 0
    assert pq.read_table(ab_model).column("order_units").equals(pq.read_table(plain).column("order_units"))
    assert pq.read_table(ab_model).column("group").to_pylist() == g.tolist()
    assert main(["recommend", "--model", str(synthetic_onnx), "--state", str(state), "--out", str(ab_base),
                 "--ab", str(groups), "--policy-b", "base-stock"]) == 0
    t, p = pq.read_table(ab_base), pq.read_table(plain)
    a_rows = g == "A"
    assert np.array_equal(t.column("order_units").to_numpy()[a_rows], p.column("order_units").to_numpy()[a_rows])
    versions = np.asarray(t.column("policy_version").to_pylist())
    assert set(versions[~a_rows]) == {"baseline:base-stock"}
    assert set(versions[a_rows]) == {read_metadata(synthetic_onnx)["policy_version"]}
    assert (t.column("action").to_numpy()[~a_rows] == -1).all()
    # Defect 13 of issue 42: the rehearsed design, A the tuned baseline (control), B the run.
    flipped = tmp_path / "flipped.parquet"
    assert main(["recommend", "--model", str(synthetic_onnx), "--state", str(state), "--out", str(flipped),
                 "--ab", str(groups), "--policy-a", "base-stock"]) == 0
    f = pq.read_table(flipped)
    versions = np.asarray(f.column("policy_version").to_pylist())
    assert set(versions[a_rows]) == {"baseline:base-stock"} and (f.column("action").to_numpy()[a_rows] == -1).all()
    assert np.array_equal(f.column("order_units").to_numpy()[~a_rows], p.column("order_units").to_numpy()[~a_rows])
    assert main(["recommend", "--model", str(synthetic_onnx), "--state", str(state), "--out", str(flipped),
                 "--ab", str(groups), "--policy-a", "base-stock", "--policy-b", "base-stock"]) == 2
