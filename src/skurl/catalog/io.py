"""Catalog files: Parquet (.parquet, .pq) and CSV (.csv), read with checks, written exactly.

Columns are the names of `schema.COLUMNS` plus season_0..season_6 (weekly factors,
day % 7 == d). Required: sku_id, demand_mean, lead_time, holding_cost, lost_sale_cost.
Optional columns and their defaults when absent:
    category=0, group=-1, sub_frac=0, demand_dist=poisson, dispersion=1 (only used for
    negbin), trend=0, promo_uplift/promo_period/promo_length/promo_offset=0,
    delay_prob/delay_max=0, shelf_life=0, order_cost=0, unit_cost=0, waste_cost=0,
    price=0, forecast_noise=0, season_0..season_6=1 (all seven or none); upstream=-1, item=-1,
    ship_cost=0 (supply networks, docs/networks.md; written only when some row has one).

More: docs/internals.md (catalog/io.py)."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from skurl.catalog.schema import (
    COLUMNS,
    DIST_CODES,
    DIST_NAMES,
    LINK_COLUMNS,
    NETWORK_COLUMNS,
    SEASON_COLUMNS,
    WEEK,
    Catalog,
)
from skurl.errors import CatalogError

FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv"}
REQUIRED = ("sku_id", "demand_mean", "lead_time", "holding_cost", "lost_sale_cost")
DEFAULTS: dict[str, float] = {
    "category": 0, "group": -1, "sub_frac": 0.0, "demand_dist": DIST_CODES["poisson"],
    "dispersion": 1.0, "trend": 0.0, "promo_uplift": 0.0, "promo_period": 0, "promo_length": 0,
    "promo_offset": 0, "delay_prob": 0.0, "delay_max": 0, "shelf_life": 0, "order_cost": 0.0,
    "unit_cost": 0.0, "waste_cost": 0.0, "price": 0.0, "forecast_noise": 0.0, "upstream": -1, "item": -1,
    "ship_cost": 0.0,
}  # fmt: skip
SEASON_DEFAULT = 1.0
EXPECTED_NAMES = tuple(c.name for c in COLUMNS) + SEASON_COLUMNS + tuple(c.name for c in NETWORK_COLUMNS + LINK_COLUMNS)
DIST_TEXT = tuple(DIST_NAMES[code] for code in sorted(DIST_NAMES))  # index == code


def _format(path: Path) -> str:
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise CatalogError(
            f"catalog file '{path}': unknown extension '{path.suffix}', expected one of "
            f"{', '.join(FORMATS)}"
        )
    return fmt


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 200 else text[:197] + "..."


def write_catalog(catalog: Catalog, path: str | Path) -> Path:
    """Write a validated catalog to Parquet or CSV (by extension); atomic replace."""
    p = Path(path)
    fmt = _format(p)
    if not p.parent.is_dir():
        raise CatalogError(f"catalog file '{p}': cannot write, folder '{p.parent}' does not exist")
    catalog.validate()
    cols: dict[str, pa.Array] = {name: pa.array(arr) for name, arr in catalog.columns().items()}
    cols["demand_dist"] = pc.take(pa.array(DIST_TEXT), pa.array(catalog.demand_dist.astype(np.int32)))
    table = pa.table(cols)
    tmp = p.with_name(f".{p.name}.tmp{os.getpid()}")
    try:
        if fmt == "parquet":
            pq.write_table(table, tmp, compression="zstd")
        else:
            pcsv.write_csv(table, tmp)
        os.replace(tmp, p)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise CatalogError(f"catalog file '{p}': cannot write ({_one_line(exc)})") from None
    return p


def _read_table(path: Path, fmt: str, as_text: bool = False) -> pa.Table:
    """The file as an Arrow table; CSV columns typed from the schema (or all text)."""
    try:
        if fmt == "parquet":
            return pq.read_table(path)
        types = {c.name: pa.from_numpy_dtype(c.dtype) for c in COLUMNS + NETWORK_COLUMNS + LINK_COLUMNS}
        types.update({name: pa.float32() for name in SEASON_COLUMNS})
        types["demand_dist"] = pa.string()
        if as_text:
            types = dict.fromkeys(types, pa.string())
        return pcsv.read_csv(path, convert_options=pcsv.ConvertOptions(column_types=types))
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise CatalogError(
            f"catalog file '{path}': not a readable {fmt.upper() if fmt == 'csv' else 'Parquet'} "
            f"file ({_one_line(exc)})"
        ) from None


def _check_names(path: Path, names: list[str]) -> None:
    for name, count in Counter(names).items():
        if count > 1:
            raise CatalogError(f"catalog file '{path}': column '{name}' appears {count} times")
    for name in names:
        if name not in EXPECTED_NAMES:
            raise CatalogError(
                f"catalog file '{path}': unknown column '{name}' (expected: "
                f"{', '.join(c.name for c in COLUMNS)}, season_0..season_6, upstream, item, ship_cost)"
            )
    for name in REQUIRED:
        if name not in names:
            raise CatalogError(f"catalog file '{path}': missing required column '{name}'")
    given = [s for s in SEASON_COLUMNS if s in names]
    if given and len(given) != WEEK:
        missing = next(s for s in SEASON_COLUMNS if s not in names)
        raise CatalogError(
            f"catalog file '{path}': missing column '{missing}' (season_0..season_6 go together)"
        )


def _cast(col: pa.ChunkedArray | pa.Array, target: pa.DataType) -> pa.ChunkedArray | pa.Array:
    """Cast that accepts '2.0' for integers and loses float precision silently, nothing more."""
    src = col.type
    if pa.types.is_floating(target) and (pa.types.is_integer(src) or pa.types.is_floating(src)):
        return pc.cast(col, target, safe=False)
    try:
        return pc.cast(col, target, safe=True)
    except pa.ArrowInvalid:
        if pa.types.is_integer(target) and pa.types.is_string(src):
            return pc.cast(pc.cast(col, pa.float64()), target, safe=True)
        raise


def _first_failing(col: pa.ChunkedArray, target: pa.DataType) -> int:
    """Index of the first element that does not cast (bisection; O(n) casts in total)."""
    lo, hi = 0, len(col)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            _cast(col.slice(lo, mid - lo), target)
            lo = mid
        except pa.ArrowException:
            hi = mid
    return lo


def _expected(name: str, dtype: np.dtype) -> str:
    if name == "demand_dist":
        return f"{' | '.join(DIST_TEXT)} or a code 0..{len(DIST_TEXT) - 1}"
    return "an integer" if np.dtype(dtype).kind == "i" else "a number"


def _to_numpy(
    path: Path, table: pa.Table, name: str, dtype: np.dtype, where: Callable[[int], str]
) -> np.ndarray:
    """Column `name` as a numpy array of `dtype`, or a CatalogError naming the first bad row."""
    col = table.column(name)
    expected = _expected(name, dtype)
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        col = pc.utf8_trim_whitespace(col)
        col = pc.if_else(pc.equal(col, ""), pa.scalar(None, col.type), col)
        if name == "demand_dist":
            code = pc.index_in(pc.utf8_lower(col), value_set=pa.array(DIST_TEXT))
            col = pc.if_else(pc.is_null(code), col, pc.cast(code, pa.string()))
    if col.null_count:
        i = int(np.argmax(pc.is_null(col).to_numpy(zero_copy_only=False)))
        raise CatalogError(f"catalog file '{path}': column '{name}' at {where(i)}: empty, expected {expected}")
    target = pa.from_numpy_dtype(dtype)
    try:
        _cast(col.slice(0, 0), target)
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
        raise CatalogError(
            f"catalog file '{path}': column '{name}' has type {col.type}, expected {expected}"
        ) from None
    try:
        return np.asarray(_cast(col, target).to_numpy(), dtype=dtype)
    except pa.ArrowException:
        i = _first_failing(col, target)
        value = col[i].as_py()
        raise CatalogError(
            f"catalog file '{path}': column '{name}' at {where(i)}: got {value!r}, expected {expected}"
        ) from None


def _catalog_from_table(path: Path, table: pa.Table) -> Catalog:
    n = table.num_rows
    sku_id = _to_numpy(path, table, "sku_id", np.dtype(np.int64), lambda i: f"row {i + 1}")

    def where(i: int) -> str:
        return f"SKU {int(sku_id[i])}"

    arrays: dict[str, np.ndarray] = {"sku_id": sku_id}
    for col in COLUMNS[1:] + NETWORK_COLUMNS + LINK_COLUMNS:
        if col.name in table.column_names:
            arrays[col.name] = _to_numpy(path, table, col.name, np.dtype(col.dtype), where)
        else:
            arrays[col.name] = np.full(n, DEFAULTS[col.name], dtype=col.dtype)
    if SEASON_COLUMNS[0] in table.column_names:
        season = [_to_numpy(path, table, s, np.dtype(np.float32), where) for s in SEASON_COLUMNS]
        arrays["season"] = np.stack(season, axis=1)
    else:
        arrays["season"] = np.full((n, WEEK), SEASON_DEFAULT, dtype=np.float32)
    return Catalog(**arrays)


def _load(path: Path, fmt: str) -> Catalog:
    if fmt == "csv":
        try:
            return _table_to_catalog(path, _read_table(path, fmt))
        except CatalogError:
            # The fast typed CSV read rejects cells like ' 2' or '2.0' and cannot say where a
            # bad one is; the text read converts leniently and names the first bad cell.
            return _table_to_catalog(path, _read_table(path, fmt, as_text=True))
    return _table_to_catalog(path, _read_table(path, fmt))


def _column_names(path: Path, table: pa.Table) -> list[str]:
    """The table's column names; a name that is not UTF-8 (Arrow decodes names lazily) is
    one line naming its position, not a UnicodeDecodeError."""
    names = []
    for i in range(table.num_columns):
        try:
            names.append(table.schema.field(i).name)
        except UnicodeDecodeError:
            raise CatalogError(f"catalog file '{path}': the name of column {i + 1} is not UTF-8 text; "
                               f"expected names such as {', '.join(REQUIRED)}") from None
    return names


def _table_to_catalog(path: Path, table: pa.Table) -> Catalog:
    _check_names(path, _column_names(path, table))
    return _catalog_from_table(path, table)


def read_catalog(path: str | Path | None) -> Catalog:
    """The validated catalog in a Parquet or CSV file; CatalogError (one line) if anything is off."""
    if path is None or str(path) == "":
        raise CatalogError("catalog file: no path given (set catalog.path)")
    p = Path(path)
    fmt = _format(p)
    if not p.is_file():
        raise CatalogError(f"catalog file '{p}': not found")
    catalog = _load(p, fmt)
    try:
        return catalog.validate()
    except CatalogError as exc:
        raise CatalogError(f"catalog file '{p}': {str(exc).removeprefix('catalog ')}") from None
