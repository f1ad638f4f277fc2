"""The joint (lot factor, offset) grid of policy.actions.lot_factors served: the decision
graph's table of every action's units is the simulator's (ActionGrid.unit_table) to the bit,
and `recommend` by torch and by ONNX orders what the simulator's policy orders."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from test_parity import TIE, _mass_gap, check_parity
from tiny_runs import joint_onnx, joint_run  # noqa: F401

from skurl.commands.serve_cmds import load_catalog_for
from skurl.serve.export import read_metadata
from skurl.serve.features import observations
from skurl.serve.models import OnnxModel, TorchModel
from skurl.serve.recommend import Timings, decode_inputs, recommend
from skurl.serve.simulate import run_env
from skurl.serve.snapshot import from_env, write_snapshot
from skurl.serve.validate import catalog_rows

DAYS = 12


def test_graph_tables_and_recommend_match_the_simulator(joint_run: Path, joint_onnx: Path,  # noqa: F811
                                                        tmp_path: Path) -> None:
    grid_meta = json.loads(read_metadata(joint_onnx)["grid"])
    assert grid_meta["lot_scale"] == np.repeat([0.0, 0.5, 1.0, 2.0], 21).tolist()
    torch_model, onnx_model = TorchModel(joint_run), OnnxModel(joint_onnx)
    catalog = load_catalog_for(None, torch_model.info)
    env, policy, _ = run_env(joint_run)
    assert policy.grid.n == 84 and policy.grid.lot_scale is not None
    obs = env.reset(seed=3)
    policy.reset()
    for day in range(DAYS):
        snap = from_env(env)
        orders = policy.orders(obs)
        rows = catalog_rows(snap, catalog, torch_model.info.widths, int(torch_model.info.grid["review_days"]))
        inputs = decode_inputs(snap, rows, observations(snap, rows), torch_model.info)
        with torch.inference_mode():
            _, _, table = torch_model.decision.tables(*(torch.from_numpy(inputs[k]) for k in torch_model.input_names))
        assert table is not None
        np.testing.assert_array_equal(table.numpy(), policy.grid.unit_table(obs.raw, slice(0, len(snap))))
        path = write_snapshot(snap, tmp_path / "state.parquet")
        for name, model in (("torch", torch_model), ("onnx", onnx_model)):
            got = recommend(model, path, catalog, timings=Timings())
            diff = np.flatnonzero(got.order_units != orders)
            if diff.size:  # only where two quantities' probability masses tie
                gap = _mass_gap(torch_model, snap, catalog, diff, got.order_units[diff], orders[diff])
                assert (gap < TIE).all(), f"day {day} {name}: {gap.max():.3g}"
        obs = env.step(orders).obs


@pytest.mark.slow
def test_parity_joint_grid_100_days(joint_run: Path, joint_onnx: Path, tmp_path: Path) -> None:  # noqa: F811
    check_parity(joint_run, joint_onnx, tmp_path)
