"""A/B tests on catalogs with supply networks: the split by whole networks (no network split,
balanced within strata by networks, deterministic, single-location splits as before), the
rehearsal's common random numbers per network, and the report's unit, the network."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from skurl.catalog import load_catalog
from skurl.catalog.network import echelons
from skurl.catalog.schema import Catalog
from skurl.cli import main
from skurl.collect.evaluate import evaluate
from skurl.config import load_config
from skurl.policy.baselines import make_policy
from skurl.serve import ab
from skurl.serve.ab_sim import SplitPolicy, simulate
from skurl.serve.ab_stats import compare

DC = ["catalog.synthetic.network=dc"]


@pytest.fixture(scope="module")
def dc_catalog() -> Catalog:
    return load_catalog(load_config(None, [*DC, "catalog.skus=600"]).catalog)


def roots(catalog: Catalog) -> np.ndarray:
    _, root, _ = echelons(catalog)
    return catalog.sku_id[root]


def test_assign_splits_whole_networks_balanced_within_strata(dc_catalog: Catalog) -> None:
    groups = ab.assign(dc_catalog, share=0.4, strata=["category", "velocity"], seed=5)
    assert groups.table().schema == ab.NETWORK_GROUPS_SCHEMA
    np.testing.assert_array_equal(groups.network, roots(dc_catalog))
    assert not ab.split_networks(groups.network, groups.is_b).any()
    nets, first = np.unique(groups.network, return_index=True)
    for column in (groups.stratum, groups.is_b):  # one stratum and one group a network
        _, code = np.unique(groups.network, return_inverse=True)
        assert (np.asarray(column)[first][code.ravel()] == np.asarray(column)).all()
    strata, code = np.unique(groups.stratum[first].astype(str), return_inverse=True)
    n = np.bincount(code)
    b = np.bincount(code, weights=groups.is_b[first])
    assert np.all(np.abs(b - 0.4 * n) < 1.0)  # each stratum within one network of the share
    assert abs(groups.is_b[first].mean() - 0.4) < 1.0 / np.sqrt(nets.size)
    assert all(s.startswith("category=") and "|velocity=" in s for s in strata)


def test_network_strata_are_the_roots_columns_and_the_stores_demand(dc_catalog: Catalog) -> None:
    units = ab.network_units(dc_catalog, roots(dc_catalog))
    root_rows = np.flatnonzero(dc_catalog.upstream < 0)
    np.testing.assert_array_equal(units.sku_id, np.sort(dc_catalog.sku_id[root_rows]))
    stores = dc_catalog.upstream >= 0  # dc networks: a DC and its stores
    demand = {int(r): float(dc_catalog.demand_mean[stores & (dc_catalog.upstream == r)].sum())
              for r in units.sku_id}
    np.testing.assert_allclose(units.demand_mean, [demand[int(r)] for r in units.sku_id], rtol=1e-6)


def test_assign_by_network_is_deterministic_and_independent_of_row_order(dc_catalog: Catalog) -> None:
    groups = ab.assign(dc_catalog, share=0.5, strata=["category", "velocity"], seed=9)
    shuffled = dc_catalog.subset(np.random.default_rng(0).permutation(len(dc_catalog)))
    again = ab.assign(shuffled, share=0.5, strata=["category", "velocity"], seed=9)
    by_id = dict(zip(again.sku_id.tolist(), again.is_b.tolist(), strict=True))
    assert [by_id[s] for s in groups.sku_id.tolist()] == groups.is_b.tolist()
    other = ab.assign(dc_catalog, share=0.5, strata=["category", "velocity"], seed=10)
    assert (other.is_b != groups.is_b).any()


def test_single_location_split_is_unchanged(tmp_path: Path) -> None:
    """The split of a network-free catalog is today's bit for bit (digests of the code
    before networks were split whole) and its file has no network column."""
    path = tmp_path / "catalog.parquet"
    assert main(["catalog", "synth", "--skus", "600", "--out", str(path)]) == 0
    from skurl.catalog.io import read_catalog

    catalog = read_catalog(path)
    for strata, digest, n_b in ((["category", "velocity"], "efdc3014c2ce77b9", 177), ([], "796387f648b98204", 180)):
        groups = ab.assign(catalog, share=0.3, strata=strata, seed=5)
        text = groups.is_b.tobytes() + "|".join(groups.stratum.astype(str)).encode()
        assert (hashlib.sha256(text).hexdigest()[:16], int(groups.is_b.sum())) == (digest, n_b)
        assert groups.network is None and groups.table().schema == ab.GROUPS_SCHEMA


def test_rehearsal_on_networks_gives_each_network_its_own_arms_outcomes() -> None:
    """Networks share nothing, and a network is in one group: the split simulation equals
    each network baseline's own evaluation row by row; upstream rows report no customers."""
    cfg = load_config(None, [*DC, "catalog.skus=60"])
    catalog = load_catalog(cfg.catalog)
    a = make_policy("installation-base-stock", catalog, cfg.sim)
    b = make_policy("echelon-base-stock", catalog, cfg.sim)
    groups = ab.assign(catalog, share=0.5, strata=[], seed=1)
    table, failed = simulate(catalog, cfg.sim, SplitPolicy(a, b, groups.is_b), days=15, warmup=5, seed=3,
                              pre_period=True)
    assert not failed.any()
    profit = table.column("profit").to_numpy() / table.column("sku_days").to_numpy()
    for policy, mask in ((a, ~groups.is_b), (b, groups.is_b)):
        alone = evaluate(catalog, cfg.sim, policy, days=15, warmup=5, seed=3, episodes=1)
        np.testing.assert_allclose(profit[mask], alone.per_sku_profit[mask], rtol=1e-12)
    upstream = np.isin(catalog.sku_id, catalog.upstream)
    for name in ("demand", "sales", "lost", "pre_demand", "pre_lost"):
        assert (table.column(name).to_numpy()[upstream] == 0).all()
    assert table.column("demand").to_numpy()[~upstream].sum() > 0


