"""The Ray actors of `--mode ray` and the Env / weight-sync adapters that reach them.

- `SimWorker`: holds VectorEnv shards (by key) and simulates one day per call.
- `RayShard`: one worker's shard, the transport of sim/replaying.py's ReplayingEnv (for
  MultiShardEnv to merge): when the worker dies mid-episode (Ray restarts it up to
  ray.max_restarts times, then `WorkerSlot` starts a replacement), the shard is rebuilt
  and the episode replayed on the worker with the same orders.
- `CollectorWorker`: a Collector over a MultiShardEnv of RayShardEnvs; takes weights
  through the weight-sync interface and returns rollouts through Ray's object store or
  writes them to the rollout store.
- weights travel through sync/ray.py (`WeightSlot` actor, `RayWeights`).
Every ray.get has a timeout (ray.get_timeout_s)."""

from __future__ import annotations

import dataclasses
import math
import os
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import ray
from ray.exceptions import ActorUnavailableError, RayActorError

from skurl.catalog.schema import Catalog
from skurl.config import Config, RayConfig, SimConfig
from skurl.learn.threads import set_torch_threads
from skurl.sim.api import DayMetrics, Obs, ObsSchema, RawState, StepResult
from skurl.sim.replaying import EpisodeLog, ReplayingEnv
from skurl.sync.api import Tensors
from skurl.sync.ray import RayTimeoutError, RayWeights
from skurl.sync.ray import ray_get as get

if TYPE_CHECKING:
    from skurl.buffer.rollout import Rollout
    from skurl.collect.collector import Collector
    from skurl.learn.labelling import Labeller, PartReply
    from skurl.policy.nets import ActorCritic
    from skurl.sim.env import VectorEnv
    from skurl.store.api import RolloutStore, ShardManifest


def threads_for(cpus: float, configured: int) -> int:
    """Threads of an actor: the configured count, else its reserved CPUs rounded up."""
    return configured if configured > 0 else max(1, math.ceil(cpus))


@dataclasses.dataclass
class LeanDay:
    """What a collector reads of a day: about half the bytes of a StepResult (no metrics,
    no raw state but today's forecast, unless `raw`: the cover grid's collectors need it
    whole, `owed` included on supply networks: the echelon grid reads it), for Ray's object
    store to carry."""

    features: np.ndarray
    forecast0: np.ndarray  # float32 [N, 1]: raw.forecast[:, :1]
    day: int
    reward: np.ndarray | None = None
    done: bool = False
    failed: np.ndarray | None = None
    raw: RawState | None = None  # the whole raw state, when asked for

    @classmethod
    def of(cls, obs: Obs, reward: np.ndarray | None = None, done: bool = False,
           failed: np.ndarray | None = None, raw: bool = False) -> LeanDay:
        return cls(obs.features, obs.raw.forecast[:, :1], int(obs.raw.day), reward, done, failed,
                   obs.raw if raw else None)

    def obs(self, schema: ObsSchema) -> Obs:
        if self.raw is not None:
            return Obs(self.features, self.raw, schema)
        n = self.features.shape[0]
        zero = np.broadcast_to(np.int64(0), (n,))  # not carried: zero-stride views, no memory
        raw = RawState(on_hand=zero, pipeline=np.broadcast_to(np.int64(0), (n, 1)), backlog=zero,
                       forecast=self.forecast0, day=self.day)
        return Obs(self.features, raw, schema)

    def result(self, schema: ObsSchema) -> StepResult:
        n = self.features.shape[0]
        zeros = np.broadcast_to(np.float64(0.0), (n,))
        metrics = DayMetrics(**{name: zeros for name in DayMetrics.__dataclass_fields__})
        failed = np.zeros(n, bool) if self.failed is None else self.failed
        assert self.reward is not None
        return StepResult(self.obs(schema), self.reward, self.done, metrics, failed)


