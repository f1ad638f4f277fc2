"""A/B tests: the stratified split, the bootstrap comparison, common random numbers in the
rehearsal, and every bad input (one line, exit 2, no output file)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from skurl.catalog import load_catalog
from skurl.cli import main
from skurl.collect.evaluate import evaluate
from skurl.columns.strata import velocity
from skurl.config import load_config
from skurl.policy.baselines import make_policy
from skurl.serve import ab
from skurl.serve.ab_sim import SplitPolicy, simulate
from skurl.serve.ab_stats import compare


@pytest.fixture(scope="module")
def catalog_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ab") / "catalog.parquet"
    assert main(["catalog", "synth", "--skus", "600", "--out", str(path)]) == 0
    return path


def read_groups_table(path: Path) -> pa.Table:
    return pq.read_table(path)


def test_assign_is_deterministic_balanced_and_in_the_shared_format(catalog_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "groups.parquet"
    assert main(["ab", "assign", "--catalog", str(catalog_file), "--share", "0.3", "--seed", "5",
                 "--out", str(out)]) == 0
    table = read_groups_table(out)
    assert table.schema == ab.GROUPS_SCHEMA  # sku_id int64, group string, stratum string
    groups = ab.read_groups(out)
    strata, code = np.unique(groups.stratum.astype(str), return_inverse=True)
    n = np.bincount(code)
    b = np.bincount(code, weights=groups.is_b)
    assert np.all(np.abs(b - 0.3 * n) < 1.0)  # every stratum within one SKU of the share
    assert abs(groups.is_b.mean() - 0.3) < 0.02
    assert all(s.startswith("category=") and "|velocity=" in s for s in strata)
    # the same split from shuffled rows; another seed splits differently
    from skurl.catalog.io import read_catalog

    catalog = read_catalog(catalog_file)
    shuffled = catalog.subset(np.random.default_rng(0).permutation(len(catalog)))
    again = ab.assign(shuffled, share=0.3, strata=["category", "velocity"], seed=5)
    by_id = dict(zip(again.sku_id.tolist(), again.is_b.tolist(), strict=True))
    assert [by_id[s] for s in groups.sku_id.tolist()] == groups.is_b.tolist()
    other = ab.assign(catalog, share=0.3, strata=["category", "velocity"], seed=6)
    assert (other.is_b != groups.is_b).any()


def test_velocity_is_the_demand_rate_tercile() -> None:
    rate = np.arange(9, dtype=np.float64)
    assert velocity(rate).tolist() == ["low"] * 3 + ["mid"] * 3 + ["high"] * 3


def test_compare_finds_a_known_effect_and_covers_zero_without_one() -> None:
    rng = np.random.default_rng(1)
    n = 3000
    is_b = rng.random(n) < 0.5
    stratum = rng.integers(0, 6, n).astype(str)
    size = rng.gamma(2.0, 2.0, n) * (1 + stratum.astype(int))  # strata differ in scale
    outcomes = {"sku_days": np.full(n, 50.0), "demand": size * 50, "lost": size * 2 + is_b * 5.0,
                "waste": size, "inventory_cost": size * 10, "profit": size * 100 + is_b * 50 * 3.0}
    result = compare(outcomes, is_b, stratum, resamples=400, seed=0)
    profit = result["kpis"]["profit_per_sku_day"]
    assert 0 < profit.low < 3.0 < profit.high  # +3 per SKU-day, detected
    assert result["kpis"]["lost_units_per_sku_day"].low > 0  # +0.1 per SKU-day more lost
    waste = result["kpis"]["waste_units_per_sku_day"]
    assert waste.low < 0 < waste.high  # no effect on waste: the interval covers zero
    assert result["strata_compared"] == 6 and result["skus_left_out"] == 0


def test_effective_units_count_the_units_that_carry_a_kpi() -> None:
    """Kish's effective number of units per group: every unit when they weigh alike, about
    one when one unit holds nearly all of a group's demand (its fill rate is that unit's)."""
    rng = np.random.default_rng(2)
    n = 400
    is_b = np.arange(n) % 2 == 1
    stratum = np.where(np.arange(n) < n // 2, "x", "y")
    demand = rng.uniform(40.0, 60.0, n)
    outcomes = {"sku_days": np.full(n, 30.0), "demand": demand, "lost": demand * 0.1, "waste": np.zeros(n),
                "inventory_cost": np.full(n, 5.0), "profit": rng.normal(100.0, 5.0, n)}
    even = compare(outcomes, is_b, stratum, resamples=100)["kpis"]
    for kpi in ("profit_per_sku_day", "fill_rate", "inventory_cost_per_sku_day"):  # units of like weight
        assert 0.95 * n / 2 < even[kpi].effective_units <= n / 2 and not even[kpi].few_units, kpi
    assert even["inventory_cost_per_sku_day"].effective_units == pytest.approx(n / 2)  # all equal
    assert even["waste_units_per_sku_day"].effective_units == pytest.approx(n / 2)  # no waste: 0 in any split
    demand = demand.copy()
    demand[0] = 1e6  # one unit of group A carries its demand
    heavy = compare({**outcomes, "demand": demand, "lost": demand * 0.1}, is_b, stratum, resamples=100)["kpis"]
    assert heavy["fill_rate"].effective_units < 1.1 and heavy["fill_rate"].few_units
    assert heavy["fill_rate"].to_json()["effective_units"] == heavy["fill_rate"].effective_units
    assert not heavy["profit_per_sku_day"].few_units


def test_rehearsal_gives_each_group_the_outcomes_of_its_own_policy() -> None:
    """Common random numbers: without substitution a SKU's outcome depends only on its own
    policy, so the split simulation equals each policy's own evaluation SKU by SKU."""
    cfg = load_config(None, ["catalog.kind=uniform", "catalog.skus=60", "sim.substitution=false"])
    catalog = load_catalog(cfg.catalog)
    a = make_policy("base-stock", catalog, cfg.sim)
    b = make_policy("constant", catalog, cfg.sim)
    is_b = ab.assign(catalog, share=0.5, strata=[], seed=1).is_b
    table, failed = simulate(catalog, cfg.sim, SplitPolicy(a, b, is_b), days=20, warmup=5, seed=3, episodes=2)
    assert not failed.any()
    profit = table.column("profit").to_numpy() / table.column("sku_days").to_numpy()
    for policy, mask in ((a, ~is_b), (b, is_b)):
        alone = evaluate(catalog, dataclasses.replace(cfg.sim), policy, days=20, warmup=5, seed=3, episodes=2)
        np.testing.assert_allclose(profit[mask], alone.per_sku_profit[mask], rtol=1e-12)


