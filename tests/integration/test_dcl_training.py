"""train.algo=dcl in the one loop (train/dcl_step.py): a warm-started run labels states by
CRN rollouts and fits the policy each iteration; resumed after a stop it ends bit for bit
where a run never stopped ends, and decoupled mode (its labelling in the learner's
process) trains the same weights as colocated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from test_decoupled import final_weights

from skurl.config import load_config
from skurl.errors import ConfigError
from skurl.learn.checkpoint import latest_checkpoint
from skurl.modes import colocated
from skurl.modes.decoupled import wiring as decoupled
from skurl.store import ShardManifest
from skurl.telemetry.logger import read_metrics
from skurl.train import run as training

DCL = [
    "catalog.kind=uniform", "catalog.skus=60", "catalog.lead_time=2", "catalog.lost_sale_cost=9",
    "sim.days=24", "sim.backorders=false", "sim.reward=cost", "policy.actions.kind=units", "policy.actions.n=12",
    "policy.actions.step=1", "policy.hidden=[16,16]", "train.algo=dcl", "train.iterations=3",
    "train.checkpoint_every=1", "train.eval_every=0", "train.warm_start=capped-base-stock",
    "train.warm_start_steps=30", "train.warm_start_skus=60", "eval.days=10", "eval.warmup=2",
    "dcl.states=60", "dcl.budget=12", "dcl.warmup=3", "dcl.spread=3", "dcl.fit_steps=20", "dcl.temperature=1",
    "train.torch_threads=1", "sim.threads=1", "collect.infer_dtype=float32",
    "deploy.sim_servers=1", "deploy.collectors=1", "sync.timeout_s=20",
]


def test_dcl_run_resumes_bit_exactly_and_records_its_labelling(tmp_path: Path) -> None:
    cfg = load_config(None, DCL)
    training.start(colocated.mode, cfg, tmp_path / "straight", baseline=False)
    training.start(colocated.mode, cfg, tmp_path / "stopped", stop_after=2, baseline=False)
    training.resume(colocated.mode, tmp_path / "stopped", baseline=False)
    want, got = final_weights(tmp_path / "straight"), final_weights(tmp_path / "stopped")
    assert set(want) == set(got)
    for k in want:
        assert torch.equal(want[k], got[k]), k
    records = read_metrics(tmp_path / "straight" / "metrics.jsonl")
    assert [r["policy_version"] for r in records] == [2, 3, 4]  # the clone is version 1
    for r in records:
        assert r["transitions"] == 60 * (1 + r["dcl_corrections"]) and r["dcl_horizon"] == 12  # 4 x (L 2 + 1)
        assert 0 <= r["dcl_label_changed"] <= 1 and r["dcl_rollout_sku_days"] > 0
        assert r["rollout_sku_days_per_s"] > 0 and 0 <= r["dcl_fit_accuracy"] <= 1
    assert records[0]["dcl_q_gap"] >= 0  # Q(best) - Q(own action) on paired rollouts
    evaluated = json.loads((tmp_path / "straight" / "eval.json").read_text())
    assert evaluated["policies"][evaluated["trained"]]["avg_cost_per_sku_day"] > 0
    assert "| dcl_fit_accuracy |" in (tmp_path / "straight" / "report.md").read_text()  # its diagnostics


class Crash(Exception):
    """The learner dying mid-labelling."""


def test_a_run_killed_mid_labelling_resumes_to_the_undisturbed_weights(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The learner dies in iteration 1's labelling, after its first planned day was labelled;
    the resumed run redoes the iteration's labelling from (seed, iteration)."""
    from skurl.learn import dcl_parts

    cfg = load_config(None, [*DCL, "train.iterations=2"])
    training.start(colocated.mode, cfg, tmp_path / "straight", baseline=False)
    label_rows, calls = dcl_parts.label_rows, []

    def die_in_iteration_1(env, rows, *args, **kwargs):
        calls.append(1)
        out = label_rows(env, rows, *args, **kwargs)
        if len(calls) == 4:  # iteration 0 labels 3 days (dcl.spread) and passes its check
            raise Crash("killed mid-labelling")
        return out

    monkeypatch.setattr(dcl_parts, "label_rows", die_in_iteration_1)
    with pytest.raises(Crash):
        training.start(colocated.mode, cfg, tmp_path / "killed", baseline=False)
    kept = latest_checkpoint(tmp_path / "killed")
    assert kept is not None and kept.name == "iter_000001"  # iteration 0 done, 1 died labelling
    monkeypatch.setattr(dcl_parts, "label_rows", label_rows)
    training.resume(colocated.mode, tmp_path / "killed", baseline=False)
    want, got = final_weights(tmp_path / "straight"), final_weights(tmp_path / "killed")
    for k in want:
        assert torch.equal(want[k], got[k]), k