class ShardMissing(KeyError):
    """A SimWorker does not hold the shard asked for: Ray restarted it (on another node, say)
    after a fault this caller never saw, so its state is gone and the shard must be rebuilt."""


class SimWorker:
    """Simulator shards in one Ray worker process (a Ray actor class: see `WorkerSlot`).
    Every shard is built at the run's observation widths (train/core.py, the env spec), so
    shards merged by different collectors all show the features one whole-set env would."""

    def __init__(self, worker_id: int, threads: int) -> None:
        self.worker_id = worker_id
        self.threads = threads
        self.envs: dict[str, Any] = {}

    def ping(self) -> int:
        return os.getpid()

    def add_env(self, key: str, catalog: Catalog, sim: SimConfig, widths: tuple[int, int] = (0, 0)) -> ObsSchema:
        """Build shard `key` at least `widths` = (A, P) wide (VectorEnv min_widths); its schema."""
        from skurl.sim.env import VectorEnv

        sim = dataclasses.replace(sim, threads=sim.threads or self.threads)
        self.envs[key] = VectorEnv(catalog, sim, min_widths=widths)
        return self.envs[key].schema

    def env(self, key: str) -> VectorEnv:
        if key not in self.envs:
            raise ShardMissing(f"ray sim worker {self.worker_id} (pid {os.getpid()}) holds no shard '{key}'")
        return self.envs[key]

    def reset(self, key: str, seed: int, episode: int) -> Obs:
        return self.env(key).reset(seed, episode)

    def step(self, key: str, orders: np.ndarray) -> StepResult:
        return self.env(key).step(orders)

    def reset_lean(self, key: str, seed: int, episode: int, raw: bool = False) -> LeanDay:
        return LeanDay.of(self.reset(key, seed, episode), raw=raw)

    def step_lean(self, key: str, orders: np.ndarray, raw: bool = False) -> LeanDay:
        result = self.step(key, orders)
        return LeanDay.of(result.obs, result.reward, result.done, result.failed, raw)

    def replay(self, key: str, seed: int, episode: int, orders: list[np.ndarray]) -> int:
        """Rebuild an episode's state: reset, then step through the recorded orders."""
        env = self.env(key)
        env.reset(seed, episode)
        for day_orders in orders:
            env.step(day_orders)
        return int(env.day)

    def info(self, key: str) -> dict[str, Any]:
        return self.env(key).info()

    def drop_env(self, key: str) -> None:
        env = self.envs.pop(key, None)
        if env is not None:
            env.close()


class WorkerSlot:
    """A SimWorker actor and the means to replace it once Ray stops restarting it."""

    def __init__(self, worker_id: int, rc: RayConfig, threads: int) -> None:
        self.worker_id, self.cpus, self.threads, self.placement = worker_id, rc.cpus_per_worker, threads, placement(rc)
        self.max_restarts, self.timeout_s = rc.max_restarts, rc.get_timeout_s
        self.handle = self._spawn()
        self.replacements = 0

    def _spawn(self) -> Any:
        cls = ray.remote(SimWorker).options(num_cpus=self.cpus, max_restarts=self.max_restarts,
                                            max_task_retries=0, name=None, **self.placement)
        return cls.remote(self.worker_id, self.threads)

    def alive(self) -> Any:
        """The worker's handle once it answers: Ray's restart of it, or a new actor."""
        what = f"ray sim worker {self.worker_id}: ping"
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                get(self.handle.ping.remote(), self.timeout_s, what)
                return self.handle
            except ActorUnavailableError:  # restarting: tasks sent meanwhile may fail once
                if time.monotonic() > deadline:
                    raise RayTimeoutError(f"{what}: still restarting after {self.timeout_s:g} s") from None
                time.sleep(0.1)
            except RayActorError:  # dead for good (restarts used up): a new actor takes the shard
                self.handle = self._spawn()
                self.replacements += 1

    def kill(self) -> None:
        ray.kill(self.handle, no_restart=True)


