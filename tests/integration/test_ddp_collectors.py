"""The torchrun DDP learner on real collectors: `skurl serve-sim` and `skurl collector`
processes on loopback, weights through a real Redis, shards through an S3-compatible
store (moto_server), `python -m skurl.modes.ddp.learner` (gloo). With warm start,
keep-best and an evaluation every iteration, one rank is `--mode colocated` bit for bit
(weights and records); two ranks equal it within float tolerance (they sum their
gradients in another order than one), and rank 0's warm start is colocated's exactly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from skurl.config import load_config
from skurl.learn.checkpoint import best_checkpoint, latest_checkpoint, model_state
from skurl.modes import colocated
from skurl.modes.ddp.learner import ENTRY
from skurl.modes.decoupled.supervisor import LocalCluster
from skurl.train import run as training

SETTINGS = [
    "catalog.skus=240", "sim.days=8", "policy.hidden=[16,16]", "ppo.epochs=2", "ppo.minibatch=256",
    "train.iterations=2", "train.checkpoint_every=1", "train.eval_every=1", "train.torch_threads=1",
    "sim.threads=1", "collect.infer_dtype=float32", "deploy.sim_servers=2", "deploy.collectors=2",
    "train.keep_best=true", "train.warm_start=base-stock", "train.warm_start_episodes=1",
    "train.warm_start_steps=20", "train.warm_start_critic=1", "eval.days=20", "eval.warmup=5", "eval.skus=60",
    "sync.timeout_s=120", "rpc.timeout_s=120",  # generous: a shared 2-core machine
]
# What must agree between the runs' metrics.jsonl records: the warm start's figures (rank 0
# alone clones, as colocated does) and every evaluation.
WARM_KEYS = ("warm_start_eval_profit", "warm_start_eval_cost", "warm_start_tuned_objective")
EVAL_KEYS = ("eval_profit", "eval_cost", "validation_score")


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    path = latest_checkpoint(run_dir)
    assert path is not None, f"no checkpoint in {run_dir}"
    state, meta = model_state(path)
    assert meta["iteration"] == 2
    return state


def records(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def ddp(nproc: int, run_dir: Path, settings: list[str]) -> str:
    cmd = [sys.executable, "-m", ENTRY, "--nproc", str(nproc), "--run-dir", str(run_dir), "--no-baseline",
           "--wait-s", "120", "--metrics-port", "0", *[a for s in settings for a in ("--set", s)]]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.splitlines()[-1]


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(1800)
def test_ddp_learner_on_real_collectors_is_the_colocated_run(
        tmp_path: Path, redis_url: str, s3_endpoint: str, s3_credentials: None, unique_name: str) -> None:
    reference = tmp_path / "colocated"
    training.start(colocated.mode, load_config(None, SETTINGS), reference, baseline=False)

    remote = [*SETTINGS, "sync.backend=redis", f"sync.redis_url={redis_url}", f"sync.key={unique_name}",
              f"store.url=s3://{unique_name}/rollouts", f"store.endpoint_url={s3_endpoint}",
              "store.create_bucket=true"]
    cluster = LocalCluster(load_config(None, remote), tmp_path / "cluster", weights_address=None)
    try:
        cluster.start()
        settings = [*remote, f"deploy.collector_addresses=[{','.join(cluster.collector_addresses)}]"]
        summaries = {n: json.loads(ddp(n, tmp_path / f"ddp{n}", settings)) for n in (1, 2)}
    finally:
        cluster.stop()
    assert [summaries[n]["world"] for n in (1, 2)] == [1, 2]
    assert all(s["metrics"].startswith("http://127.0.0.1:") for s in summaries.values())  # rank 0's /metrics

    want = weights(reference)
    one, two = weights(tmp_path / "ddp1"), weights(tmp_path / "ddp2")
    assert set(one) == set(two) == set(want)
    for k in want:
        assert torch.equal(one[k], want[k]), k  # one rank: the colocated learner bit for bit
        assert torch.allclose(two[k], want[k], rtol=1e-4, atol=1e-5), (k, (two[k] - want[k]).abs().max())

    ref = records(reference)
    for n, tolerance in ((1, 0.0), (2, 1e-3)):
        got = records(tmp_path / f"ddp{n}")
        assert [r["iteration"] for r in got] == [r["iteration"] for r in ref] == [0, 1]
        assert all(got[0][k] == ref[0][k] for k in WARM_KEYS), n  # the same warm start: rank 0's
        for mine, theirs in zip(got, ref, strict=True):
            assert [k for k in EVAL_KEYS if k in mine] == list(EVAL_KEYS)  # evaluated every iteration
            for k in EVAL_KEYS:
                assert mine[k] == pytest.approx(theirs[k], rel=tolerance, abs=tolerance), (n, k)
        best = best_checkpoint(tmp_path / f"ddp{n}")
        assert best is not None  # train.keep_best kept a policy
        assert model_state(best)[1]["iteration"] == model_state(best_checkpoint(reference))[1]["iteration"]
