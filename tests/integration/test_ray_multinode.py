"""--mode ray on a Ray cluster of three nodes on this machine (ray.cluster_utils.Cluster: a
head and two worker nodes, each its own raylet and object store, objects moving between
them over loopback). The actors take ray.actor_resource, which only the worker nodes have,
and spread over them; the learner and the weight slot stay on the head.

- training joins the cluster by ray.address and equals colocated bit for bit;
- a worker node removed in the middle of a run loses nothing: its simulator workers restart
  on the other node and replay their episode, its collector is replaced and re-collects
  (deploy.max_lost_share 0), and the run ends with the undisturbed run's weights."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

ray = pytest.importorskip("ray")

from ray.cluster_utils import Cluster  # noqa: E402
from test_ray_mode import config, final_weights  # noqa: E402

from skurl.config import Config  # noqa: E402
from skurl.errors import ConfigError  # noqa: E402
from skurl.modes import colocated  # noqa: E402
from skurl.modes.ray import wiring as ray_mode  # noqa: E402
from skurl.modes.ray.collectors import RayCollectors, Share  # noqa: E402
from skurl.telemetry.logger import read_metrics  # noqa: E402
from skurl.train import run as training  # noqa: E402
from skurl.train.loop import Trainer  # noqa: E402

RESOURCE, KILL_AT = "skurl_actors", 1


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    if ray.is_initialized():
        ray.shutdown()
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    for _ in range(2):
        c.add_node(num_cpus=2, resources={RESOURCE: 4})
    c.wait_for_nodes()
    yield c
    if ray.is_initialized():
        ray.shutdown()
    c.shutdown()


def on_cluster(c: Cluster, *extra: str) -> Config:
    return config(f"ray.address={c.address}", f"ray.actor_resource={RESOURCE}", "ray.spread=true",
                  "ray.collectors=2", "ppo.reward_scale=sku", "deploy.max_lost_share=0", *extra)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("colocated")
    training.start(colocated.mode, config("ppo.reward_scale=sku"), run_dir, baseline=False)
    return run_dir


def actor_nodes() -> dict[str, set[str]]:
    """Node id -> class names of the live actors on it (the GCS's table; no dashboard)."""
    from ray._private import state

    nodes: dict[str, set[str]] = {}
    for info in state.actors().values():
        if info["State"] == "ALIVE":
            nodes.setdefault(info["Address"]["NodeID"], set()).add(info["ActorClassName"])
    return nodes


def test_training_across_nodes_equals_colocated(cluster: Cluster, reference: Path, tmp_path: Path) -> None:
    seen: dict[str, set[str]] = {}

    class Watching(RayCollectors):
        def _send(self, share: Share, seed: int, episode: int, version: int) -> Any:
            seen.update(actor_nodes())
            return super()._send(share, seed, episode, version)

    run = Trainer(on_cluster(cluster), tmp_path / "run", ray_mode.RayMode(on_cluster(cluster)), baseline=False)
    run.collectors.fanout = Watching  # type: ignore[attr-defined]
    run.run()
    head = cluster.head_node.node_id
    workers = {n.node_id for n in cluster.worker_nodes}
    assert "SimWorker" not in seen.get(head, set()) and "CollectorWorker" not in seen.get(head, set())
    assert "WeightSlot" in seen[head]
    assert sum("SimWorker" in seen.get(n, set()) for n in workers) == 2, seen  # spread over both
    want, got = final_weights(reference), final_weights(tmp_path / "run")
    for k in want:
        assert torch.equal(want[k], got[k]), k


def test_a_worker_node_lost_mid_run_loses_nothing(cluster: Cluster, reference: Path, tmp_path: Path) -> None:
    victim = next(n for n in cluster.worker_nodes)
    removed: list[set[str]] = []

    class NodeKilling(RayCollectors):
        def _send(self, share: Share, seed: int, episode: int, version: int) -> Any:
            ref = super()._send(share, seed, episode, version)
            if episode == KILL_AT and not removed:
                removed.append(actor_nodes().get(victim.node_id, set()))
                cluster.remove_node(victim, allow_graceful=False)
            return ref

    run = Trainer(on_cluster(cluster), tmp_path / "run", ray_mode.RayMode(on_cluster(cluster)), baseline=False)
    run.collectors.fanout = NodeKilling  # type: ignore[attr-defined]
    run.run()
    assert removed and {"SimWorker", "CollectorWorker"} & removed[0], removed  # the node held actors
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    skus, days = run.cfg.catalog.skus, run.cfg.sim.days
    assert records[KILL_AT]["lost_collectors"] >= 1  # lost, then collected again in full:
    assert all(r["transitions"] == days * skus for r in records), [r["transitions"] for r in records]
    want, got = final_weights(reference), final_weights(tmp_path / "run")
    for k in want:
        assert torch.equal(want[k], got[k]), k


def test_an_actor_resource_the_cluster_lacks_is_a_config_error(cluster: Cluster, tmp_path: Path) -> None:
    cfg = on_cluster(cluster, "ray.actor_resource=no_such_nodes")
    with pytest.raises(ConfigError, match=r"ray\.actor_resource"):
        training.start(ray_mode.mode, cfg, tmp_path / "run", baseline=False)
