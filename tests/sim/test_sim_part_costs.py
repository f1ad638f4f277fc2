"""benchmarks/sim_part_costs.py runs on a small catalog and prints one figure per piece."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "sim_part_costs.py"


def test_part_costs_prints_every_piece_and_the_full_step(capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("sim_part_costs", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Registered by name: numba's on-disk cache looks the functions' module up in sys.modules.
    sys.modules.setdefault("sim_part_costs", module)
    spec.loader.exec_module(module)
    assert module.main(["--skus", "300", "--days", "3", "--repeat", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    ns = out["ns_per_sku"]
    assert out["skus"] == 300
    assert set(ns) == {"mean", "demand", "forecast", "features", "uniform", "normal", "exp", "full_step"}
    assert all(value > 0 and value == value for value in ns.values())
