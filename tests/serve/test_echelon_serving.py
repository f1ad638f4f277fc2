"""Serving the echelon-centred cover grid (policy.actions.center_policy=echelon-base-stock):
the decision graph's unit table is ActionGrid.unit_table's on the echelon position, to the bit,
on random network states (rows shuffled, review days 1 and 2); `skurl export` writes the
echelon decode into the graph, and `skurl recommend` through torch (--run) and ONNX (--model)
orders from a `skurl snapshot` exactly what the trained policy orders in the simulator."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from test_parity import check_parity
from tiny_runs import echelon_onnx, echelon_run  # noqa: F401

from skurl.catalog import load_catalog
from skurl.cli import main
from skurl.config import Config, load_config
from skurl.policy.actions import SKIP, clip_orders
from skurl.policy.cover_decode import cover_greedy
from skurl.policy.grid_center import GridCenter
from skurl.policy.learned import grid_for
from skurl.policy.nets import ActorCritic
from skurl.serve.export import build_run_model, read_metadata
from skurl.serve.models import ModelInfo
from skurl.serve.recommend import decode_inputs
from skurl.serve.simulate import episode
from skurl.serve.snapshot import Snapshot, from_env
from skurl.sim import VectorEnv
from skurl.sim.api import RawState
from skurl.sim.layout import layout_for

GRID = ["catalog.synthetic.network=dc", "catalog.skus=60", "sim.days=20", "policy.actions.kind=cover",
        "policy.actions.z_center=tuned", "policy.actions.center_policy=echelon-base-stock", "policy.actions.n=14",
        "policy.actions.z_min=-3", "policy.actions.z_max=3", "policy.actions.skip=true", "policy.hidden=[8]"]


def _random_state(snap: Snapshot, rng: np.random.Generator, day: int) -> Snapshot:
    """`snap` with random stock, open orders, backlog and units owed (0 at rows with an
    outside supplier, as the simulator keeps it), on `day`."""
    n, p = snap.pipeline.shape
    assert snap.upstream is not None
    owed = np.where(snap.upstream >= 0, rng.integers(0, 40, n), 0)
    return Snapshot(**{**snap.__dict__, "on_hand": rng.integers(0, 200, n), "pipeline": rng.integers(0, 60, (n, p)),
                       "backlog": rng.integers(0, 30, n), "owed": owed, "day": np.full(n, day, np.int64)})


def _raw(s: Snapshot) -> RawState:
    return RawState(s.on_hand, s.pipeline, s.backlog, s.forecast, int(s.day[0]), s.owed)


@pytest.mark.parametrize("review_days", [1, 2])
def test_decision_table_is_the_training_grids_on_random_states(review_days: int) -> None:
    cfg: Config = load_config(None, [*GRID, f"sim.review_days={review_days}"])
    catalog = load_catalog(cfg.catalog)
    assert catalog.has_network
    rng = np.random.default_rng(11)
    ids = np.sort(np.asarray(catalog.sku_id, np.int64))
    center = GridCenter(ids, rng.normal(0.0, 1.0, ids.size), 0.0, None, echelon=True)
    grid = grid_for(cfg).with_center(center)
    bound = grid.bind(catalog)
    layout = layout_for(catalog, review_days)
    model = ActorCritic(layout.dim, grid.n, (8,))
    rm = build_run_model(model, grid, layout, "", "run", "1", "iter_000001")
    meta = rm.meta
    assert json.loads(meta["grid"])["decode"] == "echelon-cover"
    info = ModelInfo(rm.widths, json.loads(meta["obs_schema"]), json.loads(meta["grid"]), "1", cfg, center, "test")
    env = VectorEnv(catalog, cfg.sim)
    env.reset(seed=4)
    order = rng.permutation(len(catalog))  # a snapshot's rows in any order
    checked = 0
    for day in range(6):
        state = _random_state(from_env(env), rng, day)
        want = bound.unit_table(_raw(state), slice(None))
        s = state.take(order)
        rows = catalog.subset(order)
        obs = rng.normal(0.0, 3.0, (len(s), layout.dim)).astype(np.float32)
        inputs = decode_inputs(s, rows, obs, info)
        args = [torch.from_numpy(np.ascontiguousarray(inputs[k])) for k in rm.decision.input_names]
        with torch.inference_mode():
            logits, _, table = rm.decision.tables(*args)
            units, action, _ = rm.decision(*args)
        np.testing.assert_array_equal(table.numpy(), want[order])
        # the greedy decode of the same logits: the simulator policy's (policy/cover_decode.py)
        g_action, g_units = cover_greedy(bound, _raw(s.take(np.argsort(order))), slice(None),
                                         logits.numpy()[np.argsort(order)])
        np.testing.assert_array_equal(units.numpy(), clip_orders(g_units)[0][order])
        np.testing.assert_array_equal(action.numpy(), g_action[order])
        checked += int((want > 0).sum())
        env.step(np.full(len(catalog), 3.0))
    assert checked > 0
    assert (grid.values == SKIP).sum() == 1


def test_export_carries_the_echelon_decode(echelon_onnx: Path) -> None:  # noqa: F811
    meta = read_metadata(echelon_onnx)
    assert json.loads(meta["grid"])["decode"] == "echelon-cover"
    inputs = json.loads(meta["inputs"])
    assert "echelon_position" in inputs and "echelon_mean" in inputs and "forecast" not in inputs


def test_recommend_orders_what_the_policy_orders_in_the_simulator(echelon_run: Path, echelon_onnx: Path,  # noqa: F811
                                                                   tmp_path: Path) -> None:
    state, a, b = tmp_path / "state.parquet", tmp_path / "a.parquet", tmp_path / "b.parquet"
    assert main(["snapshot", "--run", str(echelon_run), "--day", "9", "--seed", "2", "--out", str(state)]) == 0
    assert main(["recommend", "--run", str(echelon_run), "--state", str(state), "--out", str(a)]) == 0
    assert main(["recommend", "--model", str(echelon_onnx), "--state", str(state), "--out", str(b)]) == 0
    *_, (snap, sim_orders) = episode(echelon_run, seed=2, days=10)
    ta, tb = pq.read_table(a), pq.read_table(b)
    np.testing.assert_array_equal(ta.column("sku_id").to_numpy(), snap.sku_id)
    np.testing.assert_array_equal(ta.column("order_units").to_numpy(), sim_orders)
    np.testing.assert_array_equal(tb.column("order_units").to_numpy(), sim_orders)
    assert ta.column("action").equals(tb.column("action"))
    actions = ta.column("action").to_numpy()
    assert np.unique(actions).size > 1 and (sim_orders > 0).any()  # not one offset everywhere, not nothing


def test_echelon_parity_with_the_simulator(echelon_run: Path, echelon_onnx: Path, tmp_path: Path) -> None:  # noqa: F811
    check_parity(echelon_run, echelon_onnx, tmp_path, days=20)
