"""`skurl bench shards`: per-worker simulator time of each partition method."""

from __future__ import annotations

import json

import pytest

from skurl.cli import main


def test_bench_shards_times_every_worker_of_every_method(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "shards", "--skus", "3000", "--workers", "3", "--steps", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["methods"]) == {"equal", "round_robin_cost", "lpt"}
    for r in out["methods"].values():
        assert len(r["worker_seconds"]) == 3 and all(s > 0 for s in r["worker_seconds"])
        assert sum(r["worker_skus"]) == 3000
        assert r["spread"] == pytest.approx(max(r["worker_seconds"]) / min(r["worker_seconds"]))
    # The cost model's own balance: serpentine dealing evens the modelled cost far better
    # than a contiguous split of a catalog whose expensive SKUs are not spread evenly.
    model = {m: max(r["worker_model_cost"]) / min(r["worker_model_cost"]) for m, r in out["methods"].items()}
    assert model["round_robin_cost"] < 1.01 and model["lpt"] < 1.01


def test_bench_shards_text_output_and_bad_method(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "shards", "--skus", "500", "--workers", "2", "--steps", "1", "--methods", "equal"]) == 0
    text = capsys.readouterr().out
    assert "equal: slowest/fastest" in text and "lpt" not in text
    assert main(["bench", "shards", "--skus", "500", "--methods", "equal,fastest"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--methods" in err[0]
