"""`skurl catalog synth|describe|validate` on good input."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

from skurl.catalog.io import read_catalog
from skurl.catalog.schema import Catalog
from skurl.catalog.synthetic import synthetic_catalog
from skurl.cli import main
from skurl.commands.catalog_cmd import summarize
from skurl.config import load_config


@pytest.mark.parametrize("name", ["c.parquet", "c.csv"])
def test_synth_writes_the_generator_output(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    out = tmp_path / name
    assert main(["catalog", "synth", "--skus", "2000", "--seed", "5", "--out", str(out)]) == 0
    line = capsys.readouterr().out
    assert line.count("\n") == 1 and line.startswith(f"wrote 2,000 SKUs to {out}") and "seed 5" in line
    expected = synthetic_catalog(load_config(overrides=["catalog.seed=5"]).catalog, 2000)
    got = read_catalog(out)
    for f in fields(Catalog):
        assert np.array_equal(getattr(got, f.name), getattr(expected, f.name)), f.name


def test_synth_takes_config_knobs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "c.parquet"
    args = ["catalog", "synth", "--out", str(out), "--set", "catalog.skus=300",
            "--set", "catalog.synthetic.perishable_share=0.5"]
    assert main(args) == 0
    cat = read_catalog(out)
    assert len(cat) == 300 and (cat.shelf_life > 0).mean() == 0.5
    assert "50% perishable" in capsys.readouterr().out


def test_validate_prints_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "c.csv"
    main(["catalog", "synth", "--skus", "123", "--out", str(out)])
    capsys.readouterr()
    assert main(["catalog", "validate", str(out)]) == 0
    assert capsys.readouterr().out.startswith("ok: 123 SKUs")


def test_describe_file_and_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "c.parquet"
    main(["catalog", "synth", "--skus", "1000", "--out", str(out)])
    capsys.readouterr()
    assert main(["catalog", "describe", str(out)]) == 0
    table = capsys.readouterr().out
    for label in ("SKUs", "1,000", "demand/day p10", "lead time", "perishable", "substitution groups", "promoted"):
        assert label in table
    assert main(["catalog", "describe", "--json", "--set", "catalog.kind=uniform", "--set", "catalog.skus=40"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["skus"] == 40 and s["demand_median"] == 5.0 and s["groups"] == 0
    assert s["lead_time_max"] == 2 and s["perishable_share"] == 0.0


def test_summarize_figures() -> None:
    cat = synthetic_catalog(load_config().catalog, 5000)
    s = summarize(cat)
    assert s["skus"] == 5000 and s["categories"] == 20
    assert s["demand_p10"] < s["demand_median"] < s["demand_p90"] < s["demand_p99"] <= s["demand_max"]
    assert s["perishable_share"] == 0.2 and s["promo_share"] == 0.3
    assert s["groups"] == np.unique(cat.group[cat.group >= 0]).shape[0]
    assert sum(s["dist_shares"].values()) == pytest.approx(1.0)
    assert 2 <= s["shelf_life_median"] <= 28
