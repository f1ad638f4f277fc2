"""`skurl train --mode ray`: the co-located loop with its simulator and collectors as Ray actors.

Wiring only. `RayRun` is `ColocatedRun` (same learner, evaluation, checkpoints, logs and
report, in the driver) with two parts swapped: each SKU set is partitioned over
ray.num_workers `SimWorker` actors (substitution groups together, round robin by cost;
deploy.partition), driven by ray.collectors `CollectorWorker` actors that each see their
workers' shards as one Env (MultiShardEnv), take weights from a Ray weight slot (the
sync interface) and hand rollouts back through the object store or the rollout store.
With ray.collectors = 1 the collector runs the whole SKU set in catalog order, so the
same config and seed give bit-identical weights to --mode colocated (DESIGN 6).

Faults: a dead simulator worker is restarted or replaced and its shard replayed
(ray_actors.py); a collector that dies mid-iteration is replaced, and its share is either
left out of that iteration or re-collected (deploy.max_lost_share; ray_collect.py); a
restarted learner (--resume) trains on the interrupted iteration's shards when they are in
the rollout store (ray.rollouts=store). `--resume RUN --catalog NEW` goes through
catalog_change.py (a RayRun with the SKU set changed).

`skurl train --mode ray [--address ADDR]` (commands/train_cmd.py) calls `run(cfg, args)`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import IO, Any

import numpy as np

from skurl.collect.collectors import Collected, reward_spread
from skurl.config import Config, RayConfig, load_config
from skurl.deploy.colocated import TRAINED, ColocatedRun, TrainResult
from skurl.deploy.ray_collect import CollectorsLost, Placement, RayCollectors, Share
from skurl.errors import ConfigError, UserError
from skurl.learn.checkpoint import refuse_existing
from skurl.policy.learned import run_config_file
from skurl.sim.api import ObsSchema


def start_ray(rc: RayConfig) -> bool:
    """Join ray.address, or start a local instance without the dashboard. False when Ray
    was already initialized in this process (then it is left running)."""
    import ray

    if ray.is_initialized():
        return False
    common: dict[str, Any] = {"include_dashboard": False, "configure_logging": False}
    if rc.address:
        ray.init(address=rc.address, **common)
    else:
        ray.init(num_cpus=rc.num_cpus or os.cpu_count() or 1, **common)
    return True


def check_resources(rc: RayConfig) -> None:
    """Actors reserve CPUs; more than the cluster has would leave some never scheduled."""
    import ray

    need = rc.num_workers * rc.cpus_per_worker + rc.collectors * rc.cpus_per_collector
    have = float(ray.cluster_resources().get("CPU", 0.0))
    if need > have:
        raise ConfigError(f"config key 'ray.cpus_per_worker': {rc.num_workers} workers x {rc.cpus_per_worker:g} "
                          f"+ {rc.collectors} collectors x {rc.cpus_per_collector:g} CPUs = {need:g}, "
                          f"expected at most the {have:g} CPUs of the Ray cluster")


def merged_schema(schemas: list[ObsSchema]) -> ObsSchema:
    """The schema MultiShardEnv shows for these shards: each field at its widest."""
    names = [name for name, _ in schemas[0].fields]
    widths = [max(s.fields[j][1] for s in schemas) for j in range(len(names))]
    return ObsSchema(fields=tuple(zip(names, widths, strict=True)))


class RayRun(ColocatedRun):
    mode = "ray"

    """ColocatedRun whose SKU sets are simulated and collected by Ray actors."""

    def __init__(self, cfg: Config, run_dir: str | Path, *, resume: bool = False,
                 stream: IO[str] | None = None, baseline: bool = True) -> None:
        from skurl.sync.ray_weights import RayWeights, start_weight_slot

        if cfg.sync.backend != "inproc":
            raise ConfigError(f"config key 'sync.backend': got {cfg.sync.backend!r}, expected 'inproc' "
                              "under --mode ray (weights travel through a Ray weight slot)")
        self.owns_ray = start_ray(cfg.ray)
        self.placements: dict[int, Placement] = {}
        self.replacements: dict[int, int] = {}  # collector index -> actors started in its place
        self._store: Any = None
        try:
            check_resources(cfg.ray)
            self.slot = start_weight_slot()
            self.sim_workers: list[Any] = []
            self.collector_actors: list[Any] = []
            super().__init__(cfg, run_dir, resume=resume, stream=stream, baseline=baseline)
            # A restarted learner trains on the interrupted iteration's stored shards, if any.
            self.resumed_from = self.learner.iteration if resume else None
            self.weights = RayWeights(self.slot, TRAINED, cfg.ray.get_timeout_s)
            self.weights.publish(self.learner.version, self.learner.weights())
        except BaseException:
            self.close()
            raise

    @property
    def _center(self) -> bytes | None:
        """The cover grid's tuned centre for the collector actors (safetensors bytes)."""
        from skurl.policy.grid_center import center_bytes

        return None if self.grid.tuned is None else center_bytes(self.grid.tuned)

    # ColocatedRun asks for SKU set 0's env (for its schema) before anything else.
    def _env(self, shard: int) -> Any:
        return self._placement(shard)

    def warm_start_env(self) -> Any:
        return self._local_env(0)  # the driver records the baseline itself, as colocated does

    def make_collectors(self) -> Any:
        return _RayIterations(self)

    def store(self) -> Any:
        if self._store is None:
            from skurl.store import open_store

            self._store = open_store(self.cfg.store)
        return self._store

    def _placement(self, shard: int) -> Placement:
        if shard not in self.placements:
            self.placements[shard] = self._place(shard)
        return self.placements[shard]

    def _place(self, shard: int) -> Placement:
        """Partition SKU set `shard` over the workers, add the shards, hand them to collectors."""
        import ray

        from skurl.catalog.partition import partition
        from skurl.deploy.ray_actors import ShardSpec, get

        cfg, rc = self.cfg, self.cfg.ray
        self._start_actors()
        rows = self.shards[shard]
        catalog = self.catalog if rows.size == len(self.catalog) else self.catalog.subset(rows)
        key = f"skus{shard}"
        parts = partition(catalog, rc.num_workers, cfg.deploy.partition)
        refs, schemas, specs_by_collector = [], [], [[] for _ in range(rc.collectors)]
        for w, part in enumerate(parts):
            if part.size == 0:  # more workers than substitution units
                continue
            sub = catalog.subset(part)
            ref = ray.put(sub)
            slot = self.sim_workers[w]
            schema = get(slot.handle.add_env.remote(key, ref, cfg.sim, None, self.widths), rc.get_timeout_s,
                         f"ray sim worker {w}: add shard '{key}'")
            refs.append(ref)
            schemas.append(schema)
            specs_by_collector[w % rc.collectors].append(ShardSpec(slot, ref, sub.sku_id, schema, part))
        wide = merged_schema(schemas)
        specs = [s for group in specs_by_collector for s in group]
        get([s.slot.handle.widen.remote(key, wide) for s in specs], rc.get_timeout_s, f"ray sim workers: widen '{key}'")
        for s in specs:
            s.schema = wide
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
        return Placement(key, len(catalog), wide, shares, refs)

    def _start_actors(self) -> None:
        from skurl.deploy.ray_actors import WorkerSlot, get, start_collector, threads_for

        if self.sim_workers:
            return
        rc = self.cfg.ray
        threads = threads_for(rc.cpus_per_worker, self.cfg.sim.threads)
        self.sim_workers = [WorkerSlot(w, rc.cpus_per_worker, threads, rc.max_restarts, rc.get_timeout_s)
                            for w in range(rc.num_workers)]
        self.collector_actors = [start_collector(f"ray-collector-{c}", self.cfg, self.slot)
                                 for c in range(rc.collectors)]
        get([s.handle.ping.remote() for s in self.sim_workers], rc.get_timeout_s, "ray sim workers: start")

    def replace_collector(self, index: int) -> None:
        """A new actor for dead collector `index` (same id), given that collector's shards
        of every SKU set placed so far. Not waited for: Ray runs an actor's tasks in the
        order sent, so its next collect follows these add_env calls."""
        import ray

        from skurl.deploy.ray_actors import start_collector

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


