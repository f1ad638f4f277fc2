"""`skurl recommend --ab` on a `dc` network snapshot: `skurl ab assign` on the run's catalog
splits whole networks, each network's orders come from one arm and equal that arm's orders
alone (the model's, or tuned echelon base-stock's: order up to S on the echelon position), and
a groups file that splits a network exits 2 in one line, writing nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tiny_runs import network_run  # noqa: F401

from skurl.catalog import load_catalog
from skurl.cli import main
from skurl.config import load_config
from skurl.policy.tuning import tune


@pytest.fixture(scope="module")
def state(network_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    path = tmp_path_factory.mktemp("network_ab") / "state.parquet"
    assert main(["snapshot", "--run", str(network_run), "--day", "9", "--seed", "1", "--out", str(path)]) == 0
    return path


@pytest.fixture(scope="module")
def groups(network_run: Path, state: Path) -> Path:  # noqa: F811
    path = state.parent / "groups.parquet"
    assert main(["ab", "assign", "--config", str(network_run / "config.yaml"), "--seed", "4",
                 "--out", str(path)]) == 0
    return path


def per_network_single(network: np.ndarray, values: np.ndarray) -> bool:
    """Whether every network holds one value of `values`."""
    _, first, code = np.unique(network, return_index=True, return_inverse=True)
    return bool((values[first][code.ravel()] == values).all())


def echelon_base_stock_orders(snap: pa.Table, S: np.ndarray) -> np.ndarray:
    """max(0, S - echelon position) of a dc snapshot (a DC and its stores), from the file's
    columns: on hand and in transit at the row and its stores, less the stores' backlog,
    plus what the DC owes the row."""
    ids, upstream = snap.column("sku_id").to_numpy(), snap.column("upstream").to_numpy()
    due = [c for c in snap.column_names if c.startswith("due_")]
    transit = np.sum([snap.column(c).to_numpy() for c in due], axis=0)
    store = ~np.isin(ids, upstream)
    local = snap.column("on_hand").to_numpy() + transit - np.where(store, snap.column("backlog").to_numpy(), 0)
    below = np.array([local[upstream == i].sum() for i in ids])  # a test may loop
    position = local + below + snap.column("owed").to_numpy()
    return np.maximum(0.0, S - position)


def test_recommend_ab_serves_each_network_from_one_arm(network_run: Path, state: Path,  # noqa: F811
                                                      groups: Path, tmp_path: Path) -> None:
    both, alone = tmp_path / "ab.parquet", tmp_path / "model.parquet"
    run = ["--run", str(network_run), "--state", str(state)]
    assert main(["recommend", *run, "--ab", str(groups), "--policy-b", "echelon-base-stock", "--out", str(both)]) == 0
    assert main(["recommend", *run, "--out", str(alone)]) == 0
    orders, model, snap = pq.read_table(both), pq.read_table(alone), pq.read_table(state)
    table = pq.read_table(groups)
    assert orders.column("sku_id").equals(snap.column("sku_id"))
    assert table.column("sku_id").to_numpy().tolist() == snap.column("sku_id").to_numpy().tolist()
    network = table.column("network").to_numpy()
    group = orders.column("group").to_numpy(zero_copy_only=False)
    version = orders.column("policy_version").to_numpy(zero_copy_only=False)
    assert per_network_single(network, group) and per_network_single(network, version)
    is_b = group == "B"
    assert 0 < is_b.sum() < is_b.size
    assert (version[is_b] == "baseline:echelon-base-stock").all()
    for name in ("order_units", "action", "probability"):  # group A: the model's orders alone
        np.testing.assert_array_equal(orders.column(name).to_numpy()[~is_b], model.column(name).to_numpy()[~is_b])
    cfg = load_config(network_run / "config.yaml")
    catalog = load_catalog(cfg.catalog)
    b_ids = snap.column("sku_id").to_numpy()[is_b]
    rows = catalog.subset(np.searchsorted(catalog.sku_id, b_ids))  # the catalog is sorted by sku_id
    assert (rows.sku_id == b_ids).all()
    tuned = tune("echelon-base-stock", rows, cfg.sim, eval_seed=cfg.eval.seed, days=cfg.eval.days,
                 warmup=cfg.eval.warmup, sku_days=cfg.eval.tune_sku_days, max_skus=cfg.eval.tune_max_skus)
    expected = echelon_base_stock_orders(snap.filter(pa.array(is_b)), np.asarray(tuned.params["S"]))
    np.testing.assert_array_equal(orders.column("order_units").to_numpy()[is_b], expected)


def test_recommend_ab_with_a_network_baseline_as_control(network_run: Path, state: Path,  # noqa: F811
                                                         groups: Path, tmp_path: Path) -> None:
    out = tmp_path / "ab.parquet"
    assert main(["recommend", "--run", str(network_run), "--state", str(state), "--ab", str(groups),
                 "--policy-a", "installation-base-stock", "--out", str(out)]) == 0
    orders = pq.read_table(out)
    is_a = orders.column("group").to_numpy(zero_copy_only=False) == "A"
    version = orders.column("policy_version").to_numpy(zero_copy_only=False)
    assert (version[is_a] == "baseline:installation-base-stock").all()
    assert not np.isin(version[~is_a], ["baseline:installation-base-stock"]).any()


def test_recommend_ab_refuses_a_split_network(network_run: Path, state: Path, groups: Path,  # noqa: F811
                                              tmp_path: Path, capsys) -> None:
    table = pq.read_table(groups)
    ids, network = table.column("sku_id").to_numpy(), table.column("network").to_numpy()
    store = int(np.flatnonzero(ids != network)[0])  # a row below its network's root
    group = table.column("group").to_numpy(zero_copy_only=False).copy()
    group[store] = "A" if group[store] == "B" else "B"
    split, out = tmp_path / "split.parquet", tmp_path / "orders.parquet"
    pq.write_table(table.set_column(1, "group", pa.array(group)), split)
    capsys.readouterr()
    assert main(["recommend", "--run", str(network_run), "--state", str(state), "--ab", str(split),
                 "--policy-b", "echelon-base-stock", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"network {network[store]} is split" in err, err
    assert not out.exists()
