"""The Collectors contract (collect/collectors.py), over the three implementations: in
process, gRPC (collector and sim servers on loopback in this process, shards through a
local rollout store) and Ray actors (a local Ray instance). The same weights, seed and
episode give the same Rollout bit for bit, in catalog row order; a collector may keep only
the observations of the learner's SKU sample when it names one. Faults are injected by
wrapping: a store that loses or corrupts a shard (collected again, the same rollout), a
collector that dies (the collector-loss rule: the survivors' SKUs, bit for bit)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
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
from skurl.store import CorruptShardError, open_store
from skurl.sync.inproc import InProcWeights
from skurl.sync.wire import WireVersions
from skurl.telemetry.stages import StageTimer

SETTINGS = ["catalog.skus=90", "sim.days=6", "policy.hidden=[16,16]", "sim.threads=1",
            "collect.infer_dtype=float32", "deploy.sim_servers=2", "deploy.collectors=2",
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
    yield LocalCollectors(lambda shard: env, 1, ActorCritic.from_state(model.state_dict()), grid_for(cfg),
                          weights, StageTimer(prometheus=False), collect=cfg.collect)


def grpc(cfg: Config, model: ActorCritic) -> Iterator[Collectors]:
    from skurl.modes.decoupled.grpc_collectors import GrpcCollectors
    from skurl.modes.decoupled.supervisor import InProcessRoles
    from skurl.sync.grpc import HostedGrpcWeights
    from skurl.sync.wire import WirePublisher

    catalog = load_catalog(cfg.catalog)
    hosted = HostedGrpcWeights(cfg.rpc, cfg.sync.key, port=cfg.deploy.weights_port)
    roles = InProcessRoles(cfg, hosted.address)
    store = open_store(cfg.store)
    wire = WirePublisher(hosted, WireVersions(Path(cfg.store.url) / "wire.jsonl"))
    assembly = ShardAssembly(catalog.sku_id, cfg.sim.days, model.obs_dim)
    collectors = GrpcCollectors(cfg, roles.collector_addresses, store, wire, model.state_dict, assembly,
                                StageTimer(prometheus=False), grid_center=("", ""), run_name="contract",
                                resumed=False)
    collectors.roles = roles  # type: ignore[attr-defined]  # tests stop a collector
    try:
        yield collectors
    finally:
        collectors.close()
        roles.close()
        hosted.close()


def on_ray(cfg: Config, model: ActorCritic) -> Iterator[Collectors]:
    pytest.importorskip("ray")
    from skurl.modes.ray.cluster import RayCluster
    from skurl.train.core import build_core

    cfg = load_config(None, [*SETTINGS, f"store.url={cfg.store.url}", "sync.backend=inproc", "ray.num_cpus=2",
                             "ray.num_workers=2"])
    core = build_core(cfg, Path(cfg.store.url), resume=False, tune_center=False)
    cluster = RayCluster(cfg, core, ActorCritic.from_state(model.state_dict()))
    try:
        learner: Any = SimpleNamespace(version=0, iteration=0, weights=model.state_dict)
        collectors, _ = cluster.wire(learner)
        yield collectors
    finally:
        cluster.close()


IMPLEMENTATIONS: dict[str, Callable[[Config, ActorCritic], Iterator[Collectors]]] = {
    "local": local, "grpc": grpc, "ray": on_ray}


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
    if got.obs_sku_ids is None and want.obs_sku_ids is not None:  # it kept every SKU's observations
        kept = np.searchsorted(got.sku_ids, want.obs_sku_ids)
        got = dataclasses.replace(got, obs=got.obs[:, kept], last_obs=got.last_obs[kept],
                                  obs_sku_ids=want.obs_sku_ids)
    assert_same_rollout(want, got)
    if label == "sample":
        assert got.obs.shape[1] == got.num_skus // 4 + (got.num_skus % 4 > 0)
    assert (got.seed, got.episode, got.policy_version) == (SEED, 0, 0)


def assert_same_rollout(want: Rollout, got: Rollout) -> None:
    for key, a in want.arrays().items():
        b = got.arrays()[key]
        assert a.dtype == b.dtype and a.shape == b.shape, key
        assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), key


class LosingStore:
    """Around the rollout store: the first listing leaves out collector c1's shard, the first
    read of c0's shard comes back damaged (each once)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.lost, self.damaged = inner, False, False

    def list_shards(self, iteration: int) -> Any:
        listed = self.inner.list_shards(iteration)
        if not self.lost:
            self.lost = True
            return [m for m in listed if m.collector_id != "c1"]
        return listed

    def get_shard(self, manifest: Any) -> Any:
        if manifest.collector_id == "c0" and not self.damaged:
            self.damaged = True
            raise CorruptShardError(manifest.name, "sha256 mismatch (injected)")
        return self.inner.get_shard(manifest)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.mark.integration
def test_a_lost_or_damaged_shard_is_collected_again_to_the_same_rollout(
        rollouts: dict[tuple[str, str], Rollout], tmp_path: Path) -> None:
    cfg = config(tmp_path)
    parts = grpc(cfg, model_for(cfg))
    collectors: Any = next(parts)
    try:
        collectors.store = store = LosingStore(collectors.store)
        got = collectors.collect(0, SEED, 0, lambda n: None)
    finally:
        parts.close()
    assert store.lost and store.damaged
    assert_same_rollout(rollouts["local", "all"], got.rollout)
    assert got.scalars["recollected_shares"] == 2 and got.scalars["corrupt_shards"] == 1


@pytest.mark.integration
def test_a_dead_collector_within_max_lost_share_leaves_the_survivors_rollout(
        rollouts: dict[tuple[str, str], Rollout], tmp_path: Path) -> None:
    cfg = dataclasses.replace(config(tmp_path), deploy=dataclasses.replace(
        config(tmp_path).deploy, max_lost_share=0.6, reconnect_timeout_s=5.0))
    parts = grpc(cfg, model_for(cfg))
    collectors: Any = next(parts)
    try:
        collectors.roles.collectors.pop(1).close()  # collector c1 dies: its calls fail as unavailable
        got = collectors.collect(0, SEED, 0, lambda n: None)
    finally:
        parts.close()
    want = rollouts["local", "all"]
    kept = np.flatnonzero(np.isin(want.sku_ids, got.rollout.sku_ids))
    assert 0 < kept.size < want.num_skus and got.scalars["lost_skus"] == want.num_skus - kept.size
    assert got.scalars["lost_collectors"] == 1 and got.scalars["lost_recollected"] == 0
    assert_same_rollout(want.select_skus(kept), got.rollout)