def error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    return err


@pytest.mark.parametrize(("flags", "expected"), [
    (["--strata", "category,colour"], "unknown strata column 'colour'"),
    (["--share", "0"], "--share 0.0: expected the share of SKUs in group B, a number in (0, 1)"),
    (["--share", "1.5"], "--share 1.5"),
])
def test_assign_bad_input(flags: list[str], expected: str, catalog_file: Path, tmp_path: Path,
                          capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "groups.parquet"
    assert main(["ab", "assign", "--catalog", str(catalog_file), *flags, "--out", str(out)]) == 2
    assert expected in error_line(capsys)
    assert not out.exists()


@pytest.fixture
def groups_and_outcomes(catalog_file: Path, tmp_path: Path) -> tuple[Path, Path, pa.Table]:
    groups = tmp_path / "groups.parquet"
    assert main(["ab", "assign", "--catalog", str(catalog_file), "--seed", "2", "--out", str(groups)]) == 0
    ids = read_groups_table(groups).column("sku_id").to_numpy()
    n = ids.size
    outcomes = pa.table({"sku_id": ids, "sku_days": np.full(n, 30), "demand": np.full(n, 60.0),
                         "lost": np.full(n, 3.0), "waste": np.ones(n), "inventory_cost": np.full(n, 9.0),
                         "profit": np.linspace(-5, 50, n)})
    path = tmp_path / "outcomes.parquet"
    pq.write_table(outcomes, path)
    return groups, path, outcomes


def test_report_prints_the_kpis(groups_and_outcomes: tuple[Path, Path, pa.Table],
                                capsys: pytest.CaptureFixture[str]) -> None:
    groups, outcomes, _ = groups_and_outcomes
    assert main(["ab", "report", "--groups", str(groups), "--outcomes", str(outcomes), "--resamples", "200"]) == 0
    out = capsys.readouterr().out
    for kpi in ("fill_rate", "lost_units_per_sku_day", "waste_units_per_sku_day", "inventory_cost_per_sku_day",
                "profit_per_sku_day"):
        assert kpi in out
    assert "effective units" in out


@pytest.mark.parametrize(("change", "expected"), [
    ("drop_outcome_column", "missing column 'profit'"),
    ("drop_groups_column", "missing column 'group'"),
    ("extra_outcome_sku", "is in no group"),
    ("missing_outcome_sku", "has no outcome"),
    ("bad_group_value", "group 'C'; expected 'A' or 'B'"),
    ("nan_outcome", "expected a finite number"),
])
def test_report_bad_input(change: str, expected: str, groups_and_outcomes: tuple[Path, Path, pa.Table],
                          capsys: pytest.CaptureFixture[str]) -> None:
    groups, outcomes, table = groups_and_outcomes
    gtable = read_groups_table(groups)
    if change == "drop_outcome_column":
        table = table.drop_columns(["profit"])
    elif change == "drop_groups_column":
        gtable = gtable.drop_columns(["group"])
    elif change == "extra_outcome_sku":
        extra = table.slice(0, 1).set_column(0, "sku_id", pa.array([10**9], pa.int64()))
        table = pa.concat_tables([table, extra])
    elif change == "missing_outcome_sku":
        table = table.slice(1)
    elif change == "bad_group_value":
        gtable = gtable.set_column(1, "group", pa.array(["C"] + ["A"] * (gtable.num_rows - 1)))
    elif change == "nan_outcome":
        profit = table.column("profit").to_numpy().copy()
        profit[3] = np.nan
        table = table.set_column(table.schema.get_field_index("profit"), "profit", pa.array(profit))
    pq.write_table(table, outcomes)
    pq.write_table(gtable, groups)
    assert main(["ab", "report", "--groups", str(groups), "--outcomes", str(outcomes)]) == 2
    assert expected in error_line(capsys)


def test_simulate_refuses_skus_outside_the_catalog(groups_and_outcomes: tuple[Path, Path, pa.Table],
                                                   catalog_file: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    groups, _, _ = groups_and_outcomes
    gtable = read_groups_table(groups)
    pq.write_table(gtable.set_column(0, "sku_id", pa.array(gtable.column("sku_id").to_numpy() + 10**6)), groups)
    out = tmp_path / "out.parquet"
    argv = ["ab", "simulate", "--set", "catalog.kind=file", "--set", f"catalog.path={catalog_file}",
            "--groups", str(groups), "--policy-b", "base-stock", "--days", "5", "--out", str(out)]
    assert main(argv) == 2
    assert "is not in the catalog" in error_line(capsys)
    assert not out.exists()
