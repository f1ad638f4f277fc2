"""`skurl bench modes`: argument checks and the figure read from metrics.jsonl."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skurl.cli import main
from skurl.commands.bench_modes import _summarize, combine_rounds
from skurl.commands.bench_scaling import scaling


@pytest.mark.parametrize("argv", [["--modes", "colocated,spaceship"], ["--modes", ","],
                                  ["--iterations", "1"], ["--skus", "0"], ["--rounds", "0"]])
def test_bad_flags_are_one_line_and_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "modes", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bench modes" in err[0]


def test_figure_leaves_out_the_warm_up_iteration_and_eval_records(tmp_path: Path) -> None:
    records = [
        {"iteration": 0, "transitions": 1000, "iteration_seconds": 50.0, "time_collect": 40.0},
        {"iteration": 1, "transitions": 1000, "iteration_seconds": 2.0, "time_collect": 1.5,
         "collector_store_s": 0.2},
        {"iteration": 2, "transitions": 1000, "iteration_seconds": 3.0, "time_collect": 2.5,
         "collector_store_s": 0.4},
        {"iteration": 2, "eval_cost": 3.0},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    out = _summarize(tmp_path, wall=60.0)
    assert out["transitions_per_s"] == 400.0 and out["iterations_timed"] == 2
    assert out["stages_s"] == {"collect": 2.0} and out["collector_s"] == {"collector_store_s": 0.3}


def test_rounds_give_the_median_of_paired_ratios() -> None:
    """The machine's speed drifts between runs: each round's ratio pairs two adjacent runs,
    and the median of those is reported, not the ratio of two medians."""
    def run(tps: float) -> dict:
        return {"transitions_per_s": tps, "stages_s": {}, "seconds_per_iteration": 1.0}

    rounds = [{"colocated": run(100.0), "decoupled": run(90.0)},   # fast spell: 0.9
              {"colocated": run(50.0), "decoupled": run(40.0)},    # slow spell: 0.8
              {"colocated": run(80.0), "decoupled": run(68.0)}]    # 0.85
    out = combine_rounds(rounds, "colocated")
    assert out["decoupled"]["round_ratios"] == [0.9, 0.8, 0.85]
    assert out["decoupled"]["ratio"] == 0.85  # the ratio of the medians would say 0.85 too, by luck
    assert out["decoupled"]["transitions_per_s"] == 68.0 and out["colocated"]["ratio"] == 1.0
    skewed = combine_rounds([rounds[0], rounds[1], {"colocated": run(50.0), "decoupled": run(85.0)}],
                            "colocated")
    assert skewed["decoupled"]["ratio"] == 0.9  # median of 0.9, 0.8, 1.7 (the medians' ratio: 85/50)


@pytest.mark.parametrize("argv", [["--modes", "colocated", "--ray-workers", "1,2"],
                                  ["--modes", "ray", "--ray-workers", "2,4"],
                                  ["--modes", "ray", "--ray-workers", "1,x"],
                                  ["--modes", "ray", "--ray-workers", "1,1"],
                                  ["--modes", "ray", "--ray-workers", "0,1"]])
def test_bad_ray_workers_are_one_line_and_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "modes", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ("--ray-workers" in err[0] or "--modes" in err[0])


def test_scaling_projects_strong_scaling_with_the_learner_serial() -> None:
    """1 worker: 10 s per iteration, of which learn 1.5 + sync 0.5 (the learner's) and 8 of
    collection; t(W) = 8 / W + 2, the learner the limit from 8 / 2 = 4 workers on."""
    def run(tps: float, seconds: float, learn: float) -> dict:
        return {"transitions_per_s": tps, "seconds_per_iteration": seconds,
                "stages_s": {"simulate": 3.0, "infer": 4.0, "learn": learn, "sync": 0.5}}

    out = scaling({1: run(1000.0, 10.0, 1.5), 2: run(1600.0, 6.25, 1.5)})
    assert out["collect_1_worker_s"] == 8.0 and out["learner_s"] == 2.0
    assert out["table"][1] == {"workers": 2, "transitions_per_s": 1600.0, "speedup": 1.6, "efficiency": 0.8,
                               "collect_s": 4.25, "learner_s": 2.0, "seconds_per_iteration": 6.25}
    at = {r["workers"]: r for r in out["projection"]}
    assert set(at) == {1, 2, 8, 64, 512}
    assert at[64]["seconds_per_iteration"] == pytest.approx(8 / 64 + 2, abs=1e-4)
    assert at[64]["transitions_per_s"] == pytest.approx(10_000 / (8 / 64 + 2), rel=1e-4)
    assert at[512]["learner_share"] == pytest.approx(2 / (8 / 512 + 2), abs=1e-3)
    assert out["learner_limit_workers"] == 4.0
    with pytest.raises(ValueError, match="include 1"):
        scaling({2: run(1.0, 1.0, 0.1)})