class RayShard:
    """One SimWorker shard as a ShardTransport (sim/replaying.py): lost when the worker
    dies; rebuilt on its restart (or replacement) by adding the shard again and replaying
    the episode on the worker, up to the last completed day.

    lean=True is for collectors only: each day carries a `LeanDay` (features, reward,
    done, failed, today's forecast); metrics and the rest of the raw state read as zeros,
    unless raw=True (the raw state comes whole: the cover grid reads it)."""

    def __init__(self, slot: WorkerSlot, key: str, catalog_ref: Any, sku_ids: np.ndarray,
                 schema: ObsSchema, sim: SimConfig, timeout_s: float, *, widths: tuple[int, int] = (0, 0),
                 lean: bool = False, raw: bool = False) -> None:
        self.lean, self.raw, self.widths = lean, raw, widths
        self.slot, self.key, self.catalog_ref = slot, key, catalog_ref
        self.sku_ids = np.asarray(sku_ids, np.int64)
        self._schema, self.sim, self.timeout_s = schema, sim, timeout_s

    @property
    def num_skus(self) -> int:
        return int(self.sku_ids.shape[0])

    @property
    def schema(self) -> ObsSchema:
        return self._schema

    def reset(self, seed: int, episode: int) -> Obs:
        if self.lean:
            return self._call("reset_lean", seed, episode, self.raw).obs(self._schema)
        return self._call("reset", seed, episode)

    def step(self, orders: np.ndarray) -> StepResult:
        if self.lean:
            return self._call("step_lean", orders, self.raw).result(self._schema)
        return self._call("step", orders)

    def info(self) -> dict[str, Any]:
        return self._call("info")

    def close(self) -> None:
        pass  # the worker holds the shard until drop_env; nothing is open here

    def lost(self, exc: BaseException) -> bool:
        """The worker died, or it was restarted before this call and holds no shard now."""
        return isinstance(exc, (RayActorError, ShardMissing))

    def rebuild(self, episode: EpisodeLog, cause: BaseException) -> None:
        handle = self.slot.alive()
        what = f"ray sim worker {self.slot.worker_id}: rebuilding shard '{self.key}'"
        get(handle.add_env.remote(self.key, self.catalog_ref, self.sim, self.widths), self.timeout_s, what)
        if episode.episode is not None:
            seed, ep = episode.episode
            get(handle.replay.remote(self.key, seed, ep, episode.orders), self.timeout_s, what)

    def _call(self, method: str, *args: Any) -> Any:
        what = f"ray sim worker {self.slot.worker_id}: {method} of shard '{self.key}'"
        return get(getattr(self.slot.handle, method).remote(self.key, *args), self.timeout_s, what)


def ray_shard_env(*args: Any, **kwargs: Any) -> ReplayingEnv:
    """One worker's shard behind the Env protocol, rebuilt by replay if the worker dies
    (RayShard's arguments)."""
    return ReplayingEnv(RayShard(*args, **kwargs))


@dataclasses.dataclass
class ShardSpec:
    """What a collector needs to reach one worker's shard of a SKU set."""

    slot: WorkerSlot
    catalog_ref: Any  # ObjectRef of the shard's Catalog (owned by the driver)
    sku_ids: np.ndarray
    schema: ObsSchema  # the run's schema, which every shard shows
    widths: tuple[int, int]  # the run's (A, P) the shard is built at (again on a rebuild)
    rows: np.ndarray  # the shard's rows within the collector's SKUs (index map)