def network_outcomes(seed: int = 0) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
    """Rows of 300 networks of 6 locations whose profit is mostly the network's (a shared
    shock), B +0.5 per SKU-day."""
    rng = np.random.default_rng(seed)
    nets = 300
    network = np.repeat(np.arange(nets) * 10, 6)
    net_b = rng.random(nets) < 0.5
    is_b = np.repeat(net_b, 6)
    shock = np.repeat(rng.normal(0, 5.0, nets), 6)
    n = network.size
    days = np.full(n, 30.0)
    outcomes = {"sku_days": days, "demand": np.full(n, 60.0), "lost": rng.poisson(3.0, n).astype(float),
                "waste": np.ones(n), "inventory_cost": np.full(n, 9.0),
                "profit": days * (10 + shock + rng.normal(0, 0.5, n) + 0.5 * is_b)}
    return outcomes, is_b, np.full(n, "all", object), network


def test_report_resamples_networks_not_rows() -> None:
    outcomes, is_b, stratum, network = network_outcomes()
    by_network = compare(outcomes, is_b, stratum, resamples=400, seed=0, network=network)
    by_row = compare(outcomes, is_b, stratum, resamples=400, seed=0)
    assert by_network["networks"] == {"A": int((~is_b[::6]).sum()), "B": int(is_b[::6].sum())}
    assert by_network["skus"] == by_row["skus"]
    profit, naive = by_network["kpis"]["profit_per_sku_day"], by_row["kpis"]["profit_per_sku_day"]
    assert profit.diff == pytest.approx(naive.diff)  # equal networks: the same point estimate
    # rows of a network move together: the row bootstrap's interval is about sqrt(6) too narrow
    assert 2.0 < (profit.high - profit.low) / (naive.high - naive.low) < 3.0
    assert profit.low < 0.5 < profit.high