@pytest.mark.slow
def test_decoupled_dcl_trains_what_colocated_trains(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """2 sim servers, 2 collectors: each collector labels its own SKUs (Label RPC), its parts
    through the rollout store; the learner fits on the union. The first part read is damaged
    on disk: refused by its checksum and asked again."""
    from skurl.modes.decoupled import labellers
    from skurl.store.objects import payload_key

    read, damaged = labellers.GrpcLabellers._read, []

    def damage_first(self, reply):
        if not damaged:
            manifest = ShardManifest.from_json(reply.manifest_json.encode(), "test")
            path = tmp_path / "store" / payload_key(manifest)
            data = bytearray(path.read_bytes())
            data[len(data) // 2] ^= 0xFF
            path.write_bytes(bytes(data))
            damaged.append(manifest.name)
        return read(self, reply)

    monkeypatch.setattr(labellers.GrpcLabellers, "_read", damage_first)
    cfg = load_config(None, [*DCL, "train.iterations=2", "sync.backend=grpc", "deploy.sim_servers=2",
                             "deploy.collectors=2", f"store.url={tmp_path / 'store'}"])
    training.start(colocated.mode, cfg, tmp_path / "colocated", baseline=False)
    training.start(decoupled.launched, cfg, tmp_path / "decoupled", baseline=False)
    want, got = final_weights(tmp_path / "colocated"), final_weights(tmp_path / "decoupled")
    for k in want:
        assert torch.equal(want[k], got[k]), k
    records = read_metrics(tmp_path / "decoupled" / "metrics.jsonl")
    assert len(damaged) == 1 and records[0]["dcl_label_shards_refused"] == 1
    for r in records:
        assert r["dcl_label_shards_stored"] == 2 * (1 + r["dcl_corrections"])  # one part per collector
        assert 0 <= r["dcl_label_collector_idle_share"] <= 1 and r["dcl_check_collector_seconds_max"] > 0


def test_dcl_refuses_staleness() -> None:
    with pytest.raises(ConfigError, match=r"collect\.staleness.*train\.algo=dcl"):
        load_config(None, ["train.algo=dcl", "collect.staleness=1"])


def test_dcl_labels_each_iterations_training_shard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """collect.skus splits the catalog into shards visited round robin; DCL labels
    iteration k's shard, as PPO collects it, so every SKU's states are labelled in turn."""
    from skurl.learn import labelling

    labelled: list[frozenset[int]] = []

    def spy(env, *args, **kwargs):
        if kwargs.get("part", 0) == 0:  # an iteration's first labelling (a correction labels the same shard)
            labelled.append(frozenset(env.catalog.sku_id.tolist()))
        return label_part(env, *args, **kwargs)

    label_part = labelling.label_part
    monkeypatch.setattr(labelling, "label_part", spy)
    cfg = load_config(None, [*DCL, "collect.skus=30", "dcl.states=30"])
    training.start(colocated.mode, cfg, tmp_path / "run", baseline=False)
    assert [len(s) for s in labelled] == [30, 30, 30]
    assert labelled[0] != labelled[1] and labelled[2] == labelled[0]  # two shards, in turn
    assert labelled[0] | labelled[1] == set(range(60))


def test_a_candidate_worse_than_its_predecessor_is_corrected_then_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Labels that all say "order nothing" fit a candidate that starves every SKU: the paired
    check refuses it, a correction labels the candidate's own states (here again all 0),
    and the iteration keeps the policy it started from."""
    from skurl.learn import labelling

    calls: list[tuple[int, bool]] = []
    before: list[dict[str, torch.Tensor]] = []

    def starve(env, plan, policy, *args, **kwargs):
        calls.append((kwargs.get("part", 0), kwargs.get("sampler") is not None))
        if not before:
            before.append({k: v.clone() for k, v in policy.model.state_dict().items()})
        out = label_part(env, plan, policy, *args, **kwargs)
        out.labels[:] = 0
        return out

    label_part = labelling.label_part
    monkeypatch.setattr(labelling, "label_part", starve)
    cfg = load_config(None, [*DCL, "train.iterations=1", "dcl.temperature=0", "dcl.fit_steps=200",
                             "dcl.corrections=1"])
    training.start(colocated.mode, cfg, tmp_path / "run", baseline=False)
    assert calls == [(0, False), (1, True)]  # the labelling, then one correction (dcl.corrections=1)
    (record,) = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert record["dcl_accepted"] == 0 and record["dcl_corrections"] == 1 and record["transitions"] == 120
    assert record["dcl_check_gain"] < -cfg.dcl.check_z * record["dcl_check_se"] < 0
    assert record["dcl_first_check_gain"] < 0  # the uncorrected candidate's
    assert record["policy_version"] == 2  # a version all the same: the iteration happened
    kept = final_weights(tmp_path / "run")
    for k, v in before[0].items():
        assert torch.equal(kept[f"model/{k}"], v), k


def test_an_accepted_iteration_records_its_check(tmp_path: Path) -> None:
    cfg = load_config(None, [*DCL, "train.iterations=1", "dcl.corrections=0"])
    training.start(colocated.mode, cfg, tmp_path / "run", baseline=False)
    (record,) = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert record["dcl_corrections"] == 0 and record["dcl_accepted"] in (0.0, 1.0)
    assert record["dcl_accepted"] == float(record["dcl_check_gain"] >= -cfg.dcl.check_z * record["dcl_check_se"])
    unchecked = load_config(None, [*DCL, "train.iterations=1", "dcl.check_episodes=0"])
    training.start(colocated.mode, unchecked, tmp_path / "unchecked", baseline=False)
    (record,) = read_metrics(tmp_path / "unchecked" / "metrics.jsonl")
    assert record["dcl_accepted"] == 1 and "dcl_check_gain" not in record
