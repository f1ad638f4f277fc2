"""Small strata in `skurl ab report` (ab_stats.pool_small_strata): a cell of one SKU resamples
to itself, so without pooling its spread vanishes from the interval."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from skurl.cli import main
from skurl.serve.ab_stats import compare, pool_small_strata


def outcomes_of(profit: np.ndarray) -> dict[str, np.ndarray]:
    n = profit.size
    return {"sku_days": np.full(n, 10.0), "demand": np.full(n, 100.0), "lost": np.full(n, 5.0),
            "waste": np.ones(n), "inventory_cost": np.full(n, 3.0), "profit": profit}


def test_pool_merges_only_the_small_strata() -> None:
    code = np.repeat([0, 1, 2, 3], [20, 20, 3, 4])
    is_b = np.zeros(code.size, dtype=bool)
    is_b[::2] = True
    pooled, n = pool_small_strata(code, is_b, 5)
    assert n == 2 and (pooled[:40] == code[:40]).all() and (pooled[40:] == 4).all()
    same, none = pool_small_strata(code[:43], is_b[:43], 5)  # one small stratum: nothing to pool with
    assert none == 0 and (same == code[:43]).all()


def test_one_sku_cells_get_an_interval_once_pooled() -> None:
    """40 strata of one A and one B SKU each, SKU sizes spread 100-fold: within-cell resampling
    sees no spread at all (a zero-width interval); pooled, the SKUs' spread is there."""
    rng = np.random.default_rng(0)
    stratum = np.repeat(np.arange(40), 2).astype(str)
    is_b = np.tile([False, True], 40)
    profit = rng.lognormal(0.0, 1.5, 80) * 10 * 100
    unpooled = compare(outcomes_of(profit), is_b, stratum, resamples=300, min_cell=1)["kpis"]["profit_per_sku_day"]
    result = compare(outcomes_of(profit), is_b, stratum, resamples=300)
    pooled = result["kpis"]["profit_per_sku_day"]
    assert unpooled.high - unpooled.low == pytest.approx(0.0, abs=1e-9)
    assert pooled.high - pooled.low > 3 * pooled.se > 0
    assert result["strata_pooled"] == 40 and result["strata_compared"] == 1 and result["skus_left_out"] == 0
    assert pooled.diff == pytest.approx(profit[is_b].mean() / 10 - profit[~is_b].mean() / 10)


def test_min_cell_below_one_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    groups, outcomes = tmp_path / "groups.parquet", tmp_path / "outcomes.parquet"
    ids = np.arange(10, dtype=np.int64)
    pq.write_table(pa.table({"sku_id": ids, "group": np.where(ids % 2 == 1, "B", "A"),
                             "stratum": np.full(10, "all")}), groups)
    pq.write_table(pa.table({"sku_id": ids, **outcomes_of(np.arange(10.0))}), outcomes)
    assert main(["ab", "report", "--groups", str(groups), "--outcomes", str(outcomes), "--min-cell", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--min-cell 0, expected an integer >= 1" in err, err
