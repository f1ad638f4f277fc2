"""configs/serial.yaml's learned policy against the exact Clark-Scarf optimum
(benchmarks/serial_optimal.py; docs/networks.md, Learned policy): a short PPO run on a small
serial instance, scored on held-out seeds, stays within 2% of the optimum. A grid or warm
start that does not reproduce echelon base-stock at its centre fails it (the units grid
without a warm start was 5% above after 40 iterations)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from benchmark_module import load_benchmark

from skurl.cli import main

so = load_benchmark("serial_optimal")
CONFIG = Path(__file__).resolve().parents[2] / "configs" / "serial.yaml"


@pytest.mark.slow
def test_short_run_is_near_the_clark_scarf_optimum(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    leads, holding, penalty = [0, 2], [2.0, 1.0], 19.0
    small = ["catalog.skus=200", "catalog.serial.lead_times=[0,2]", f"catalog.lost_sale_cost={penalty}",
             "train.iterations=3", "train.eval_every=0", "train.warm_start_steps=300", "eval.skus=400",
             "eval.days=300", "eval.warmup=50", "sim.threads=1"]
    run = tmp_path / "run"
    args = ["train", "--config", str(CONFIG), "--run-dir", str(run), "--no-baseline"]
    assert main([*args, *[a for s in small for a in ("--set", s)]]) == 0
    capsys.readouterr()
    assert main(["eval", "--run", str(run), "--json"]) == 0
    learned = json.loads(capsys.readouterr().out)
    opt = so.clark_scarf(leads, holding, penalty, 5.0)
    cost = learned["avg_cost_per_network_day"]
    assert learned["network"]["networks"] == 200
    assert abs(cost / opt.cost - 1) < 0.02, (cost, opt)
