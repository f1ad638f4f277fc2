"""`skurl train` end to end on a tiny config (seconds): checkpoints, metrics, TensorBoard
events, eval.json against the tuned baseline, report.md; then `skurl eval --run`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from skurl.cli import main
from skurl.train import run as training

TINY = [
    "catalog.kind=uniform", "catalog.skus=40", "sim.days=10", "sim.reward=cost", "sim.substitution=false",
    "policy.actions.kind=units", "policy.actions.n=10", "policy.hidden=[16,16]", "ppo.epochs=2",
    "ppo.minibatch=128", "train.checkpoint_every=2", "train.eval_every=2", "train.torch_threads=1",
    "eval.days=8", "eval.warmup=2", "eval.skus=20", "train.warm_start=none", "train.keep_best=false",
]


def sets(items: list[str]) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


def test_train_then_eval_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    assert main(["train", "--run-dir", str(run), "--iterations", "3", "--json", *sets(TINY)]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["iterations"] == 3 and summary["eval_cost"] > 0 and summary["baseline_cost"] > 0
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["iter_000002", "iter_000003"]
    for name in ("config.yaml", "metrics.jsonl", "eval.json", "report.md", "baseline.json"):
        assert (run / name).is_file(), name
    assert any((run / "tb").iterdir())
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == [0, 1, 2]
    for key in ("reward_mean", "policy_loss", "approx_kl", "explained_variance", "time_simulate",
                "time_infer", "time_learn", "time_sync", "transitions_per_s"):
        assert key in records[-1], key
    evaluation = json.loads((run / "eval.json").read_text())
    policies = evaluation["policies"]
    baselines = ("forecast-base-stock", "capped-base-stock")
    # eval.baselines; forecast-s-S is forecast-base-stock where no SKU has an order cost
    assert set(policies) == {"ppo", *baselines}
    best = min(baselines, key=lambda n: policies[n]["avg_cost_per_sku_day"])
    assert summary["baseline_cost"] == policies[best]["avg_cost_per_sku_day"]  # sim.reward=cost: the cheapest
    assert [h["iteration"] for h in evaluation["history"]] == [1, 2]
    assert "ppo" in (run / "report.md").read_text()

    assert main(["eval", "--run", str(run), "--days", "5", "--warmup", "1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["policy"] == "ppo" and result["params"]["iteration"] == 3 and result["skus"] == 20
    # the table too (it once sent the policy's string params through a float conversion)
    assert main(["eval", "--run", str(run), "--days", "5", "--warmup", "1"]) == 0
    table = capsys.readouterr().out
    assert "param actions" in table and "param iteration" in table and "avg cost / SKU-day" in table
    # keys of the trained policy cannot change at evaluation (they would be silently ignored)
    assert main(["eval", "--run", str(run), "--set", "policy.actions.n=5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--set policy.actions.n=5 cannot change a trained policy" in err


def test_warm_start_clones_the_tuned_baseline_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    warm = ["train.warm_start=base-stock", "train.warm_start_episodes=1", "train.warm_start_steps=200",
            "train.warm_start_critic=1", "policy.actions.n=20"]
    assert main(["train", "--run-dir", str(run), "--iterations", "2", "--no-baseline", *sets(TINY + warm)]) == 0
    first = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
    assert first["warm_start_rows"] == 40 * 10 and first["warm_start_grid_exact"] == 1.0
    assert first["warm_start_accuracy"] > 0.5 and first["warm_start_eval_cost"] > 0
    laps = [first[f"warm_start_{k}_seconds"] for k in ("tune", "record", "clone")]
    assert all(x > 0 for x in laps) and first["warm_start_seconds"] == pytest.approx(sum(laps))
    assert first["policy_loss"] == 0.0 or first["approx_kl"] == 0.0  # the first iteration fits the critic only
    history = json.loads((run / "eval.json").read_text())["history"]
    assert [h["iteration"] for h in history] == [-1, 1]  # the clone (before iteration 0), then the trained policy


def test_resume_extends_a_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    assert main(["train", "--run-dir", str(run), "--iterations", "2", "--no-baseline", *sets(TINY)]) == 0
    assert main(["train", "--resume", str(run), "--iterations", "4", "--no-baseline"]) == 0
    out = capsys.readouterr().out
    assert "4 iterations" in out
    assert (run / "checkpoints" / "iter_000004").is_dir()


def test_user_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--resume", str(tmp_path / "nope")]) == 2
    assert main(["train", "--iterations", "-1"]) == 2
    assert main(["eval", "--run", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("error: ") for line in err)
    assert "not a run directory (no config.yaml)" in err[2]
    assert main(["eval", "--run", str(tmp_path), "--policy", "constant"]) == 2
    assert "expected one of the two" in capsys.readouterr().err


def test_bench_collect_and_learn_print_figures(capsys: pytest.CaptureFixture[str]) -> None:
    small = ["--set", "policy.hidden=[16]", "--set", "train.torch_threads=1", "--json"]
    # 5000 SKUs: the warm-up runs the first 1000, narrower than the whole catalog on their
    # own (27 vs 28 expiring columns); it must show the whole catalog's widths.
    assert main(["bench", "collect", "--skus", "5000", "--steps", "1", *small]) == 0
    collect = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert collect["transitions"] == 5000 and collect["transitions_per_s"] > 0
    assert isinstance(collect["native_bf16"], bool)
    assert main(["bench", "learn", "--transitions", "2000", "--repeat", "1", "--set", "ppo.epochs=2", *small]) == 0
    learn = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert learn["transitions"] == 2000 and learn["epochs"] == 2 and learn["transition_epochs_per_s"] > 0
    assert learn["native_bf16"] == collect["native_bf16"]


def _best_run(run: Path, iterations: int, *extra: str) -> None:
    keep = ["train.keep_best=true", "train.eval_every=1", "train.seed=3"]
    assert main(["train", "--run-dir", str(run), "--iterations", str(iterations), *extra,
                 *sets(TINY + keep)]) == 0


def test_keep_best_ships_the_policy_with_the_best_validation_score(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    _best_run(run, 5)
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    scores = [r["validation_score"] for r in records]  # one evaluation per iteration
    best = int(np.argmax(scores)) + 1  # the first of equal scores: the policy after that iteration
    assert best < 5  # an earlier policy than the last, so the run ships it instead
    assert [r["best_iteration"] for r in records][-1] == best
    (kept,) = (run / "best" / "checkpoints").iterdir()
    meta = json.loads((kept / "meta.json").read_text())
    assert meta["iteration"] == best and meta["validation_score"] == max(scores)
    evaluation = json.loads((run / "eval.json").read_text())
    shipped = evaluation["policies"]["ppo"]
    assert shipped["params"]["iteration"] == best and shipped["params"]["selected"] == "best"
    assert [h["iteration"] for h in evaluation["history"]] == [0, 1, 2, 3, 4]  # the learning curve stays
    assert f"train.keep_best kept: the best validation score (seed {meta['validation_seed']})" in (run / "report.md").read_text()
    assert records[best - 1]["eval_cost"] == pytest.approx(shipped["avg_cost_per_sku_day"])
    capsys.readouterr()
    assert main(["eval", "--run", str(run), "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["params"]["iteration"] == best and result["params"]["selected"] == "best"
    assert result["avg_cost_per_sku_day"] == shipped["avg_cost_per_sku_day"]


def test_keep_best_survives_a_resume(tmp_path: Path) -> None:
    # Stopped after 2 of 5 iterations and resumed: the same policy is kept and shipped.
    from skurl.config import load_config
    from skurl.modes import colocated

    cfg = load_config(None, [*TINY, "train.keep_best=true", "train.eval_every=1", "train.seed=3",
                             "train.iterations=5"])
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    training.start(colocated.mode, cfg, whole)
    training.start(colocated.mode, cfg, parts, stop_after=2)
    training.resume(colocated.mode, parts)
    assert json.loads((whole / "eval.json").read_text()) == json.loads((parts / "eval.json").read_text())
    (a,), (b,) = ((r / "best" / "checkpoints").iterdir() for r in (whole, parts))
    assert a.name == b.name and json.loads((a / "meta.json").read_text())["iteration"] < 5


def test_keep_best_starts_afresh_on_other_skus(tmp_path: Path) -> None:
    from skurl.catalog import load_catalog
    from skurl.config import load_config
    from skurl.learn.learner import Learner
    from skurl.train.best import BestKeeper

    cfg = load_config(None, [*TINY, "train.keep_best=true"])
    catalog = load_catalog(cfg.catalog)
    learner = Learner(cfg, 8, 4)
    keeper = BestKeeper(tmp_path, catalog)
    assert keeper.offer(learner, 1.0, 7) and not keeper.offer(learner, 1.0, 7)  # a tie keeps the first
    assert BestKeeper(tmp_path, catalog).score == 1.0  # restored by a resumed run
    other = BestKeeper(tmp_path, catalog.subset(np.arange(10)))
    assert other.score == -np.inf and other.path is None


def test_a_damaged_kept_policy_is_dropped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from skurl.catalog import load_catalog
    from skurl.config import load_config
    from skurl.learn.learner import Learner
    from skurl.train.best import BestKeeper

    cfg = load_config(None, [*TINY, "train.keep_best=true"])
    catalog = load_catalog(cfg.catalog)
    keeper = BestKeeper(tmp_path, catalog)
    assert keeper.offer(Learner(cfg, 8, 4), 1.0, 7) and keeper.path is not None
    state = keeper.path / "state.safetensors"
    data = bytearray(state.read_bytes())
    data[len(data) // 2] ^= 0xFF
    state.write_bytes(bytes(data))
    again = BestKeeper(tmp_path, catalog)
    assert again.path is None and again.score == -np.inf and not keeper.path.exists()
    assert "is damaged" in capsys.readouterr().err


def test_a_tuned_cover_grid_starts_from_the_baseline_and_keeps_its_centre(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run"
    tuned = ["catalog.kind=synthetic", "catalog.skus=60", "policy.actions.kind=cover", "policy.actions.z_center=tuned",
             "policy.actions.n=5", "policy.actions.z_min=-1", "policy.actions.z_max=1",
             "train.warm_start=forecast-s-S", "train.warm_start_episodes=1", "train.warm_start_steps=50",
             "train.warm_start_critic=1", "eval.skus=0"]
    assert main(["train", "--run-dir", str(run), "--iterations", "2", "--no-baseline", *sets(TINY + tuned)]) == 0
    assert (run / "grid_center.safetensors").is_file()
    first = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
    # Offset 0 of every SKU is the tuned baseline's order: the teacher's orders are all on the grid.
    assert first["warm_start_grid_exact"] == 1.0 and first["warm_start_eval_profit"] != 0
    assert first["grid_center_seconds"] > 0 and first["warm_start_accuracy"] > 0.99
    capsys.readouterr()
    import skurl.policy.grid_center as grid_center

    def no_tuning(*_: object) -> None:
        raise AssertionError("a resumed run or a saved policy must not tune its centre again")

    monkeypatch.setattr(grid_center, "tune_center", no_tuning)
    assert main(["train", "--resume", str(run), "--iterations", "3"]) == 0
    assert main(["eval", "--run", str(run), "--days", "5", "--warmup", "1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["policy"] == "ppo" and result["params"]["iteration"] == 3 and result["skus"] == 60
    (run / "grid_center.safetensors").unlink()
    assert main(["eval", "--run", str(run), "--days", "5", "--warmup", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "grid_center.safetensors" in err and len(err.splitlines()) == 1


def test_the_embedded_defaults_train_on_the_tuned_cover_grid_in_every_mode(capsys: pytest.CaptureFixture[str]) -> None:
    from skurl.commands.train_cmd import EMBEDDED, EMBEDDED_GRID
    from skurl.config import load_config
    from skurl.policy.learned import grid_for

    grid = grid_for(load_config(None, [*EMBEDDED, *EMBEDDED_GRID]))
    assert grid.kind == "cover" and grid.needs_center and grid.values[grid.neutral_index] == 0.0
    assert grid_for(load_config(None, list(EMBEDDED))).kind == "multiplier"
    from skurl.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--help"])
    assert "policy.actions.kind=cover" in " ".join(capsys.readouterr().out.split())


def test_eval_run_skips_a_damaged_checkpoint_and_leaves_it_in_place(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    assert main(["train", "--run-dir", str(run), "--iterations", "4", "--no-baseline", *sets(TINY)]) == 0
    newest = run / "checkpoints" / "iter_000004" / "state.safetensors"
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0xFF
    newest.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["eval", "--run", str(run), "--days", "5", "--warmup", "1", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out.strip().splitlines()[-1])["params"]["iteration"] == 2
    assert "iter_000004" in captured.err and "is damaged" in captured.err and "using checkpoint" in captured.err
    assert newest.is_file()  # a reader moves nothing: a resumed run sets it aside itself
    (run / "checkpoints" / "iter_000002" / "state.safetensors").write_bytes(b"not safetensors")
    assert main(["eval", "--run", str(run)]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(
        "all 2 checkpoints are damaged; expected at least one intact iter_XXXXXX")
