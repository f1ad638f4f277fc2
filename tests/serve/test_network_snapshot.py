"""Snapshots of catalogs with supply networks: the network columns round-trip through Parquet,
the observation from a snapshot taken from the simulator is the simulator's own (network
columns included) on every day, and bad network columns are one-line SnapshotErrors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from skurl.config import SimConfig
from skurl.serve.features import observations
from skurl.serve.snapshot import (
    Snapshot,
    SnapshotError,
    column_names,
    from_env,
    read_table,
    to_table,
    write_snapshot,
)
from skurl.serve.validate import catalog_rows, snapshot_from_table
from skurl.sim import VectorEnv
from skurl.sim.testing import order_up_to, random_network_catalog

CONFIGS = [dict(backorders=False, upstream_allocation="proportional", upstream_shortage="backorder"),
           dict(backorders=True, upstream_allocation="fair", upstream_shortage="backorder"),
           dict(backorders=False, upstream_allocation="priority", upstream_shortage="cancel")]


@pytest.mark.parametrize("config", range(len(CONFIGS)))
def test_network_snapshot_features_equal_the_simulators_every_day(config: int, tmp_path: Path) -> None:
    catalog = random_network_catalog(300, seed=7 + config)
    env = VectorEnv(catalog, SimConfig(days=25, substitution=False, **CONFIGS[config]))
    obs = env.reset(seed=3)
    orders = np.zeros(len(catalog))
    lead = catalog.lead_time.astype(np.float64)
    owed_days = 0
    for day in range(25):
        snap = from_env(env)
        path = write_snapshot(snap, tmp_path / f"s{day}.parquet")
        back = snapshot_from_table(read_table(path), snap.widths, network=True)
        assert back.owed is not None and np.array_equal(back.owed, env.observe().raw.owed)
        rows = catalog_rows(back, catalog, snap.widths, env.cfg.review_days)
        feats = observations(back, rows)
        assert feats.shape == obs.features.shape
        assert feats.tobytes() == np.ascontiguousarray(obs.features).tobytes(), (config, day)
        owed_days += int(back.owed.any())
        raw = obs.raw
        order_up_to(raw.on_hand, raw.pipeline, raw.backlog, raw.forecast, lead, orders)
        obs = env.step(orders * 1.5).obs
    assert pq.read_schema(path).names == column_names(snap.widths, network=True)
    if CONFIGS[config]["upstream_shortage"] == "backorder":
        assert owed_days > 0  # upstreams ran short: the owed and backlog columns were exercised


def test_network_rows_in_any_order_give_the_same_rows() -> None:
    catalog = random_network_catalog(120, seed=5)
    env = VectorEnv(catalog, SimConfig(days=6, substitution=False))
    env.reset(seed=1)
    obs = env.step(np.full(len(catalog), 4.0)).obs
    snap = from_env(env)
    perm = np.random.default_rng(0).permutation(len(snap))
    shuffled = snap.take(perm)
    feats = observations(shuffled, catalog_rows(shuffled, catalog, snap.widths, 1))
    assert np.array_equal(feats, obs.features[perm])


@pytest.fixture(scope="module")
def network_state() -> tuple[Snapshot, object]:
    catalog = random_network_catalog(80, seed=2)
    env = VectorEnv(catalog, SimConfig(days=6, substitution=False))
    env.reset(seed=1)
    env.step(np.full(len(catalog), 30.0))
    return from_env(env), catalog


def _rows(snap: Snapshot, catalog, table=None, network: bool = True):
    back = snapshot_from_table(to_table(snap) if table is None else table, snap.widths, network)
    return catalog_rows(back, catalog, snap.widths, 1)


def _child_and_parent(snap: Snapshot) -> tuple[int, int]:
    """(row of a location with an upstream, row of that upstream)."""
    assert snap.upstream is not None
    child = int(np.flatnonzero(snap.upstream >= 0)[0])
    return child, int(np.flatnonzero(snap.sku_id == snap.upstream[child])[0])


def test_missing_network_columns_for_a_network_model(network_state) -> None:
    snap, catalog = network_state
    with pytest.raises(SnapshotError, match=r"^snapshot column 'upstream' missing: the model was trained on a catalog "
                                            "with supply networks"):
        _rows(snap, catalog, to_table(snap).drop(["upstream", "item", "owed"]))
    with pytest.raises(SnapshotError, match=r"^snapshot column 'owed' missing"):
        _rows(snap, catalog, to_table(snap).drop(["owed"]))


def test_network_columns_for_a_network_free_model(network_state) -> None:
    snap, catalog = network_state
    with pytest.raises(SnapshotError, match=r"^snapshot column 'upstream': the model was trained on a catalog "
                                            "without supply networks"):
        _rows(snap, catalog, network=False)
    plain = to_table(snap).drop(["upstream", "item", "owed"])
    with pytest.raises(SnapshotError, match=r"^catalog SKU \d+ column 'upstream' = \d+: the model was trained on a "
                                            "catalog without supply networks"):
        _rows(snap, catalog, plain, network=False)


def test_upstream_not_in_the_snapshot(network_state) -> None:
    snap, catalog = network_state
    _, parent = _child_and_parent(snap)
    part = snap.take(np.flatnonzero(np.arange(len(snap)) != parent))
    with pytest.raises(SnapshotError, match=rf"^snapshot SKU \d+ column 'upstream' = {int(snap.sku_id[parent])}: "
                                            "not a sku_id of the snapshot"):
        _rows(part, catalog)


def test_a_location_missing_under_its_upstream(network_state) -> None:
    snap, catalog = network_state
    child, parent = _child_and_parent(snap)
    assert snap.upstream is not None
    # drop the child and everything it supplies, keep its upstream
    keep = np.ones(len(snap), bool)
    below = {int(snap.sku_id[child])}
    for _ in range(3):
        below |= set(snap.sku_id[np.isin(snap.upstream, list(below))].tolist())
    keep &= ~np.isin(snap.sku_id, list(below))
    with pytest.raises(SnapshotError, match=rf"^snapshot SKU {int(snap.sku_id[parent])} column 'sku_id': its location "
                                            rf"SKU {int(snap.sku_id[child])} .* has no snapshot row"):
        _rows(snap.take(np.flatnonzero(keep)), catalog)


def test_upstream_or_item_other_than_the_catalogs(network_state) -> None:
    snap, catalog = network_state
    child, _ = _child_and_parent(snap)
    assert snap.upstream is not None and snap.item is not None
    moved = snap.take(np.arange(len(snap)))
    assert moved.upstream is not None and moved.item is not None
    moved.upstream[child] = -1
    with pytest.raises(SnapshotError, match=rf"^snapshot SKU {int(snap.sku_id[child])} column 'upstream' = -1, "
                                            "the catalog's is"):
        _rows(moved, catalog)
    other = snap.take(np.arange(len(snap)))
    assert other.item is not None
    other.item[child] += 1
    with pytest.raises(SnapshotError, match=rf"^snapshot SKU {int(snap.sku_id[child])} column 'item' = "):
        _rows(other, catalog)


def test_owed_by_an_outside_supplier_and_negative_owed(network_state) -> None:
    snap, catalog = network_state
    assert snap.upstream is not None
    root = int(np.flatnonzero(snap.upstream < 0)[0])
    bad = snap.take(np.arange(len(snap)))
    assert bad.owed is not None
    bad.owed[root] = 2
    with pytest.raises(SnapshotError, match=rf"^snapshot SKU {int(snap.sku_id[root])} column 'owed' = 2: the row "
                                            "orders from an outside supplier"):
        _rows(bad, catalog)
    bad.owed[root] = -1
    with pytest.raises(SnapshotError, match=rf"^snapshot SKU {int(snap.sku_id[root])} column 'owed' = -1: negative, "
                                            "expected stock"):
        _rows(bad, catalog)
