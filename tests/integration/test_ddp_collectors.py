"""The torchrun DDP learner on real collectors: `skurl serve-sim` and `skurl collector`
processes on loopback, weights through a real Redis, shards through an S3-compatible
store (moto_server), `python -m skurl.learn --nproc 2` (gloo). Its weights equal the
co-located run's on the same config and seed within float tolerance (2 ranks sum their
gradients in another order than one)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from skurl.config import load_config
from skurl.deploy import colocated
from skurl.deploy.decoupled import LocalCluster
from skurl.learn.checkpoint import latest_checkpoint, model_state

SETTINGS = [
    "catalog.skus=240", "sim.days=8", "policy.hidden=[16,16]", "ppo.epochs=2", "ppo.minibatch=256",
    "train.iterations=2", "train.checkpoint_every=1", "train.eval_every=0", "train.torch_threads=1",
    "sim.threads=1", "train.infer_dtype=float32", "deploy.sim_servers=2", "deploy.collectors=2",
    "sync.timeout_s=120", "rpc.timeout_s=120",  # generous: a shared 2-core machine
]


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    path = latest_checkpoint(run_dir)
    assert path is not None, f"no checkpoint in {run_dir}"
    state, meta = model_state(path)
    assert meta["iteration"] == 2
    return state


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(1200)
def test_torchrun_learner_on_real_collectors_matches_colocated(
        tmp_path: Path, redis_url: str, s3_endpoint: str, s3_credentials: None, unique_name: str) -> None:
    reference = tmp_path / "colocated"
    colocated.train(load_config(None, SETTINGS), reference, baseline=False)

    remote = [*SETTINGS, "sync.backend=redis", f"sync.redis_url={redis_url}", f"sync.key={unique_name}",
              f"store.url=s3://{unique_name}/rollouts", f"store.endpoint_url={s3_endpoint}",
              "store.create_bucket=true"]
    cluster = LocalCluster(load_config(None, remote), tmp_path / "cluster", weights_address=None)
    run_dir = tmp_path / "ddp"
    try:
        cluster.start()
        addresses = ",".join(cluster.collector_addresses)
        settings = [*remote, f"deploy.collector_addresses=[{addresses}]"]
        cmd = [sys.executable, "-m", "skurl.learn", "--nproc", "2", "--run-dir", str(run_dir),
               "--wait-s", "120", *[a for s in settings for a in ("--set", s)]]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    finally:
        cluster.stop()
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert '"world": 2' in proc.stdout.splitlines()[-1]
    got, want = weights(run_dir), weights(reference)
    assert set(got) == set(want)
    for k in want:
        assert torch.allclose(got[k], want[k], rtol=1e-4, atol=1e-5), (k, (got[k] - want[k]).abs().max())
