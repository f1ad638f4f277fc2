"""Snapshots of catalogs with supply networks: their checks and the network observation columns.

A network's locations are served together: the features of a row read its upstream's row
(on hand, pipeline, backlog) and, for its echelon position, every row below it, so a
snapshot holds whole networks. `network_features` is the simulator's (sim/network.py,
_extra_features), computed with numpy over all rows at once (one pass per echelon level).
"""

from __future__ import annotations

import numpy as np

from skurl.catalog.network import MAX_DEPTH, echelons, parent_rows
from skurl.catalog.schema import Catalog
from skurl.serve.snapshot import Snapshot, SnapshotError
from skurl.sim.layout import NETWORK_FIELDS, feature_scale


def _first(bad: np.ndarray) -> int:
    return int(np.argmax(bad))


def _network_arrays(s: Snapshot) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if s.upstream is None or s.item is None or s.owed is None:
        raise SnapshotError("snapshot column 'upstream' missing (expected upstream, item, owed: the model was "
                            "trained on a catalog with supply networks; docs/snapshot.md)")
    return s.upstream, s.item, s.owed


def check_network(s: Snapshot, rows: Catalog, catalog: Catalog) -> None:
    """Network snapshot rows `s` (rows: their catalog rows) against the whole `catalog`: the
    catalog's upstream and item, upstreams within the snapshot, whole networks, nothing owed
    by an outside supplier."""
    upstream, item, owed = _network_arrays(s)
    for name, mine, theirs in (("upstream", upstream, rows.upstream), ("item", item, rows.item)):
        bad = mine != theirs.astype(np.int64)
        if bad.any():
            i = _first(bad)
            raise SnapshotError(f"snapshot SKU {int(s.sku_id[i])} column '{name}' = {int(mine[i])}, the catalog's "
                                f"is {int(theirs[i])} (expected the catalog the model orders for)")
    parent = parent_rows(s.sku_id, upstream)
    bad = (parent == -2) | (upstream < -1)
    if bad.any():
        i = _first(bad)
        raise SnapshotError(f"snapshot SKU {int(s.sku_id[i])} column 'upstream' = {int(upstream[i])}: not a sku_id "
                            "of the snapshot (expected its upstream's row too: a network is served whole)")
    bad = (upstream < 0) & (owed != 0)
    if bad.any():
        i = _first(bad)
        raise SnapshotError(f"snapshot SKU {int(s.sku_id[i])} column 'owed' = {int(owed[i])}: the row orders from "
                            "an outside supplier (upstream -1), expected 0")
    _check_whole(s, catalog)


def _check_whole(s: Snapshot, catalog: Catalog) -> None:
    """Every catalog row supplied by a snapshot row is in the snapshot (its upstream's echelon
    position counts its stock)."""
    ids = np.sort(s.sku_id)
    cat_up = catalog.upstream.astype(np.int64)
    supplied = np.isin(cat_up, ids) & (cat_up >= 0)
    missing = supplied & ~np.isin(catalog.sku_id.astype(np.int64), ids)
    if missing.any():
        i = _first(missing)
        raise SnapshotError(f"snapshot SKU {int(cat_up[i])} column 'sku_id': its location SKU "
                            f"{int(catalog.sku_id[i])} (catalog upstream {int(cat_up[i])}) has no snapshot row "
                            "(expected whole networks: an echelon position counts every location below)")


def subtree_sums(parent: np.ndarray, echelon: np.ndarray, local: np.ndarray) -> np.ndarray:
    """Per row, the int64 sum of `local` over the row and every row below it."""
    out = local.astype(np.int64)
    for level in range(1, MAX_DEPTH):  # a level's sums are complete once the lower levels are added
        below = np.flatnonzero((echelon == level) & (parent >= 0))
        np.add.at(out, parent[below], out[below])
    return out


def network_features(s: Snapshot, rows: Catalog) -> np.ndarray:
    """float32 [N, 5], the NETWORK_FIELDS columns of snapshot `s` (rows: its catalog rows, same
    order; whole networks, check_network): the upstream's on hand, pipeline and backlog, the
    echelon position (on hand and in transit at and below the row, less the stores' backlog,
    plus what its upstream owes it) and the echelon index, quantities in days of demand."""
    *_, owed = _network_arrays(s)
    parent, _, echelon = echelons(rows)
    inv = 1.0 / feature_scale(rows.demand_mean)
    pipeline = s.pipeline.sum(axis=1, dtype=np.int64)
    store = np.ones(len(s), bool)
    store[parent[parent >= 0]] = False
    position = subtree_sums(parent, echelon, s.on_hand + pipeline - np.where(store, s.backlog, 0))
    linked = parent >= 0
    up = np.where(linked, parent, 0)
    out = np.zeros((len(s), len(NETWORK_FIELDS)), np.float32)
    for k, values in enumerate((s.on_hand, pipeline, s.backlog)):
        out[:, k] = np.where(linked, values[up].astype(np.float64) * inv, 0.0)
    out[:, 3] = (position + owed).astype(np.float64) * inv
    out[:, 4] = echelon
    return out
