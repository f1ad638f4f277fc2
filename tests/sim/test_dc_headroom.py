"""benchmarks/dc_headroom.py (docs/networks.md, "dc networks: headroom"): the relaxation it
solves is the network's stores supplied from outside at their own link, and on a small dc
catalog its optimum lies above the tuned echelon base-stock on the same demand draws."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from benchmark_module import load_benchmark

from skurl.catalog import load_catalog
from skurl.catalog.network import echelons
from skurl.config import load_config

headroom = load_benchmark("dc_headroom")
SMALL = ["catalog.skus=150", "eval.days=40", "eval.warmup=10"]


def test_the_relaxed_stores_are_the_stores_bought_from_outside_at_their_link() -> None:
    cfg = load_config(str(headroom.DEFAULT_CONFIG), SMALL)
    cat = load_catalog(cfg.catalog)
    parent, root, echelon = echelons(cat)
    stores, roots, relaxed = headroom.relaxed_stores(cat)
    assert stores.size == int(((echelon == 1) & (parent >= 0)).sum()) > 0
    np.testing.assert_array_equal(relaxed.sku_id, cat.sku_id[stores])  # the same demand draws
    np.testing.assert_array_equal(roots, root[stores])
    assert (relaxed.upstream == -1).all() and not relaxed.has_network
    np.testing.assert_array_equal(relaxed.lead_time, cat.lead_time[stores])
    np.testing.assert_allclose(relaxed.unit_cost, cat.unit_cost[stores] + cat.ship_cost[stores])
    assert (relaxed.ship_cost == 0).all() and (relaxed.delay_prob == 0).all()
    np.testing.assert_array_equal(relaxed.holding_cost, cat.holding_cost[stores])


def test_per_network_sums_the_rows_of_the_kept_networks() -> None:
    roots = np.array([7, 3, 7, 5, 3, 9])
    values = np.array([1.0, 2.0, 4.0, 8.0, 16.0, 32.0])
    keep = headroom.covered_networks(roots, np.array([True, True, True, False, True, True]))
    np.testing.assert_array_equal(keep, [3, 7, 9])  # network 5 has a store left unsolved
    np.testing.assert_array_equal(headroom.per_network(values, roots, keep), [18.0, 5.0, 32.0])


def test_the_relaxed_optimum_lies_above_tuned_echelon_base_stock(tmp_path: Path) -> None:
    out = tmp_path / "h.json"
    sets = [a for s in SMALL for a in ("--set", s)]
    assert headroom.main(["--catalog-seeds", "0", "--episodes", "2", *sets, "--json", str(out)]) == 0
    seed = json.loads(out.read_text())["seeds"][0]
    assert 0 < seed["networks_compared"] <= seed["networks"]
    assert 0 < seed["compared_profit_share"] <= 1
    gap = seed["gaps"]["echelon-base-stock"]["as eval counts"]
    # Fixed seeds: deterministic. The bound leads by more than its paired noise.
    assert gap["gap_per_network_day"] > 2 * gap["gap_se"] > 0
    whole = seed["whole_catalog"]  # every network: the DP's bound where it has one, else all demand sold
    assert whole["networks"] == seed["networks"] and whole["dp_tighter"] <= seed["networks_compared"]
    assert whole["echelon-base-stock"]["bound_lead_pct"] > 0
    parts = seed["per_network_day"]["echelon-base-stock"]
    assert parts["dc purchase_cost"] > 0 and parts["purchase_cost"] == 0  # the DC buys, stores do not


def test_a_catalog_without_networks_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(headroom.UserError, match="no networks"):
        headroom.main(["--catalog-seeds", "0", "--set", "catalog.synthetic.network=none", *[
            a for s in SMALL for a in ("--set", s)]])
