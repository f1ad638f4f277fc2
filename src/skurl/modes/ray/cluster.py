"""The Ray actors of --mode ray: ray.num_workers SimWorker actors simulate each SKU set
(partitioned by deploy.partition, substitution groups together), driven by ray.collectors
CollectorWorker actors that see their workers' shards as one env, take weights from a Ray
weight slot and hand rollouts back through the object store or the rollout store.

Faults: a dead simulator worker is restarted or replaced and its shard replayed
(actors.py); a collector that dies mid-iteration is replaced, and its share is either left
out of that iteration or re-collected (deploy.max_lost_share; collectors.py)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from skurl.collect.collectors import (
    Collected,
    Collectors,
    NewestWeights,
    SampleIndex,
    WeightSource,
    reward_spread,
)
from skurl.config import Config, RayConfig
from skurl.errors import ConfigError
from skurl.modes.ray.collectors import CollectorsLost, Placement, RayCollectors, Share

if TYPE_CHECKING:
    from skurl.learn.learner import Learner
    from skurl.policy.nets import ActorCritic
    from skurl.store.api import RolloutStore
    from skurl.sync.api import WeightBackend
    from skurl.sync.ray import RayWeights
    from skurl.telemetry.stages import StageTimer
    from skurl.train.core import RunCore


def start_ray(rc: RayConfig) -> bool:
    """Join ray.address, or start a local instance without the dashboard. False when Ray
    was already initialized in this process (then it is left running)."""
    import ray

    if ray.is_initialized():
        return False
    common: dict[str, Any] = {"include_dashboard": False, "configure_logging": False}
    if rc.address:
        ray.init(address=rc.address, **common)
        return True
    local = {"num_cpus": rc.num_cpus or os.cpu_count() or 1, **common}
    try:
        ray.init(**local)
    except RuntimeError as exc:  # a local GCS that missed its start-up deadline on a busy machine: once more
        if "Timed out waiting for file" not in str(exc):
            raise
        ray.shutdown()
        ray.init(**local)
    return True


def check_resources(rc: RayConfig) -> None:
    """Actors reserve CPUs; more than the cluster has would leave some never scheduled."""
    import ray

    need = rc.num_workers * rc.cpus_per_worker + rc.collectors * rc.cpus_per_collector
    resources = ray.cluster_resources()
    have = float(resources.get("CPU", 0.0))
    if rc.actor_resource is not None:
        units = float(resources.get(rc.actor_resource, 0.0))
        if units < rc.num_workers + rc.collectors:
            raise ConfigError(f"config key 'ray.actor_resource': the Ray cluster has {units:g} units of "
                              f"'{rc.actor_resource}', expected at least {rc.num_workers + rc.collectors} "
                              "(one per simulator worker and collector)")
    if need > have:
        raise ConfigError(f"config key 'ray.cpus_per_worker': {rc.num_workers} workers x {rc.cpus_per_worker:g} "
                          f"+ {rc.collectors} collectors x {rc.cpus_per_collector:g} CPUs = {need:g}, "
                          f"expected at most the {have:g} CPUs of the Ray cluster")


class RayCluster:
    """The run's actors and the SKU sets placed on them, for the run of `core`; `model` is
    the collectors' copy of the network. `resumed_from`: the iteration a restarted learner
    resumed at (it trains on that iteration's stored shards)."""

    def __init__(self, cfg: Config, core: RunCore, model: ActorCritic, resumed_from: int | None = None) -> None:
        from skurl.sync.ray import start_weight_slot

        if cfg.sync.backend != "inproc":
            raise ConfigError(f"config key 'sync.backend': got {cfg.sync.backend!r}, expected 'inproc' "
                              "under --mode ray (weights travel through a Ray weight slot)")
        self.cfg, self.core, self.model, self.resumed_from = cfg, core, model, resumed_from
        self.owns_ray = start_ray(cfg.ray)
        self.placements: dict[int, Placement] = {}
        self.replacements: dict[int, int] = {}  # collector index -> actors started in its place
        self.sim_workers: list[Any] = []
        self.collector_actors: list[Any] = []
        self.slot: Any = None  # the weight slot's Ray actor handle
        self._store: RolloutStore | None = None
        self.slot_weights: RayWeights | None = None
        try:
            check_resources(cfg.ray)
            self.slot = start_weight_slot()
        except BaseException:
            self.close()
            raise

    def wire(self, learner: Learner) -> tuple[Collectors, WeightBackend]:
        """The loop's collectors and publisher: the Ray weight slot; under collect.staleness an
        in-process publisher, and the collectors put each iteration's behaviour version
        into the slot."""
        from skurl.collect.near_policy import with_staleness
        from skurl.sync.history import WeightHistory
        from skurl.sync.ray import RayWeights
        from skurl.train.evaluation import TRAINED
        from skurl.train.mode import in_process_weights

        slot = self.slot_weights = RayWeights(self.slot, TRAINED, self.cfg.ray.get_timeout_s)
        c = self.cfg.collect
        if c.staleness == 0:
            slot.publish(learner.version, learner.weights())
            return RayIterations(self, slot), slot
        latest = in_process_weights(learner)
        return with_staleness(c, self.cfg.train, cast("NewestWeights", latest), self.core.run_dir,
                              lambda history: RayIterations(self, history, slot=slot), WeightHistory,
                              learner.sample_index), latest

    @property
    def timer(self) -> StageTimer:
        return self.core.timer

    @property
    def _center(self) -> bytes | None:
        """The cover grid's tuned centre for the collector actors (safetensors bytes)."""
        from skurl.policy.grid_center import center_bytes

        grid = self.core.grid
        return None if grid.tuned is None else center_bytes(grid.tuned)

    def store(self) -> RolloutStore:
        if self._store is None:
            from skurl.store import open_store

            self._store = open_store(self.cfg.store)
        return self._store

    def placement(self, shard: int) -> Placement:
        if shard not in self.placements:
            self.placements[shard] = self._place(shard)
        return self.placements[shard]

    def _place(self, shard: int) -> Placement:
        """Partition SKU set `shard` over the workers, add the shards, hand them to collectors."""
        import ray

        from skurl.catalog.partition import partition
        from skurl.modes.ray.actors import ShardSpec, get

        cfg, rc = self.cfg, self.cfg.ray
        self._start_actors()
        catalog = self.core.shard_catalog(shard)
        key = f"skus{shard}"
        parts = partition(catalog, rc.num_workers, cfg.deploy.partition)
        specs_by_collector: list[list[ShardSpec]] = [[] for _ in range(rc.collectors)]
        refs, widths = [], self.core.widths
        for w, part in enumerate(parts):
            if part.size == 0:  # more workers than substitution units
                continue
            sub = catalog.subset(part)
            ref = ray.put(sub)
            slot = self.sim_workers[w]
            schema = get(slot.handle.add_env.remote(key, ref, cfg.sim, widths), rc.get_timeout_s,
                         f"ray sim worker {w}: add shard '{key}'")
            if schema != self.core.schema:  # every shard is built at the run's widths
                raise RuntimeError(f"ray sim worker {w}: shard '{key}' shows {schema.dim} features, expected "
                                   f"the run's {self.core.schema.dim}")
            refs.append(ref)
            specs_by_collector[w % rc.collectors].append(ShardSpec(slot, ref, sub.sku_id, schema, widths, part))
        shares = []
        for c, specs in enumerate(specs_by_collector):
            if not specs:
                continue
            mine = np.sort(np.concatenate([s.rows for s in specs]))
            for s in specs:  # index maps relative to the collector's own SKUs
                s.rows = np.searchsorted(mine, s.rows)
            get(self.collector_actors[c].add_env.remote(key, specs, self._center), rc.get_timeout_s,
                f"ray collector {c}: add '{key}'")
            shares.append(Share(c, mine, specs))
        return Placement(key, len(catalog), self.core.schema, shares, refs, catalog.sku_id)

    def _start_actors(self) -> None:
        from skurl.modes.ray.actors import WorkerSlot, get, start_collector, threads_for

        if self.sim_workers:
            return
        rc = self.cfg.ray
        threads = threads_for(rc.cpus_per_worker, self.cfg.sim.threads)
        self.sim_workers = [WorkerSlot(w, rc, threads)
                            for w in range(rc.num_workers)]
        self.collector_actors = [start_collector(f"ray-collector-{c}", self.cfg, self.slot)
                                 for c in range(rc.collectors)]
        get([s.handle.ping.remote() for s in self.sim_workers], rc.get_timeout_s, "ray sim workers: start")

    def replace_collector(self, index: int) -> None:
        """A new actor for dead collector `index` (same id), given that collector's shards
        of every SKU set placed so far. Not waited for: Ray runs an actor's tasks in the
        order sent, so its next collect follows these add_env calls."""
        import ray

        from skurl.modes.ray.actors import start_collector

        count = self.replacements.get(index, 0) + 1
        if count > self.cfg.deploy.max_restarts:
            raise CollectorsLost(f"ray collector {index}: died {count} times, expected at most "
                                 f"deploy.max_restarts = {self.cfg.deploy.max_restarts} replacements")
        self.replacements[index] = count
        ray.kill(self.collector_actors[index], no_restart=True)
        actor = start_collector(f"ray-collector-{index}", self.cfg, self.slot)
        self.collector_actors[index] = actor
        for placement in self.placements.values():
            for share in placement.shares:
                if share.index == index:
                    actor.add_env.remote(placement.key, share.specs, self._center)

    def close(self) -> None:
        import ray

        for slot in getattr(self, "sim_workers", []):
            ray.kill(slot.handle, no_restart=True)
        for actor in [*getattr(self, "collector_actors", []), getattr(self, "slot", None)]:
            if actor is not None:
                ray.kill(actor, no_restart=True)
        self.sim_workers, self.collector_actors, self.slot = [], [], None
        if self.owns_ray and ray.is_initialized():
            ray.shutdown()


class RayIterations:
    """Collectors of --mode ray: each iteration fans the training shard out to the
    collector actors (modes/ray/collectors.py), which take the weights from the slot."""

    def __init__(self, cluster: RayCluster, weights: WeightSource, slot: RayWeights | None = None) -> None:
        # `slot`: put the weights collected with into the Ray slot first (they come from a
        # weight history under collect.staleness, not from the slot itself)
        self.cluster, self.weights, self.slot = cluster, weights, slot
        self.fanout: Callable[[RayCluster, Placement], RayCollectors] = RayCollectors  # (cluster, placement) -> one iteration's fan-out (tests wrap it)

    def collect(self, iteration: int, seed: int, version: int, sample: SampleIndex) -> Collected:
        run = self.cluster  # Ray collectors keep every SKU's observations: `sample` is not needed
        collectors = self.fanout(run, run.placement(iteration % len(run.core.shards)))
        with run.timer.stage("sync"):
            held, tensors = self.weights.wait_for(version, timeout=60.0)
            if self.slot is not None:
                in_slot = self.slot.latest_version()
                if in_slot is None or in_slot < held:
                    self.slot.publish(held, tensors)
            collectors.set_weights(held, tensors)
        rollout = collectors.collect(seed, iteration, held)
        if collectors.failed_sku_ids:
            ids = collectors.failed_sku_ids
            print(f"skurl: iteration {iteration}: {len(ids)} SKUs isolated by the simulator (ids "
                  f"{', '.join(map(str, ids[:10]))}{' ...' if len(ids) > 10 else ''})", file=sys.stderr)
        loss = collectors.loss
        return Collected(rollout, {
            **collectors.stats.scalars(), **reward_spread(rollout.rewards),
            "failed_skus": len(collectors.failed_sku_ids), "worker_recoveries": collectors.recoveries,
            "collector_sim_seconds": collectors.stats.sim_seconds,
            "collector_infer_seconds": collectors.stats.infer_seconds,
            **loss.scalars(),
            "collector_replacements": sum(run.replacements.values()), "stored_shards_reused": collectors.reused})

    def close(self) -> None:
        pass
