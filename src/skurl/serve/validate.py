"""Checks of an inventory snapshot against the model and the catalog, one line per problem.

Every bad input is a SnapshotError naming the SKU id (where one row is at fault) and the
column: a missing column, a null or NaN, negative stock, a SKU the catalog does not list,
block widths or SKU parameters the model's observation schema cannot show, network columns
a model of a network-free catalog does not read (or missing where it does; serve/network.py
checks their values).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from skurl.catalog.schema import Catalog
from skurl.serve.network import check_network
from skurl.serve.snapshot import (
    NETWORK_COLUMNS,
    Snapshot,
    SnapshotError,
    Widths,
    column_names,
    widths_of,
)

RANGES = {"day_of_week": (0, 6), "history_days": (0, 7)}
SIGNED = ("sku_id", "upstream", "item")  # columns where a negative value is allowed (-1: none)


def _sku(ids: np.ndarray, i: int) -> str:
    return f"SKU {int(ids[i])}" if 0 <= i < ids.shape[0] else f"row {i}"


def _column(table: pa.Table, name: str, dtype: pa.DataType, ids: np.ndarray) -> np.ndarray:
    """Column `name` as a numpy array of `dtype`: no nulls, finite, and >= 0 where it is stock
    or a count (every numeric column but SIGNED). Checked while the column is contiguous."""
    col = table.column(name)
    if col.null_count:
        i = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
        raise SnapshotError(f"snapshot {_sku(ids, i)} column '{name}': missing value (null), expected a number")
    if pa.types.is_floating(col.type) or pa.types.is_floating(dtype):
        values = col.to_numpy()
        bad = ~np.isfinite(values)
        if bad.any():
            i = int(np.argmax(bad))
            raise SnapshotError(f"snapshot {_sku(ids, i)} column '{name}' = {float(values[i])}, expected a finite number")
    try:
        out = (col if col.type == dtype else col.cast(dtype, safe=True)).to_numpy()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise SnapshotError(f"snapshot column '{name}': type {col.type}, expected {dtype} "
                            f"({str(e).splitlines()[0]})") from e
    if name not in SIGNED and out.dtype.kind in "if":
        bad = out < 0
        if bad.any():
            i = int(np.argmax(bad))
            stock = name in ("on_hand", "backlog", "owed") or name.startswith(("expiring_", "due_"))
            what = "stock" if stock else "a count"
            v = out[i]
            shown = int(v) if float(v).is_integer() else float(v)
            raise SnapshotError(f"snapshot {_sku(ids, i)} column '{name}' = {shown}: negative, expected {what} >= 0")
    return out


def _check_network_columns(table: pa.Table, network: bool) -> None:
    """Network columns where the model reads them (trained on a catalog with supply networks),
    none where it does not."""
    have = [c for c in NETWORK_COLUMNS if c in table.column_names]
    if network and len(have) < len(NETWORK_COLUMNS):
        name = next(c for c in NETWORK_COLUMNS if c not in have)
        raise SnapshotError(f"snapshot column '{name}' missing: the model was trained on a catalog with supply "
                            f"networks (expected {', '.join(NETWORK_COLUMNS)}; docs/snapshot.md)")
    if not network and have:
        raise SnapshotError(f"snapshot column '{have[0]}': the model was trained on a catalog without supply "
                            "networks and does not read network columns (expected a snapshot of its catalog)")


def _check_widths(table: pa.Table, w: Widths) -> None:
    have = widths_of(table)
    for block, prefix, first, need, got in (("expiring", "expiring_", 0, w.expiring, have.expiring),
                                            ("pipeline", "due_", 1, w.pipeline, have.pipeline)):
        if got > need:
            raise SnapshotError(f"snapshot column '{prefix}{first + need}': the model's observation schema has "
                                f"{block} width {need} (columns {prefix}{first}..{prefix}{first + need - 1} "
                                "only); the snapshot was made for another model or catalog")
    missing = [c for c in column_names(w) if c not in table.column_names]
    if missing:
        raise SnapshotError(f"snapshot column '{missing[0]}' missing ({len(missing)} missing; expected the "
                            "columns of docs/snapshot.md for the model's widths)")


def snapshot_from_table(table: pa.Table, w: Widths, network: bool = False) -> Snapshot:
    """The snapshot in `table` with the model's widths `w` (and the network columns, for a
    model of a catalog with supply networks), checked column by column."""
    _check_widths(table, w)
    _check_network_columns(table, network)
    ids = _column(table, "sku_id", pa.int64(), np.zeros(0, np.int64))
    uniq, first = np.unique(ids, return_index=True)
    if uniq.shape[0] != ids.shape[0]:
        dup = np.setdiff1d(np.arange(ids.shape[0]), first)[0]
        raise SnapshotError(f"snapshot SKU {int(ids[dup])} column 'sku_id': appears twice (expected one row per SKU)")

    def ints(name: str) -> np.ndarray:
        return _column(table, name, pa.int64(), ids)

    def block(names: list[str], dtype: pa.DataType) -> np.ndarray:
        out = np.empty((ids.shape[0], len(names)), dtype.to_pandas_dtype())
        for k, name in enumerate(names):
            out[:, k] = _column(table, name, dtype, ids)
        return out

    s = Snapshot(sku_id=ids, day=ints("day"), day_of_week=ints("day_of_week"), history_days=ints("history_days"),
                 on_hand=ints("on_hand"), expiring=block([f"expiring_{k}" for k in range(w.expiring)], pa.int64()),
                 backlog=ints("backlog"), pipeline=block([f"due_{k + 1}" for k in range(w.pipeline)], pa.int64()),
                 forecast=block([f"forecast_{k}" for k in range(w.horizon)], pa.float32()),
                 sales_yesterday=ints("sales_yesterday"), sales_last_7d=ints("sales_last_7d"),
                 lost_yesterday=ints("lost_yesterday"),
                 promo_today=_column(table, "promo_today", pa.bool_(), ids),
                 promo_ahead=_column(table, "promo_ahead", pa.bool_(), ids),
                 **({name: ints(name) for name in NETWORK_COLUMNS} if network else {}))
    _check_values(s)
    return s


def _check_values(s: Snapshot) -> None:
    for name, (lo, hi) in RANGES.items():
        col = getattr(s, name)
        bad = (col < lo) | (col > hi)
        if bad.any():
            i = int(np.argmax(bad))
            raise SnapshotError(f"snapshot {_sku(s.sku_id, i)} column '{name}' = {int(col[i])}, expected {lo}..{hi}")


def catalog_rows(s: Snapshot, catalog: Catalog, w: Widths, review_days: int) -> Catalog:
    """The catalog's rows of the snapshot's SKUs, in snapshot order; a SKU the catalog does not
    list, or whose lead time / shelf life the model's widths cannot show, a network snapshot
    that disagrees with the catalog's networks or a network catalog under a network-free
    snapshot is a SnapshotError."""
    ids = np.asarray(catalog.sku_id, np.int64)
    order = np.argsort(ids, kind="stable")
    pos = np.minimum(np.searchsorted(ids[order], s.sku_id), max(ids.shape[0] - 1, 0))
    hit = ids[order][pos] == s.sku_id if ids.size else np.zeros(len(s), bool)
    if not hit.all():
        i = int(np.argmin(hit))
        raise SnapshotError(f"snapshot SKU {int(s.sku_id[i])} column 'sku_id': not in the catalog "
                            "(expected the catalog the model orders for: --catalog or the run's config)")
    rows = catalog.subset(order[pos])
    reach = rows.lead_time.astype(np.int64) + rows.delay_max
    for name, values, width in (("lead_time + delay_max", reach, w.pipeline),
                                ("shelf_life", rows.shelf_life.astype(np.int64), w.expiring),
                                ("lead_time + review days", rows.lead_time.astype(np.int64) + review_days, w.horizon)):
        bad = values > width
        if bad.any():
            i = int(np.argmax(bad))
            raise SnapshotError(f"catalog SKU {int(s.sku_id[i])} column '{name.split()[0]}': {name} = {int(values[i])} "
                                f"days, the model's observation schema shows {width} (model schema mismatch)")
    _check_expiring(s, rows)
    if s.has_network:
        check_network(s, rows, catalog)
    elif rows.has_network:
        i = int(np.argmax(rows.upstream >= 0))
        raise SnapshotError(f"catalog SKU {int(s.sku_id[i])} column 'upstream' = {int(rows.upstream[i])}: the model "
                            "was trained on a catalog without supply networks (expected its own catalog)")
    return rows


def _check_expiring(s: Snapshot, rows: Catalog) -> None:
    """Perishable SKUs: their units by expiry day must add up to on hand."""
    life = rows.shelf_life.astype(np.int64)
    total = s.expiring.sum(axis=1)
    bad = (life > 0) & (total != s.on_hand)
    if bad.any():
        i = int(np.argmax(bad))
        raise SnapshotError(f"snapshot SKU {int(s.sku_id[i])} column 'on_hand' = {int(s.on_hand[i])}: its expiring_* "
                            f"columns add up to {int(total[i])} (a perishable SKU's stock by expiry day must sum to on hand)")