def with_address(cfg: Config, address: str | None) -> Config:
    return cfg if not address else dataclasses.replace(cfg, ray=dataclasses.replace(cfg.ray, address=address))


def train(cfg: Config, run_dir: str | Path, *, stream: IO[str] | None = None,
          stop_after: int | None = None, baseline: bool = True) -> TrainResult:
    """A new --mode ray run in `run_dir` (refuses one that already holds checkpoints)."""
    refuse_existing(run_dir)
    return _run(RayRun(cfg, run_dir, stream=stream, baseline=baseline), stop_after)


def resume(run_dir: str | Path, overrides: list[str] | None = None, *, address: str | None = None,
           stream: IO[str] | None = None, stop_after: int | None = None, baseline: bool = True) -> TrainResult:
    """Continue a run from its latest checkpoint with its own config (+ overrides)."""
    cfg_file = run_config_file(run_dir, "--resume")
    cfg = with_address(load_config(cfg_file, overrides), address)
    return _run(RayRun(cfg, run_dir, resume=True, stream=stream, baseline=baseline), stop_after)


def _run(run: RayRun, stop_after: int | None) -> TrainResult:
    try:
        return run.run(stop_after)
    finally:
        run.close()


def run(cfg: Config | None, args: argparse.Namespace) -> TrainResult:
    """`skurl train --mode ray`: `cfg` from --config/--set (None with --resume RUN_DIR)."""
    address = getattr(args, "address", None)
    baseline = not getattr(args, "no_baseline", False)
    if getattr(args, "resume", None):
        if getattr(args, "config", None) or getattr(args, "run_dir", None):
            raise UserError("skurl train: --resume RUN_DIR takes the run's own config and directory; "
                            "drop --config/--run-dir (use --set to change keys)")
        extra = [f"train.iterations={args.iterations}"] if getattr(args, "iterations", None) is not None else []
        return resume(args.resume, list(getattr(args, "overrides", [])) + extra, address=address, baseline=baseline)
    if cfg is None:
        raise UserError("skurl train --mode ray: no config given")
    run_dir = Path(getattr(args, "run_dir", None) or f"runs/{time.strftime('%Y%m%d-%H%M%S')}")
    return train(with_address(cfg, address), run_dir, baseline=baseline)


