"""Parity: on every day of a 100-day episode, `recommend` from the day's snapshot orders what
the trained policy orders inside the simulator, through torch (--run) and ONNX (--model).
Differences are counted and printed; any must be a tie of the greedy choice (two order
quantities whose probability masses agree to float rounding)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_runs import lost_sales_onnx, lost_sales_run, synthetic_onnx, synthetic_run  # noqa: F401

from skurl.serve.features import observations
from skurl.serve.models import OnnxModel, TorchModel
from skurl.serve.recommend import Timings, decode_inputs, recommend
from skurl.serve.simulate import episode
from skurl.serve.snapshot import write_snapshot
from skurl.serve.validate import catalog_rows

TIE = 1e-6  # probability masses closer than this are a tie of the greedy choice


def _mass_gap(model: TorchModel, snap, catalog, rows: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|mass(quantity a) - mass(quantity b)| of snapshot rows `rows` (their greedy tie margin);
    the observations of the whole snapshot (a network's rows read one another's)."""
    cat_rows = catalog_rows(snap, catalog, model.info.widths, int(model.info.grid["review_days"]))
    inputs = decode_inputs(snap, cat_rows, observations(snap, cat_rows), model.info)
    with torch.inference_mode():
        _, probs, table = model.decision.tables(*(torch.from_numpy(inputs[k][rows]) for k in model.input_names))
    if table is None:  # units grid: the logits' argmax
        values = model.decision.values
        table = values.expand_as(probs)
    t, p = table.numpy(), probs.numpy()
    mass = lambda q: (p * (t == q[:, None])).sum(axis=1)  # noqa: E731
    return np.abs(mass(a) - mass(b))


def check_parity(run: Path, onnx_path: Path, tmp_path: Path, days: int = 100) -> None:
    from skurl.commands.serve_cmds import load_catalog_for

    torch_model, onnx_model = TorchModel(run), OnnxModel(onnx_path)
    catalog = load_catalog_for(None, torch_model.info)
    counts = {"torch": 0, "onnx": 0}
    total = 0
    for day, (snap, sim_orders) in enumerate(episode(run, seed=3, days=days)):
        path = write_snapshot(snap, tmp_path / "state.parquet")
        for name, model in (("torch", torch_model), ("onnx", onnx_model)):
            got = recommend(model, path, catalog, timings=Timings())
            assert np.array_equal(got.sku_id, snap.sku_id)
            diff = np.flatnonzero(got.order_units != sim_orders)
            counts[name] += diff.size
            if diff.size:
                gap = _mass_gap(torch_model, snap, catalog, diff, got.order_units[diff], sim_orders[diff])
                print(f"day {day} {name}: {diff.size} differences, mass gaps {gap.tolist()}")
                assert (gap < TIE).all(), f"day {day} {name}: a difference that is not a tie ({gap.max():.3g})"
        total += sim_orders.size
        day_count = day + 1
    assert day_count == days
    print(f"{run.name}: {total} SKU-days, differences torch {counts['torch']}, onnx {counts['onnx']}")
    for name, c in counts.items():
        assert c <= total * 1e-4, f"{name}: {c} of {total} SKU-days differ (more than 0.01%)"


@pytest.mark.slow
def test_parity_synthetic_catalog(synthetic_run: Path, synthetic_onnx: Path, tmp_path: Path) -> None:  # noqa: F811
    check_parity(synthetic_run, synthetic_onnx, tmp_path)


@pytest.mark.slow
def test_parity_uniform_lost_sales_catalog(lost_sales_run: Path, lost_sales_onnx: Path, tmp_path: Path) -> None:  # noqa: F811
    check_parity(lost_sales_run, lost_sales_onnx, tmp_path)
