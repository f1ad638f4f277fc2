"""train.algo=dcl on a catalog with supply networks (docs/dcl.md, "Supply networks in the
rollouts"): a tiny dc catalog with the echelon-centred grid trains two iterations, every
rollout clone bringing its whole network, and the same seed gives the same weights twice."""

from __future__ import annotations

from pathlib import Path

import torch
from test_decoupled import final_weights

from skurl.config import load_config
from skurl.modes import colocated
from skurl.telemetry.logger import read_metrics
from skurl.train import run as training

DC_DCL = [
    "catalog.skus=80", "catalog.synthetic.network=dc", "sim.days=24", "sim.backorders=false",
    "sim.substitution=false", "policy.actions.kind=cover", "policy.actions.z_center=tuned",
    "policy.actions.center_policy=echelon-base-stock", "policy.actions.n=9", "policy.actions.z_min=-2",
    "policy.actions.z_max=2", "policy.hidden=[16,16]", "train.algo=dcl", "train.iterations=2",
    "train.checkpoint_every=1", "train.eval_every=0", "train.warm_start=echelon-base-stock",
    "train.warm_start_steps=20", "eval.days=10", "eval.warmup=2", "dcl.states=40", "dcl.budget=6",
    "dcl.horizon=10", "dcl.warmup=3", "dcl.spread=2", "dcl.fit_steps=10", "dcl.check_episodes=1",
    "train.torch_threads=1", "sim.threads=1", "collect.infer_dtype=float32",
]


def test_dcl_trains_on_dc_networks_deterministically(tmp_path: Path) -> None:
    cfg = load_config(None, DC_DCL)
    training.start(colocated.mode, cfg, tmp_path / "a", baseline=False)
    training.start(colocated.mode, cfg, tmp_path / "b", baseline=False)
    want, got = final_weights(tmp_path / "a"), final_weights(tmp_path / "b")
    assert set(want) == set(got)
    for k in want:
        assert torch.equal(want[k], got[k]), k
    records = read_metrics(tmp_path / "a" / "metrics.jsonl")
    assert [r["policy_version"] for r in records] == [2, 3]  # the clone is version 1
    for r in records:
        assert r["transitions"] == 40 * (1 + r["dcl_corrections"]) and r["dcl_rollout_sku_days"] > 0
        assert r["dcl_rollout_row_days"] > r["dcl_rollout_sku_days"]  # each state's network rides along
        assert 0 <= r["dcl_label_changed"] <= 1
    assert records[0]["dcl_q_gap"] >= 0
