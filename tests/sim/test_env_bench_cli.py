"""`skurl bench sim` runs the simulator and reports throughput; bad flags exit with 2."""

from __future__ import annotations

import json

import pytest

from skurl.cli import main


def test_bench_sim_prints_one_json_object(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["bench", "sim", "--skus", "3000", "--steps", "3", "--threads", "1", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert out["skus"] == 3000 and out["steps"] == 3 and out["threads"] == 1
    assert out["sku_steps_per_s"] > 0 and out["peak_rss_mb"] > 0 and out["failed_skus"] == 0
    # The median step lies within the steps' range, so between the fastest (at most the mean)
    # and the slowest (at most all three): its rate is SKUs per median step.
    mean_ms = out["ms_per_step"]
    assert 0 < out["median_ms_per_step"] <= 3 * mean_ms
    assert out["median_sku_steps_per_s"] == pytest.approx(3000 / (out["median_ms_per_step"] / 1e3))


def test_bench_sim_text_line_and_uniform_catalog(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "sim", "--skus", "50", "--steps", "2", "--set", "catalog.kind=uniform"]) == 0
    lines = capsys.readouterr().out
    assert "SKU-steps/s" in lines and lines.count("\n") == 2 and "bound_ratio" in lines.splitlines()[1]


@pytest.mark.parametrize("flags", [["--skus", "0"], ["--steps", "-1"], ["--threads", "-2"]])
def test_bench_sim_bad_flags_exit_2(flags: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "sim", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1


def test_bench_sim_says_when_it_caps_the_threads(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "sim", "--skus", "50", "--steps", "2", "--threads", "4096", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["threads"] < 4096
    assert "--threads 4096 capped at" in captured.err


def test_bench_sim_compiles_before_it_times(monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A small untimed env is reset and stepped first: on a fresh install the first timed
    step would otherwise include numba's compilation of the step kernel (~25 s)."""
    from skurl.sim import VectorEnv

    calls: list[int] = []
    step = VectorEnv.step

    def recording_step(self: VectorEnv, orders):  # type: ignore[no-untyped-def]
        calls.append(self.num_skus)
        return step(self, orders)

    monkeypatch.setattr(VectorEnv, "step", recording_step)
    assert main(["bench", "sim", "--skus", "500", "--steps", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert calls == [64, 500, 500, 500]
    assert out["warm_up_s"] > 0
