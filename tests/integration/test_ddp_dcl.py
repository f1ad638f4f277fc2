"""train.algo=dcl under the torchrun DDP learner on real collectors (`skurl serve-sim`,
`skurl collector` processes, weights through Redis, label shards through moto_server's S3):
rank 0 has the two collectors label their own SKUs and broadcasts the parts; every rank
fits on its slice of each minibatch (modes/ddp/labellers.py). One rank gives the colocated
weights bit for bit; two ranks within float tolerance (their gradients summed in another
order)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_dcl_training import DCL
from test_ddp_collectors import ddp, records

from skurl.config import load_config
from skurl.learn.checkpoint import latest_checkpoint, model_state
from skurl.modes import colocated
from skurl.modes.decoupled.supervisor import LocalCluster
from skurl.train import run as training

SETTINGS = [*DCL, "train.iterations=2", "deploy.sim_servers=2", "deploy.collectors=2", "sync.timeout_s=120",
            "rpc.timeout_s=120"]


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    path = latest_checkpoint(run_dir)
    assert path is not None, f"no checkpoint in {run_dir}"
    return model_state(path)[0]


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(1800)
def test_ddp_dcl_on_real_collectors_is_the_colocated_run(
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
        for n in (1, 2):
            ddp(n, tmp_path / f"ddp{n}", settings)
    finally:
        cluster.stop()
    want = weights(reference)
    one, two = weights(tmp_path / "ddp1"), weights(tmp_path / "ddp2")
    assert set(one) == set(two) == set(want)
    for k in want:
        assert torch.equal(one[k], want[k]), k
        assert torch.allclose(two[k], want[k], rtol=1e-4, atol=1e-5), (k, (two[k] - want[k]).abs().max())
    ref = records(reference)
    for n in (1, 2):
        got = records(tmp_path / f"ddp{n}")
        assert [r["iteration"] for r in got] == [r["iteration"] for r in ref]
        for mine, theirs in zip(got, ref, strict=True):  # the same labels and check on every rank count
            assert mine["transitions"] == theirs["transitions"] and mine["dcl_accepted"] == theirs["dcl_accepted"]
            assert mine["dcl_label_shards_stored"] == 2 * (1 + mine["dcl_corrections"])  # the collectors labelled
