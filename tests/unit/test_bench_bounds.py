"""Benchmarks that print their bound: `bench learn` against the GEMM bound of its shapes,
`bench sim` against the memory floor of its layout; `bench sim`/`bench shards` simulate the
catalog.skus their --config or --set gives."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from skurl.cli import main
from skurl.learn.gemm_bound import gemm_bound, gemm_operands
from skurl.policy.nets import ActorCritic


def test_gemm_operands_are_the_layers_products() -> None:
    model = ActorCritic(7, 5, [16, 8])
    names = [name for name, _ in gemm_operands(model, 32)]
    # per net: 3 layers x (forward, weight grad) + 2 input grads (none for the observation)
    assert len(names) == 2 * (3 * 2 + 2)
    shapes = {name: (a.shape, b.shape) for name, (a, b) in gemm_operands(model, 32)}
    assert shapes["policy.0 7->16 forward"] == (torch.Size([32, 7]), torch.Size([7, 16]))
    assert shapes["value.2 8->1 weight grad"] == (torch.Size([1, 32]), torch.Size([32, 8]))
    assert shapes["policy.1 16->8 input grad"] == (torch.Size([32, 8]), torch.Size([8, 16]))
    bound = gemm_bound(model, 32, min_seconds=0.001)
    assert bound["ceiling_transition_epochs_per_s"] == pytest.approx(32 / (bound["gemm_ms_per_minibatch"] / 1e3))


def test_the_side_by_side_bound_takes_the_faster_schedule() -> None:
    model = ActorCritic(7, 5, [16, 8])
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        alone = gemm_bound(model, 32, min_seconds=0.001)
        both = gemm_bound(model, 32, min_seconds=0.001, side_by_side=True)
        assert torch.get_num_threads() == 2  # restored after its one-thread phases
    finally:
        torch.set_num_threads(threads)
    assert alone["schedule"] == "one by one" and set(alone["schedule_ms"]) == {"one by one"}
    assert set(both["schedule_ms"]) == {"one by one", "side by side"}
    assert both["gemm_ms_per_minibatch"] == pytest.approx(min(both["schedule_ms"].values()))  # the faster bounds
    names = [r["gemm"] for r in both["gemms"]]
    assert names == (["policy and value side by side, forward", "policy and value side by side, backward"]
                     if both["schedule"] == "side by side" else [r["gemm"] for r in alone["gemms"]])
    assert both["flops_per_transition_epoch"] == alone["flops_per_transition_epoch"]  # the same products
    assert both["ceiling_transition_epochs_per_s"] == pytest.approx(32 / (both["gemm_ms_per_minibatch"] / 1e3))


def test_forward_rows_per_s_times_every_layer_of_the_net(monkeypatch: pytest.MonkeyPatch) -> None:
    from skurl.learn import gemm_bound as gb

    shapes: list[tuple[tuple[int, ...], tuple[int, ...]]] = []

    def fake(a: torch.Tensor, b: torch.Tensor, min_seconds: float = 0.3) -> float:
        shapes.append((tuple(a.shape), tuple(b.shape)))
        return 0.5

    monkeypatch.setattr(gb, "seconds_per_gemm", fake)
    net = ActorCritic(7, 5, [16, 8]).policy
    assert gb.forward_rows_per_s(net, 64) == pytest.approx(64 / 1.5)  # 3 products of 0.5 s
    assert shapes == [((64, 7), (7, 16)), ((64, 16), (16, 8)), ((64, 8), (8, 5))]
    assert gb.forward_rows_per_s(net, 64, min_seconds=0.001) > 0  # the real timing


@pytest.mark.parametrize("update", ["fused", "autograd"])
def test_bench_learn_prints_its_bound_ratio(update: str, capsys: pytest.CaptureFixture[str]) -> None:
    flags = ["--autograd"] if update == "autograd" else []
    assert main(["bench", "learn", "--transitions", "1000", "--repeat", "1", "--bound-seconds", "0.002", *flags,
                 "--set", "policy.hidden=[16]", "--set", "ppo.epochs=2", "--set", "train.torch_threads=1",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["update"] == update and len(out["gemm_bound_runs"]) == 2
    ceiling = sum(out["gemm_bound_runs"]) / 2
    assert out["gemm_bound_transition_epochs_per_s"] == pytest.approx(ceiling, rel=1e-3)
    assert out["bound_ratio"] == pytest.approx(out["transition_epochs_per_s"] / ceiling, rel=1e-2)
    assert out["gemm_ms_per_minibatch"] > 0 and out["ms_per_minibatch"] > 0


def test_bench_learn_bad_bound_seconds_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "learn", "--bound-seconds", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "--bound-seconds" in err and err.count("\n") == 1


def test_bench_sim_prints_its_memory_floor(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "sim", "--skus", "2000", "--steps", "3", "--threads", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["floor_sku_steps_per_s"] > 0 and out["floor_bytes_per_sku_step"] > 0
    assert out["bound_ratio"] == pytest.approx(out["sku_steps_per_s"] / out["floor_sku_steps_per_s"])
    assert out["median_bound_ratio"] == pytest.approx(
        out["median_sku_steps_per_s"] / out["median_floor_sku_steps_per_s"])


@pytest.mark.parametrize("how", ["config", "set", "flag"])
def test_bench_sim_and_shards_simulate_the_configured_catalog(how: str, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("catalog:\n  skus: 700\n")
    flags = {"config": ["--config", str(config)], "set": ["--set", "catalog.skus=700"],
             "flag": ["--config", str(config), "--skus", "300"]}[how]
    expected = 300 if how == "flag" else 700
    assert main(["bench", "sim", "--steps", "2", "--threads", "1", "--json", *flags]) == 0
    assert json.loads(capsys.readouterr().out)["skus"] == expected
    assert main(["bench", "shards", "--workers", "2", "--steps", "1", "--methods", "equal", "--json", *flags]) == 0
    assert json.loads(capsys.readouterr().out)["skus"] == expected


def test_bench_rollouts_prints_its_bound_against_bench_sim(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "rollouts", "--states", "30", "--budget", "8", "--horizon", "3", "--json",
                 "--set", "catalog.kind=uniform", "--set", "sim.threads=1"]) == 0
    out = json.loads(capsys.readouterr().out)
    rounds = max(1, math.ceil(math.log2(out["actions"])))
    width = max(30, out["rollout_sku_days"] // (3 * rounds))
    assert out["sim_skus"] == 30 * math.ceil(width / 30) and out["sim_days"] == 3  # whole copies of the catalog
    assert out["bound_ratio"] == pytest.approx(out["rollout_sku_days_per_s"] / out["sim_sku_steps_per_s"])
    assert out["clone_rows_per_state"] == 1.0 and out["row_bound_ratio"] == pytest.approx(out["bound_ratio"])


def test_bench_rollouts_on_networks_counts_the_rows_each_clone_brings(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "rollouts", "--states", "40", "--budget", "4", "--horizon", "3", "--json",
                 "--set", "catalog.synthetic.network=dc", "--set", "sim.backorders=false",
                 "--set", "sim.threads=1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["clone_rows_per_state"] > 1.0
    assert out["row_bound_ratio"] == pytest.approx(out["bound_ratio"] * out["clone_rows_per_state"])


@pytest.mark.parametrize("update,threads", [("fused", 1), ("autograd", 1), ("fused", 2)])
def test_bench_train_breaks_an_iteration_into_stages(update: str, threads: int,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from skurl.learn.fused_step import SIDE_BY_SIDE_PHASE

    flags = ["--autograd"] if update == "autograd" else []
    assert main(["bench", "train", "--json", *flags, "--set", "catalog.skus=120", "--set", "ppo.sample_skus=40",
                 "--set", "sim.days=10", "--set", "policy.hidden=[16]", "--set", "ppo.epochs=2",
                 "--set", f"train.torch_threads={threads}"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["update"] == update and out["transitions_trained"] == 40 * 10 and out["epochs"] == 2
    assert 40 <= out["collected_skus"] < 120  # the sample's units, as the job collects them
    stages, phases = out["stages_s"], out["learn_phases_s"]
    assert all(stages[k] > 0 for k in ("collect", "simulate", "infer", "learn"))
    # one phase for both nets' forward, loss and backward when they run side by side (2 threads)
    assert ("forward (nets)" in phases) == (update == "fused" and threads == 1)
    assert (SIDE_BY_SIDE_PHASE in phases) == (update == "fused" and threads == 2)
    if SIDE_BY_SIDE_PHASE in phases:  # its GEMMs: both nets' forward and backward
        assert out["learn_gemm_s"][SIDE_BY_SIDE_PHASE] > 0
    assert sum(phases.values()) + out["learn_outside_gemm_s"]["unmarked"] == pytest.approx(stages["learn"])
    outside = sum(out["learn_outside_gemm_s"].values())
    assert outside == pytest.approx(stages["learn"] - out["learn_gemm_total_s"])
