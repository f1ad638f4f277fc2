"""The Collectors contract (collect/collectors.py), over the in-process collectors and the
gRPC ones (collector and sim servers on loopback in this process, shards through a local
rollout store): the same weights, seed and episode give the same Rollout bit for bit, in
catalog row order, with the learner's SKU sample's observations only when it names one.
(Ray's collectors are held to the same rollouts by tests/integration/test_ray_mode.py.)"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from skurl.buffer.assemble import ShardAssembly
from skurl.buffer.rollout import Rollout
from skurl.catalog import load_catalog
from skurl.collect.collectors import Collectors, LocalCollectors
from skurl.collect.evaluate import make_env
from skurl.config import Config, load_config
from skurl.policy.learned import grid_for
from skurl.policy.nets import ActorCritic
from skurl.sim.layout import catalog_widths, layout_for
from skurl.store import open_store
from skurl.sync.inproc import InProcWeights
from skurl.sync.wire_versions import WireVersions
from skurl.telemetry.stages import StageTimer

SETTINGS = ["catalog.skus=90", "sim.days=6", "policy.hidden=[16,16]", "sim.threads=1",
            "train.infer_dtype=float32", "deploy.sim_servers=2", "deploy.collectors=2",
            "sync.backend=grpc", "sync.timeout_s=30", "rpc.timeout_s=60"]
SEED = 11


def config(store: Path) -> Config:
    return load_config(None, [*SETTINGS, f"store.url={store}"])


def model_for(cfg: Config) -> ActorCritic:
    catalog = load_catalog(cfg.catalog)
    torch.manual_seed(3)
    return ActorCritic(layout_for(catalog, cfg.sim.review_days).schema.dim, grid_for(cfg).n,
                       cfg.policy.hidden)


def local(cfg: Config, model: ActorCritic) -> Iterator[Collectors]:
    catalog = load_catalog(cfg.catalog)
    weights = InProcWeights()
    weights.publish(0, model.state_dict())
    env = make_env(catalog, cfg.sim, catalog_widths(catalog))
    t = cfg.train
    yield LocalCollectors(lambda shard: env, 1, ActorCritic.from_state(model.state_dict()), grid_for(cfg),
                          weights, StageTimer(prometheus=False), chunk=t.chunk, infer_dtype=t.infer_dtype,
                          record_values=t.collect_values)


def grpc(cfg: Config, model: ActorCritic) -> Iterator[Collectors]:
    from skurl.deploy.decoupled import HostedWeights, InProcessRoles
    from skurl.deploy.decoupled_run import GrpcCollectors, WirePublisher

    catalog = load_catalog(cfg.catalog)
    hosted = HostedWeights(cfg)
    roles = InProcessRoles(cfg, hosted.address)
    store = open_store(cfg.store)
    wire = WirePublisher(hosted, WireVersions(Path(cfg.store.url) / "wire.jsonl"))
    assembly = ShardAssembly(catalog.sku_id, cfg.sim.days, model.obs_dim)
    collectors = GrpcCollectors(cfg, roles.collector_addresses, store, wire, model.state_dict, assembly,
                                StageTimer(prometheus=False), grid_center=("", ""), run_name="contract",
                                resumed=False)
    try:
        yield collectors
    finally:
        collectors.close()
        roles.close()
        hosted.close()


IMPLEMENTATIONS: dict[str, Callable[[Config, ActorCritic], Iterator[Collectors]]] = {
    "local": local, "grpc": grpc}


@pytest.fixture(scope="module")
def rollouts(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Rollout]:
    """Each implementation's rollout of episode 0, with and without a SKU sample."""
    out = {}
    samples: dict[str, Callable[[int], Any]] = {"all": lambda n: None,
                                                "sample": lambda n: np.arange(0, n, 4)}
    for name, make in IMPLEMENTATIONS.items():
        cfg = config(tmp_path_factory.mktemp(name))
        parts = make(cfg, model_for(cfg))
        collectors = next(parts)
        try:
            for label, sample in samples.items():
                out[name, label] = collectors.collect(0, SEED, 0, sample).rollout
        finally:
            parts.close()
    return out


@pytest.mark.integration
@pytest.mark.parametrize("name", [n for n in IMPLEMENTATIONS if n != "local"])
@pytest.mark.parametrize("label", ["all", "sample"])
def test_every_implementation_collects_the_in_process_rollout(
        rollouts: dict[tuple[str, str], Rollout], name: str, label: str) -> None:
    want, got = rollouts["local", label], rollouts[name, label]
    for key, a in want.arrays().items():
        b = got.arrays()[key]
        assert a.dtype == b.dtype and a.shape == b.shape, key
        assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), key
    if label == "sample":
        assert got.obs.shape[1] == got.num_skus // 4 + (got.num_skus % 4 > 0)
    assert (got.seed, got.episode, got.policy_version) == (SEED, 0, 0)
