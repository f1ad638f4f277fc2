"""CUPED in `skurl ab report` (serve/ab_cuped.py): unbiased (its intervals cover a known
effect as often as the plain ones), much narrower when the pre-period predicts the SKUs'
spread; `ab simulate` writes the pre-period as policy A's own evaluation on the next seed;
a partial pre-period is one line, exit 2."""

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
from skurl.config import load_config
from skurl.policy.baselines import make_policy
from skurl.serve import ab
from skurl.serve.ab_cuped import PRE_COLUMNS
from skurl.serve.ab_sim import SplitPolicy, simulate
from skurl.serve.ab_stats import compare

DAYS = 40


def fake_test(rng: np.random.Generator, n: int, effect: float) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """SKUs with fat-tailed sizes; the test and pre-period figures share the size, B adds
    `effect` profit per SKU-day."""
    stratum = rng.integers(0, 4, n).astype(str)
    is_b = np.zeros(n, dtype=bool)
    for s in np.unique(stratum):  # half of each stratum, at random
        idx = np.flatnonzero(stratum == s)
        is_b[rng.permutation(idx)[: idx.size // 2]] = True
    size = rng.lognormal(0.0, 1.2, n)

    def period(extra: np.ndarray) -> dict[str, np.ndarray]:
        demand = rng.poisson(size * DAYS * 4).astype(float)
        lost = rng.binomial(demand.astype(np.int64), 0.05).astype(float)
        return {"sku_days": np.full(n, float(DAYS)), "demand": demand, "lost": lost,
                "waste": rng.poisson(size * DAYS * 0.2).astype(float),
                "inventory_cost": size * DAYS * rng.gamma(20.0, 0.05, n),
                "profit": (demand - lost) * 2.0 - size * DAYS + extra * DAYS}

    test = period(effect * is_b)
    pre = period(np.zeros(n))
    return {**test, **{f"pre_{k}": v for k, v in pre.items()}}, is_b, stratum


def test_cuped_covers_a_known_effect_as_often_as_plain_with_a_narrower_interval() -> None:
    rng = np.random.default_rng(3)
    covered = {"kpis": 0, "kpis_cuped": 0}
    widths = {"kpis": [], "kpis_cuped": []}
    reps = 60
    for r in range(reps):
        outcomes, is_b, stratum = fake_test(rng, 800, effect=0.5)
        result = compare(outcomes, is_b, stratum, resamples=300, seed=r)
        for key in covered:
            kpi = result[key]["profit_per_sku_day"]
            covered[key] += kpi.low <= 0.5 <= kpi.high
            widths[key].append(kpi.high - kpi.low)
    assert covered["kpis"] >= 0.85 * reps and covered["kpis_cuped"] >= 0.85 * reps, covered
    assert np.median(widths["kpis_cuped"]) < 0.5 * np.median(widths["kpis"])  # most spread is the SKUs' size
    assert set(result["cuped_theta"]) == {"demand", "lost", "waste", "inventory_cost", "profit", "served"}


def test_without_pre_period_columns_there_is_no_cuped_estimate() -> None:
    outcomes, is_b, stratum = fake_test(np.random.default_rng(0), 200, effect=0.0)
    plain = {k: v for k, v in outcomes.items() if not k.startswith("pre_")}
    assert "kpis_cuped" not in compare(plain, is_b, stratum, resamples=100)


def test_simulate_pre_period_is_policy_a_alone_on_the_next_seed() -> None:
    cfg = load_config(None, ["catalog.kind=uniform", "catalog.skus=40", "sim.substitution=false"])
    catalog = load_catalog(cfg.catalog)
    a = make_policy("base-stock", catalog, cfg.sim)
    b = make_policy("constant", catalog, cfg.sim)
    is_b = ab.assign(catalog, share=0.5, strata=[], seed=1).is_b
    table, failed = simulate(catalog, cfg.sim, SplitPolicy(a, b, is_b), days=15, warmup=5, seed=3, episodes=2,
                             pre_period=True)
    assert not failed.any() and set(PRE_COLUMNS) <= set(table.column_names)
    alone = evaluate(catalog, dataclasses.replace(cfg.sim), a, days=15, warmup=5, seed=5)
    pre_profit = table.column("pre_profit").to_numpy() / table.column("pre_sku_days").to_numpy()
    np.testing.assert_allclose(pre_profit, alone.per_sku_profit, rtol=1e-12)


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path, pa.Table]:
    catalog = tmp_path / "catalog.parquet"
    assert main(["catalog", "synth", "--skus", "300", "--out", str(catalog)]) == 0
    groups = tmp_path / "groups.parquet"
    assert main(["ab", "assign", "--catalog", str(catalog), "--seed", "4", "--out", str(groups)]) == 0
    ids = pq.read_table(groups).column("sku_id").to_numpy()
    outcomes, _, _ = fake_test(np.random.default_rng(1), ids.size, effect=0.0)
    table = pa.table({"sku_id": ids, **outcomes})
    path = tmp_path / "outcomes.parquet"
    pq.write_table(table, path)
    return groups, path, table


def test_report_prints_the_cuped_table(files: tuple[Path, Path, pa.Table], capsys: pytest.CaptureFixture[str]) -> None:
    groups, outcomes, _ = files
    assert main(["ab", "report", "--groups", str(groups), "--outcomes", str(outcomes), "--resamples", "200"]) == 0
    out = capsys.readouterr().out
    assert "CUPED" in out and "width vs plain" in out


@pytest.mark.parametrize(("change", "expected"), [
    ("drop", "missing column 'pre_profit'; expected numbers (per-SKU pre-period totals: all of"),
    ("zero_days", "pre_sku_days 0.0; expected a finite number > 0"),
    ("negative_waste", "pre_waste -1.0; expected a finite number >= 0"),
])
def test_report_bad_pre_period(change: str, expected: str, files: tuple[Path, Path, pa.Table],
                               capsys: pytest.CaptureFixture[str]) -> None:
    groups, outcomes, table = files
    if change == "drop":
        table = table.drop_columns(["pre_profit"])
    else:
        name = "pre_sku_days" if change == "zero_days" else "pre_waste"
        values = table.column(name).to_numpy().copy()
        values[5] = 0.0 if change == "zero_days" else -1.0
        table = table.set_column(table.schema.get_field_index(name), name, pa.array(values))
    pq.write_table(table, outcomes)
    assert main(["ab", "report", "--groups", str(groups), "--outcomes", str(outcomes)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err, err
