"""Catalog files: exact round trips, defaults, and one clear error per kind of bad input."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from skurl.catalog import load_catalog
from skurl.catalog.io import DEFAULTS, read_catalog, write_catalog
from skurl.catalog.schema import DIST_CODES, Catalog
from skurl.catalog.synthetic import synthetic_catalog
from skurl.config import load_config
from skurl.errors import CatalogError

HEADER = "sku_id,demand_mean,lead_time,holding_cost,lost_sale_cost"


@pytest.fixture(scope="module")
def cat() -> Catalog:
    return synthetic_catalog(load_config().catalog, 3000)


def _assert_same(a: Catalog, b: Catalog) -> None:
    for f in fields(Catalog):
        x, y = getattr(a, f.name), getattr(b, f.name)
        assert x.dtype == y.dtype, f.name
        assert np.array_equal(x, y), f.name


@pytest.mark.parametrize("name", ["c.parquet", "c.pq", "c.csv", "C.CSV"])
def test_round_trip_is_exact(cat: Catalog, tmp_path: Path, name: str) -> None:
    path = write_catalog(cat, tmp_path / name)
    _assert_same(cat, read_catalog(path))
    assert not list(tmp_path.glob(".*tmp*"))  # the temporary file was renamed


def test_csv_writes_distribution_names(cat: Catalog, tmp_path: Path) -> None:
    text = write_catalog(cat.subset(slice(0, 50)), tmp_path / "c.csv").read_text()
    assert '"negbin"' in text or ",negbin," in text


def test_load_catalog_reads_files_and_truncates(cat: Catalog, tmp_path: Path) -> None:
    path = write_catalog(cat, tmp_path / "c.parquet")
    cfg = load_config(overrides=["catalog.kind=file", f"catalog.path={path}"]).catalog
    _assert_same(load_catalog(cfg), cat)
    _assert_same(load_catalog(cfg, skus=10), cat.subset(slice(0, 10)))


def test_minimal_csv_gets_documented_defaults(tmp_path: Path) -> None:
    path = tmp_path / "min.csv"
    path.write_text(f"{HEADER}\n7,1.5,2,0.5,9\n9, 2 ,3.0,0.5,9\n")
    c = read_catalog(path)
    assert c.sku_id.tolist() == [7, 9]
    assert c.demand_mean.tolist() == [1.5, 2.0] and c.lead_time.tolist() == [2, 3]
    for name, value in DEFAULTS.items():
        assert (getattr(c, name) == value).all(), name
    assert (c.group == -1).all() and (c.dispersion == 1).all()
    assert (c.demand_dist == DIST_CODES["poisson"]).all()
    assert (c.season == 1).all()


def test_distribution_as_text_or_code(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text(f"{HEADER},demand_dist\n0,1,1,1,1,NegBin\n1,1,1,1,1, geometric\n2,1,1,1,1,0\n3,1,1,1,1,2\n")
    assert read_catalog(path).demand_dist.tolist() == [2, 1, 0, 2]
    table = pa.table({"sku_id": [0, 1], "demand_mean": [1.0, 2.0], "lead_time": [1, 1],
                      "holding_cost": [1.0, 1.0], "lost_sale_cost": [1.0, 1.0],
                      "demand_dist": pa.array(["poisson", "negbin"]).dictionary_encode()})
    pq.write_table(table, tmp_path / "d.parquet")
    assert read_catalog(tmp_path / "d.parquet").demand_dist.tolist() == [0, 2]


def test_parquet_with_wider_types_is_narrowed(tmp_path: Path) -> None:
    table = pa.table({"sku_id": pa.array([0, 1], pa.int32()), "demand_mean": [1.25, 2.0],
                      "lead_time": pa.array([3.0, 4.0]), "holding_cost": pa.array([1, 2]),
                      "lost_sale_cost": [1.0, 1.0]})
    pq.write_table(table, tmp_path / "w.parquet")
    c = read_catalog(tmp_path / "w.parquet")
    assert c.lead_time.dtype == np.int32 and c.lead_time.tolist() == [3, 4]
    assert c.holding_cost.dtype == np.float32 and c.holding_cost.tolist() == [1.0, 2.0]


def _csv_error(tmp_path: Path, text: str, name: str = "bad.csv") -> str:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(CatalogError) as info:
        read_catalog(path)
    msg = str(info.value)
    assert "\n" not in msg and str(path) in msg
    return msg


GOOD = "5,1,1,1,1\n"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("12,abc,2,1,9\n", "column 'demand_mean' at SKU 12: got 'abc', expected a number"),
        ("12,1,2.5,1,9\n", "column 'lead_time' at SKU 12: got '2.5', expected an integer"),
        ("12,,2,1,9\n", "column 'demand_mean' at SKU 12: empty"),
        ("x,1,2,1,9\n", "column 'sku_id' at row 2: got 'x', expected an integer"),
        ("12,nan,2,1,9\n", "SKU 12: field 'demand_mean' = nan"),
        ("12,-1,2,1,9\n", "SKU 12: field 'demand_mean' = -1.0"),
        ("12,1,0,1,9\n", "SKU 12: field 'lead_time' = 0"),
        ("12,1,99,1,9\n", "SKU 12: field 'lead_time' = 99"),
        ("12,1,2,-0.5,9\n", "SKU 12: field 'holding_cost' = -0.5"),
        ("12,1,2,1,inf\n", "SKU 12: field 'lost_sale_cost' = inf"),
        ("5,1,2,1,9\n", "SKU 5: field 'sku_id' is duplicated"),
        ("12,1,2,1\n", "not a readable CSV file"),
    ],
)
def test_bad_csv_values_name_the_sku_and_field(tmp_path: Path, body: str, expected: str) -> None:
    assert expected in _csv_error(tmp_path, f"{HEADER}\n{GOOD}{body}")


def test_bad_distribution_name(tmp_path: Path) -> None:
    msg = _csv_error(tmp_path, f"{HEADER},demand_dist\n3,1,1,1,1,normal\n")
    assert "column 'demand_dist' at SKU 3: got 'normal', expected poisson | geometric | negbin" in msg
    msg = _csv_error(tmp_path, f"{HEADER},demand_dist\n3,1,1,1,1,7\n")
    assert "SKU 3: field 'demand_dist' = 7" in msg


def test_column_errors(tmp_path: Path) -> None:
    msg = _csv_error(tmp_path, "sku_id,demand_mean,holding_cost,lost_sale_cost\n0,1,1,1\n")
    assert "missing required column 'lead_time'" in msg
    msg = _csv_error(tmp_path, f"{HEADER},colour\n0,1,1,1,1,red\n")
    assert "unknown column 'colour'" in msg and "expected: sku_id, category" in msg
    msg = _csv_error(tmp_path, f"{HEADER},lead_time\n0,1,1,1,1,1\n")
    assert "column 'lead_time' appears 2 times" in msg
    msg = _csv_error(tmp_path, f"{HEADER},season_0,season_1\n0,1,1,1,1,1,1\n")
    assert "missing column 'season_2'" in msg
    msg = _csv_error(tmp_path, f"{HEADER}\n")
    assert "no SKUs" in msg


def test_bad_season_value(tmp_path: Path) -> None:
    season = ",".join(f"season_{d}" for d in range(7))
    msg = _csv_error(tmp_path, f"{HEADER},{season}\n4,1,1,1,1,1,1,1,-1,1,1,1\n")
    assert "SKU 4: field 'season_3' = -1.0" in msg


def test_file_level_errors(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="not found"):
        read_catalog(tmp_path / "nope.parquet")
    with pytest.raises(CatalogError, match=r"unknown extension '\.txt'"):
        read_catalog(tmp_path / "x.txt")
    with pytest.raises(CatalogError, match="no path given"):
        read_catalog(None)
    (tmp_path / "junk.parquet").write_bytes(b"definitely not parquet" * 10)
    with pytest.raises(CatalogError, match="not a readable Parquet file"):
        read_catalog(tmp_path / "junk.parquet")
    assert "not a readable CSV file" in _csv_error(tmp_path, "", "empty.csv")


def test_parquet_type_and_null_errors(tmp_path: Path) -> None:
    base = {"sku_id": [10, 11], "demand_mean": [1.0, 2.0], "lead_time": [1, 2],
            "holding_cost": [1.0, 1.0], "lost_sale_cost": [1.0, 1.0]}
    cases = [
        ({"demand_mean": pa.array([1.0, None])}, "column 'demand_mean' at SKU 11: empty"),
        ({"lead_time": pa.array(["1", "two"])}, "column 'lead_time' at SKU 11: got 'two'"),
        ({"lead_time": pa.array([1, 2**40])}, "column 'lead_time' at SKU 11: got 1099511627776"),
        ({"price": pa.array([[1.0], [2.0]])}, "column 'price' has type list<"),
    ]
    for change, expected in cases:
        pq.write_table(pa.table({**base, **change}), tmp_path / "t.parquet")
        with pytest.raises(CatalogError) as info:
            read_catalog(tmp_path / "t.parquet")
        assert expected in str(info.value)


def test_first_bad_row_is_found_in_a_long_column(tmp_path: Path) -> None:
    rows = [f"{i},1,2,1,9" for i in range(5000)]
    rows[3217] = "3217,1,2,1,oops"
    rows[4000] = "4000,1,2,1,worse"
    msg = _csv_error(tmp_path, HEADER + "\n" + "\n".join(rows) + "\n")
    assert "column 'lost_sale_cost' at SKU 3217: got 'oops'" in msg


def test_write_errors(cat: Catalog, tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="does not exist"):
        write_catalog(cat, tmp_path / "no" / "dir" / "c.csv")
    with pytest.raises(CatalogError, match="unknown extension"):
        write_catalog(cat, tmp_path / "c.json")
    bad = cat.subset(slice(0, 3))
    bad.demand_mean[1] = np.nan
    with pytest.raises(CatalogError, match="SKU 1: field 'demand_mean'"):
        write_catalog(bad, tmp_path / "c.csv")
