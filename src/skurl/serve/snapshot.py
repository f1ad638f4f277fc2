"""The inventory snapshot: one row per SKU-location, the state the policy decides from.

Columns (docs/snapshot.md explains each): sku_id, day, day_of_week, history_days, on_hand,
expiring_0..expiring_{A-1}, backlog, due_1..due_P, forecast_0..forecast_{H-1},
sales_yesterday, sales_last_7d, lost_yesterday, promo_today, promo_ahead, and for catalogs
with supply networks upstream, item, owed (NETWORK_COLUMNS). A (days of shelf life), P (days
of lead time + delay) and H (P + review days) are the model's widths.
`from_env` takes one from the simulator; `read_snapshot` loads and validates a Parquet file
(one line naming the SKU id and column for each kind of bad input).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from skurl import atomic
from skurl.errors import UserError

COUNT_COLUMNS = ("on_hand", "backlog", "sales_yesterday", "sales_last_7d", "lost_yesterday")
FLAG_COLUMNS = ("promo_today", "promo_ahead")
NETWORK_COLUMNS = ("upstream", "item", "owed")  # only in snapshots of catalogs with supply networks


class SnapshotError(UserError):
    """A snapshot file is wrong; the message names the SKU id and the column."""


@dataclass(frozen=True)
class Widths:
    """Widths of the snapshot's column blocks (the model's observation layout)."""

    expiring: int  # A
    pipeline: int  # P
    horizon: int  # H


@dataclass
class Snapshot:
    """A snapshot as arrays, row-aligned (struct of arrays; counts int64)."""

    sku_id: np.ndarray  # int64 [N]
    day: np.ndarray  # int64 [N]: the day index of the ordering calendar (review days: day % R == 0)
    day_of_week: np.ndarray  # int64 [N] in 0..6: index into the catalog's season_0..season_6
    history_days: np.ndarray  # int64 [N] in 0..7: days of sales in sales_last_7d
    on_hand: np.ndarray  # int64 [N]
    expiring: np.ndarray  # int64 [N, A]: on hand expiring at the end of day t + k
    backlog: np.ndarray  # int64 [N]
    pipeline: np.ndarray  # int64 [N, P]: open orders due on day t + 1 + k
    forecast: np.ndarray  # float32 [N, H]: forecast demand of day t + k
    sales_yesterday: np.ndarray  # int64 [N]
    sales_last_7d: np.ndarray  # int64 [N]
    lost_yesterday: np.ndarray  # int64 [N]
    promo_today: np.ndarray  # bool [N]
    promo_ahead: np.ndarray  # bool [N]: a promotion day within t + 1 .. t + lead time
    # Supply networks only (None otherwise): the catalog's upstream and item, and the units
    # the upstream owes the row (requested, not yet shipped).
    upstream: np.ndarray | None = None  # int64 [N]: sku_id of the supplying row, -1 outside
    item: np.ndarray | None = None  # int64 [N]
    owed: np.ndarray | None = None  # int64 [N]

    @property
    def has_network(self) -> bool:
        return self.upstream is not None

    def __len__(self) -> int:
        return int(self.sku_id.shape[0])

    @property
    def widths(self) -> Widths:
        return Widths(self.expiring.shape[1], self.pipeline.shape[1], self.forecast.shape[1])

    def take(self, rows: np.ndarray) -> Snapshot:
        return dataclasses.replace(self, **{k: v[rows] for k, v in self.__dict__.items() if v is not None})


def column_names(w: Widths, network: bool = False) -> list[str]:
    """Every column of a snapshot of widths `w` (with the network columns), in file order."""
    return ["sku_id", "day", "day_of_week", "history_days", "on_hand",
            *[f"expiring_{k}" for k in range(w.expiring)], "backlog",
            *[f"due_{k + 1}" for k in range(w.pipeline)], *[f"forecast_{k}" for k in range(w.horizon)],
            "sales_yesterday", "sales_last_7d", "lost_yesterday", *FLAG_COLUMNS,
            *(NETWORK_COLUMNS if network else ())]


def from_env(env: object) -> Snapshot:
    """The snapshot of a VectorEnv (sim/env.py) at the start of its current day."""
    arrays = env.state_snapshot()  # type: ignore[attr-defined]
    day = int(env.day)  # type: ignore[attr-defined]
    n = arrays["counts"].shape[0]
    counts, promo = arrays["counts"], arrays["promo"]
    full = np.full(n, day, np.int64)
    catalog = env.catalog  # type: ignore[attr-defined]
    network: dict[str, np.ndarray] = {}
    if catalog.has_network:
        owed = env.observe().raw.owed  # type: ignore[attr-defined]
        network = {"upstream": np.asarray(catalog.upstream, np.int64).copy(),
                   "item": np.asarray(catalog.item, np.int64).copy(), "owed": np.asarray(owed, np.int64).copy()}
    return Snapshot(
        sku_id=np.asarray(catalog.sku_id, np.int64).copy(), day=full,
        day_of_week=full % 7, history_days=np.minimum(full, 7), on_hand=counts[:, 0].copy(),
        expiring=arrays["expiring"], backlog=counts[:, 1].copy(), pipeline=arrays["pipeline"],
        forecast=arrays["forecast"], sales_yesterday=counts[:, 2].copy(), sales_last_7d=counts[:, 3].copy(),
        lost_yesterday=counts[:, 4].copy(), promo_today=promo[:, 0].copy(), promo_ahead=promo[:, 1].copy(),
        **network)


def to_table(s: Snapshot) -> pa.Table:
    cols: dict[str, np.ndarray] = {"sku_id": s.sku_id, "day": s.day, "day_of_week": s.day_of_week,
                                   "history_days": s.history_days, "on_hand": s.on_hand}
    cols.update({f"expiring_{k}": s.expiring[:, k] for k in range(s.expiring.shape[1])})
    cols["backlog"] = s.backlog
    cols.update({f"due_{k + 1}": s.pipeline[:, k] for k in range(s.pipeline.shape[1])})
    cols.update({f"forecast_{k}": s.forecast[:, k] for k in range(s.forecast.shape[1])})
    cols.update({name: getattr(s, name) for name in (*COUNT_COLUMNS[2:], *FLAG_COLUMNS)})
    if s.has_network:
        cols.update({name: getattr(s, name) for name in NETWORK_COLUMNS})
    return pa.table({k: pa.array(np.ascontiguousarray(v)) for k, v in cols.items()})


def write_parquet(table: pa.Table, path: str | Path) -> Path:
    """`table` as Parquet at `path`, atomically (skurl.atomic: a temporary file renamed over it)."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    atomic.write_bytes(path, sink.getvalue().to_pybytes())
    return Path(path)


def write_snapshot(s: Snapshot, path: str | Path) -> Path:
    """Write `s` as Parquet, atomically."""
    return write_parquet(to_table(s), path)


def read_table(path: str | Path) -> pa.Table:
    path = Path(path)
    if not path.is_file():
        raise SnapshotError(f"--state {path}: no such file (expected a snapshot Parquet file)")
    try:
        return pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as e:
        raise SnapshotError(f"--state {path}: not a readable Parquet file ({str(e).splitlines()[0]})") from e


def widths_of(table: pa.Table) -> Widths:
    """The block widths a snapshot table's column names show."""
    names = set(table.column_names)

    def count(prefix: str, start: int) -> int:
        k = start
        while f"{prefix}{k}" in names:
            k += 1
        return k - start
    return Widths(count("expiring_", 0), count("due_", 1), count("forecast_", 0))