def test_report_takes_networks_from_the_groups_file_and_refuses_a_split(tmp_path: Path, capsys) -> None:
    outcomes, is_b, stratum, network = network_outcomes(1)
    ids = np.arange(network.size, dtype=np.int64)
    groups, out = tmp_path / "groups.parquet", tmp_path / "outcomes.parquet"
    ab.write_table(ab.Groups(ids, is_b, stratum, network).table(), groups)
    pq.write_table(pa.table({"sku_id": ids, **outcomes}), out)
    assert main(["ab", "report", "--groups", str(groups), "--outcomes", str(out), "--resamples", "200",
                 "--json"]) == 0
    assert '"networks": {' in capsys.readouterr().out
    split = is_b.copy()
    split[1] = not split[1]
    ab.write_table(ab.Groups(ids, split, stratum, network).table(), groups)
    assert main(["ab", "report", "--groups", str(groups), "--outcomes", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"network {network[1]} is split" in err, err


@pytest.mark.parametrize(("change", "expected"), [
    ("split", "is split: SKU"),
    ("drop_store", "is in no group"),
    ("wrong_network", "column 'network' = "),
])
def test_simulate_refuses_groups_of_broken_networks(change: str, expected: str, tmp_path: Path, capsys) -> None:
    catalog_args = ["--set", DC[0], "--set", "catalog.skus=40"]
    groups, out = tmp_path / "groups.parquet", tmp_path / "outcomes.parquet"
    assert main(["ab", "assign", *catalog_args, "--seed", "3", "--out", str(groups)]) == 0
    assert "networks (A" in capsys.readouterr().out
    table = pq.read_table(groups)
    network = table.column("network").to_numpy()
    store = int(np.flatnonzero(network != table.column("sku_id").to_numpy())[0])  # a row below its root
    if change == "split":  # a hand-made file without the network column
        group = table.column("group").to_numpy(zero_copy_only=False).copy()
        group[store] = "A" if group[store] == "B" else "B"
        table = table.set_column(1, "group", pa.array(group)).drop_columns(["network"])
    elif change == "drop_store":
        table = table.filter(pa.array(np.arange(table.num_rows) != store))
    else:
        other = network.copy()
        other[network == network[store]] = -5  # the network renamed: still one group
        table = table.set_column(3, "network", pa.array(other))
    pq.write_table(table, groups)
    argv = ["ab", "simulate", *catalog_args, "--groups", str(groups), "--policy-a", "installation-base-stock",
            "--policy-b", "echelon-base-stock", "--no-tune", "--days", "5", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err, err
    assert not out.exists()


def test_assign_simulate_report_on_a_network_catalog(tmp_path: Path, capsys) -> None:
    catalog_args = ["--set", DC[0], "--set", "catalog.skus=120"]
    groups, out = tmp_path / "groups.parquet", tmp_path / "outcomes.parquet"
    assert main(["ab", "assign", *catalog_args, "--strata", "", "--seed", "3", "--out", str(groups)]) == 0
    assert main(["ab", "simulate", *catalog_args, "--groups", str(groups), "--policy-a", "installation-base-stock",
                 "--policy-b", "echelon-base-stock", "--no-tune", "--days", "10", "--warmup", "3",
                 "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["ab", "report", "--groups", str(groups), "--outcomes", str(out), "--resamples", "200",
                 "--min-cell", "2"]) == 0
    text = capsys.readouterr().out
    assert "networks)" in text and "resamples of whole networks within strata" in text
    assert "fewer than 30 effective networks" in text  # 19 networks: every KPI is flagged


def test_a_network_baseline_arm_needs_a_network_snapshot() -> None:
    from types import SimpleNamespace

    from skurl.errors import UserError
    from skurl.serve.recommend import check_baseline_fits

    plain = SimpleNamespace(has_network=False)
    with pytest.raises(UserError, match="echelon-base-stock: a baseline of supply networks; the snapshot has none"):
        check_baseline_fits("echelon-base-stock", plain)  # type: ignore[arg-type]
    check_baseline_fits("forecast-base-stock", plain)  # type: ignore[arg-type]