class _RayIterations:
    """Collectors of --mode ray: each iteration fans the training shard out to the
    collector actors (deploy/ray_collect.py), which take the weights from the slot."""

    def __init__(self, run: RayRun) -> None:
        self.run = run
        self.fanout: Any = RayCollectors  # (run, placement) -> one iteration's fan-out (tests wrap it)

    def collect(self, iteration: int, seed: int, version: int, sample: Any) -> Collected:
        run = self.run  # Ray collectors keep every SKU's observations: `sample` is not needed
        collectors = self.fanout(run, run._placement(iteration % len(run.shards)))
        with run.timer.stage("sync"):
            held, tensors = run.weights.wait_for(version, timeout=60.0)
            collectors.set_weights(held, tensors)
        rollout = collectors.collect(seed, iteration, held)
        if collectors.failed_sku_ids:
            ids = collectors.failed_sku_ids
            print(f"skurl: iteration {iteration}: {len(ids)} SKUs isolated by the simulator (ids "
                  f"{', '.join(map(str, ids[:10]))}{' ...' if len(ids) > 10 else ''})", file=sys.stderr)
        loss = collectors.loss
        return Collected(rollout, {
            **collectors.stats.scalars(), **reward_spread(rollout),
            "failed_skus": len(collectors.failed_sku_ids), "worker_recoveries": collectors.recoveries,
            "collector_sim_seconds": collectors.stats.sim_seconds,
            "collector_infer_seconds": collectors.stats.infer_seconds,
            "lost_collectors": len(loss.collectors), "lost_skus": loss.skus, "lost_share": loss.share,
            "collector_replacements": sum(run.replacements.values()), "stored_shards_reused": collectors.reused})

    def close(self) -> None:
        pass
