"""Supply-network columns of the catalog (docs/networks.md): validation, generators, files."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from skurl.catalog import load_catalog
from skurl.catalog.io import read_catalog, write_catalog
from skurl.catalog.network import echelons
from skurl.catalog.schema import COLUMNS, Catalog, catalog_digest
from skurl.catalog.uniform import uniform_catalog
from skurl.cli import main
from skurl.config import CatalogConfig, load_config
from skurl.errors import CatalogError


def _chain(upstream: list[int], item: list[int] | None = None) -> Catalog:
    base = uniform_catalog(CatalogConfig(kind="uniform", skus=len(upstream)))
    return dataclasses.replace(base, upstream=np.array(upstream),
                               item=None if item is None else np.array(item))


@pytest.mark.parametrize(("upstream", "item", "sku", "words"), [
    ([-1, 0, 7], None, 2, "field 'upstream' = 7, expected the sku_id"),
    ([1, 2, 0], None, 0, "field 'upstream' forms a cycle (0 -> 1 -> 2 -> 0)"),
    ([-1, 1], None, 1, "forms a cycle (1 -> 1)"),
    ([1, 2, 3, -1], None, 0, "more than 3 locations"),
    ([-1, 0, -1, 2], [5, 5, 6, 5], 3, "field 'upstream' = 2 is a location of item 6"),
])
def test_bad_networks_are_one_line_errors(upstream, item, sku, words):
    with pytest.raises(CatalogError) as err:
        _chain(upstream, item).validate()
    text = str(err.value)
    assert "\n" not in text and f"SKU {sku}:" in text and words in text, text


def test_network_rows_outside_substitution_groups():
    cat = _chain([-1, 0, -1])
    cat.group[1] = 4
    with pytest.raises(CatalogError, match="SKU 1: field 'group' = 4"):
        cat.validate()


def test_chain_of_three_and_lead_zero_below_an_upstream():
    cat = _chain([1, 2, -1])
    cat.lead_time[0] = 0
    parent, root, echelon = echelons(cat.validate())
    assert parent.tolist() == [1, 2, -1] and root.tolist() == [2, 2, 2] and echelon.tolist() == [1, 2, 3]
    cat.lead_time[2] = 0  # the outside supplier's link stays >= 1
    with pytest.raises(CatalogError, match="SKU 2: field 'lead_time' = 0"):
        cat.validate()


def test_file_round_trip_and_bad_file_exits_2(tmp_path: Path, capsys):
    cat = _chain([1, 2, -1, -1, 3]).validate()
    out = write_catalog(cat, tmp_path / "net.csv")
    back = read_catalog(out)
    assert back.upstream.tolist() == [1, 2, -1, -1, 3] and catalog_digest(back) == catalog_digest(cat)
    lines = out.read_text().splitlines()
    col = lines[0].replace('"', "").split(",").index("upstream")
    row = lines[2].split(",")
    row[col] = "0"  # sku 1 -> 0 while 0 -> 1: a cycle
    lines[2] = ",".join(row)
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join(lines) + "\n")
    assert main(["catalog", "validate", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "SKU 0: field 'upstream' forms a cycle" in err, err
    with pytest.raises(CatalogError):
        write_catalog(dataclasses.replace(cat, upstream=np.array([1, 0, -1, -1, 3])), tmp_path / "no.csv")
    assert not (tmp_path / "no.csv").exists()


def test_network_free_catalogs_unchanged():
    cat = load_catalog(load_config(None, ["catalog.skus=300"]).catalog)
    assert not cat.has_network and "upstream" not in cat.columns() and "ship_cost" not in cat.columns()
    assert not cat.ship_cost.any()
    import hashlib
    h = hashlib.sha256()  # the digest as it was before the network columns existed
    for f in dataclasses.fields(cat):
        if f.name in {c.name for c in COLUMNS} | {"season"}:
            h.update(f.name.encode())
            h.update(np.ascontiguousarray(getattr(cat, f.name)).tobytes())
    assert catalog_digest(cat) == h.hexdigest()


@pytest.mark.parametrize("skus", [3, 4, 7, 50, 1001])
def test_dc_network_generator(skus):
    cfg = load_config(None, [f"catalog.skus={skus}", "catalog.synthetic.network=dc", "catalog.seed=4"])
    cat = load_catalog(cfg.catalog)
    flat = load_catalog(load_config(None, [f"catalog.skus={skus}", "catalog.seed=4"]).catalog)
    assert len(cat) == skus
    parent, root, echelon = echelons(cat)
    dc = parent < 0
    stores = np.bincount(root[~dc], minlength=skus)[dc]
    assert stores.min() >= 2 and stores.max() <= 10 and echelon.max() == 2
    np.testing.assert_allclose(cat.demand_mean[dc], np.bincount(root, np.where(dc, 0, cat.demand_mean), minlength=skus)[dc],
                               rtol=1e-5)
    np.testing.assert_array_equal(cat.demand_mean[~dc], flat.demand_mean[~dc])  # store demand as today
    assert (cat.price[dc] == 0).all() and (cat.lead_time[~dc] <= 3).all()
    from skurl.catalog.dc_network import SHIP_COST_SHARE
    assert (cat.ship_cost[dc] == 0).all()  # the supplier's link: its purchase cost covers it
    np.testing.assert_array_equal(cat.ship_cost[~dc], np.float32(SHIP_COST_SHARE * cat.unit_cost[~dc]))


def test_ship_cost_column_in_files_only_when_set(tmp_path: Path, capsys):
    cat = _chain([1, 2, -1, -1, 3]).validate()
    back = read_catalog(write_catalog(cat, tmp_path / "a.csv"))
    assert "ship_cost" not in (tmp_path / "a.csv").read_text().splitlines()[0] and not back.ship_cost.any()
    costly = dataclasses.replace(cat, ship_cost=np.array([0.5, 0.25, 0, 0, 1.5]))
    back = read_catalog(write_catalog(costly, tmp_path / "b.parquet"))
    assert back.ship_cost.tolist() == [0.5, 0.25, 0, 0, 1.5]
    assert catalog_digest(back) == catalog_digest(costly) != catalog_digest(cat)
    text = (tmp_path / "a.csv").read_text().splitlines()
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join([text[0] + ",ship_cost"] + [row + ",-1" for row in text[1:]]) + "\n")
    assert main(["catalog", "validate", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "field 'ship_cost' = -1.0" in err, err


def test_dc_network_too_small_is_a_config_error(capsys, tmp_path: Path):
    out = tmp_path / "c.csv"
    code = main(["catalog", "synth", "--skus", "2", "--out", str(out), "--set", "catalog.synthetic.network=dc"])
    assert code == 2 and not out.exists()
    assert "catalog.skus" in capsys.readouterr().err


def test_serial_generator():
    cfg = load_config(None, ["catalog.kind=serial", "catalog.skus=4", "catalog.serial.lead_times=[0,2,1]",
                             "catalog.serial.holding=[3,2,1]", "catalog.lost_sale_cost=19"])
    cat = load_catalog(cfg.catalog)
    assert len(cat) == 12
    _, root, echelon = echelons(cat)
    assert echelon.tolist() == [1, 2, 3] * 4 and cat.lead_time.tolist() == [0, 2, 1] * 4
    assert cat.holding_cost.tolist() == [3, 2, 1] * 4 and cat.lost_sale_cost.tolist() == [19, 0, 0] * 4
    assert np.unique(root).shape[0] == 4


@pytest.mark.parametrize("method", ["equal", "round_robin_cost", "lpt"])
def test_a_network_stays_in_one_shard(method):
    from skurl.catalog.partition import partition

    cat = load_catalog(load_config(None, ["catalog.skus=400", "catalog.synthetic.network=dc",
                                          "catalog.seed=2"]).catalog)
    serial = load_catalog(load_config(None, ["catalog.kind=serial", "catalog.skus=9",
                                             "catalog.serial.lead_times=[1,1,1]",
                                             "catalog.serial.holding=[3,2,1]"]).catalog)
    for c in (cat, serial):
        root = echelons(c)[1]
        shards = partition(c, 4, method)
        shard_of = np.empty(len(c), np.int64)
        for s, rows in enumerate(shards):
            shard_of[rows] = s
        assert sorted(np.concatenate(shards).tolist()) == list(range(len(c)))
        assert (shard_of == shard_of[root]).all()
        assert len({int(shard_of[r]) for r in np.unique(root)}) == 4  # networks do spread