class CollectorWorker:
    """Collectors over merged Ray shards, one per SKU set (a Ray actor class)."""

    def __init__(self, collector_id: str, cfg: Config, weights_slot: Any) -> None:
        # As in --mode colocated: inference and simulation take turns, so by default the
        # collector's inference uses every core (measured: 1 thread costs ~35% throughput).
        set_torch_threads(cfg.train.torch_threads or os.cpu_count() or 1)
        self.collector_id, self.cfg = collector_id, cfg
        self.weights = RayWeights(weights_slot, "ppo", cfg.ray.get_timeout_s)
        self.slots: dict[int, WorkerSlot] = {}  # one per worker, shared by its SKU sets
        self.shards: dict[str, list[ReplayingEnv]] = {}
        self.envs: dict[str, Any] = {}
        self.collectors: dict[str, Any] = {}
        self.catalogs: dict[str, Catalog] = {}  # the cover grid's: each SKU set's rows, in env order
        self.centers: dict[str, Any] = {}  # the cover grid's tuned centre (GridCenter), by SKU set
        self.model: ActorCritic | None = None
        self._store: RolloutStore | None = None
        self.specs: dict[str, list[ShardSpec]] = {}  # DCL's labellers build their envs from these
        self.centers_raw: dict[str, bytes | None] = {}
        self.labellers: dict[str, Labeller] = {}

    def ping(self) -> int:
        return os.getpid()

    def add_env(self, key: str, specs: list[ShardSpec], center: bytes | None = None) -> int:
        """SKU set `key`: one Env over these worker shards (its Collector comes with the
        first weights, which give the model's shapes). `center`: the cover grid's tuned
        centre as safetensors bytes, when it has one (modes/decoupled/remote_grid.py)."""
        from skurl.modes.decoupled.remote_grid import needs_raw
        from skurl.policy.grid_center import center_from_bytes
        from skurl.rpc.multi_shard import MultiShardEnv

        timeout, raw = self.cfg.ray.get_timeout_s, needs_raw(self.cfg)
        slots = [self.slots.setdefault(s.slot.worker_id, s.slot) for s in specs]
        envs = [ray_shard_env(slot, key, s.catalog_ref, s.sku_ids, s.schema, self.cfg.sim, timeout, widths=s.widths,
                              lean=True, raw=raw) for slot, s in zip(slots, specs, strict=True)]
        self.shards[key] = envs
        self.envs[key] = MultiShardEnv(envs, [s.rows for s in specs])
        self.collectors.pop(key, None)
        self.specs[key], self.centers_raw[key] = specs, center
        self.labellers.pop(key, None)
        if raw:
            self.catalogs[key] = _rows_in_env_order(specs, timeout, key)
            self.centers[key] = None if center is None else center_from_bytes(center, f"grid centre of '{key}'")
        return self.envs[key].num_skus

    def _collector(self, key: str, tensors: Tensors) -> Collector:
        from skurl.collect.collector import Collector
        from skurl.policy.learned import grid_for
        from skurl.policy.nets import ActorCritic

        if self.model is None:
            self.model = ActorCritic.from_state(tensors)
        if key not in self.collectors:
            collector = Collector.from_config(self.envs[key], self.model, grid_for(self.cfg), self.cfg.collect,
                                              catalog=self.catalogs.get(key))
            if self.centers.get(key) is not None:
                collector.use_center(self.centers[key])
            self.collectors[key] = collector
        return self.collectors[key]

    def collect(self, key: str, seed: int, episode: int, version: int) -> dict[str, Any]:
        """Wait for weights >= version (the sync barrier), run one episode of SKU set
        `key`, and return the rollout's arrays (object store) or its shard manifest."""
        got, tensors = self.weights.wait_for(version, self.cfg.sync.timeout_s)
        collector = self._collector(key, tensors)
        collector.set_weights(got, tensors)
        rollout = collector.collect(seed, episode, got)
        assert rollout is not None  # recorded (record=True)
        failed = [i for info in collector.env.info()["shards"] for i in info.get("failed_sku_ids", [])]
        reply: dict[str, Any] = {"stats": dataclasses.asdict(collector.stats), "failed_sku_ids": failed,
                 "recoveries": sum(s.recoveries for s in self.shards[key]),
                 "replacements": sum(s.replacements for s in self.slots.values()), "version": got}
        meta = {"policy_version": got, "seed": seed, "episode": episode}
        if self.cfg.ray.rollouts == "store":  # with what a restarted learner needs to reuse it
            stats = {k: v.item() if hasattr(v, "item") else v for k, v in reply["stats"].items()}  # JSON
            stored = {**meta, "stats": stats, "failed_sku_ids": [int(i) for i in failed]}
            reply["manifest"] = self._put_shard(episode, rollout, stored).to_json()
        else:
            reply["arrays"], reply["meta"] = rollout.arrays(), meta
        return reply

    def label(self, key: str, blob: bytes) -> PartReply:
        """Answer a DCL label or check job (learn/label_wire.py) on SKU set `key`'s rows, in
        an in-process env of this actor's own (learn/labelling.py, Labeller). A label part
        goes to the rollout store (ray.rollouts=store; its manifest is returned) or back as
        arrays; a check part always comes back as arrays (a few floats per SKU)."""
        from skurl.learn.dcl_parts import LabelPart
        from skurl.learn.label_wire import decode_job

        start = time.perf_counter()
        job = decode_job(blob)
        part = self._labeller(key).answer(job)
        reply: PartReply = {"seconds": time.perf_counter() - start}
        if not isinstance(part, LabelPart):
            return {**reply, "arrays": {"sku_ids": part.sku_ids, "gains": part.gains}}
        reply["sku_days"] = part.sku_days
        if self.cfg.ray.rollouts != "store":
            return {**reply, "arrays": part.arrays()}
        if self._store is None:
            from skurl.store import open_store

            self._store = open_store(self.cfg.store)
        meta = {"policy_version": 0, "label_part": getattr(job, "part", 0), "sku_count": int(part.sku_ids.size)}
        manifest = self._store.put_shard(job.iteration, f"{self.collector_id}.label{meta['label_part']}",
                                         part.arrays(), meta)
        return {**reply, "manifest": manifest.to_json()}

    def _labeller(self, key: str) -> Labeller:
        from skurl.learn.labelling import Labeller
        from skurl.policy.grid_center import center_from_bytes
        from skurl.policy.learned import grid_for

        if key not in self.labellers:
            catalog = _rows_in_env_order(self.specs[key], self.cfg.ray.get_timeout_s, key)
            raw = self.centers_raw.get(key)
            grid = grid_for(self.cfg).with_center(None if raw is None else center_from_bytes(raw, "grid centre"))
            self.labellers[key] = Labeller(catalog, self.cfg.sim, grid)
        return self.labellers[key]

    def _put_shard(self, iteration: int, rollout: Rollout, meta: dict[str, Any]) -> ShardManifest:
        from skurl.store import open_store

        if self._store is None:
            self._store = open_store(self.cfg.store)
        meta = {**meta, "sku_count": rollout.num_skus, "rows": rollout.transitions}
        return self._store.put_shard(iteration, self.collector_id, rollout.arrays(), meta)


def _rows_in_env_order(specs: list[ShardSpec], timeout_s: float, key: str) -> Catalog:
    """The catalog rows of a collector's SKU set in its MultiShardEnv's row order (the shards'
    catalogs, each SKU at its index-map row)."""
    parts = [get(s.catalog_ref, timeout_s, f"ray collector: catalog of a shard of '{key}'") for s in specs]
    order = np.argsort(np.concatenate([s.rows for s in specs]), kind="stable")
    return Catalog.concat(parts).subset(order)


def placement(rc: RayConfig) -> dict[str, object]:
    """Actor options that place simulator workers and collectors (ray.actor_resource, ray.spread)."""
    options: dict[str, object] = {}
    if rc.actor_resource is not None:
        options["resources"] = {rc.actor_resource: 1.0}
    if rc.spread:
        options["scheduling_strategy"] = "SPREAD"
    return options


def start_collector(collector_id: str, cfg: Config, weights_slot: Any) -> Any:
    cls = ray.remote(CollectorWorker).options(num_cpus=cfg.ray.cpus_per_collector, max_restarts=0,
                                              **placement(cfg.ray))
    return cls.remote(collector_id, cfg, weights_slot)
