"""One iteration's collection in --mode ray, fanned out to collector actors. Collectors
that die during it are judged by the collector-loss rule (collect/lost_share.py) and
replaced under the same id; re-collected shares equal an undisturbed run's (docs/modes.md)."""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from skurl.buffer.assemble import ShardAssembly
from skurl.buffer.rollout import Columns, Rollout
from skurl.collect.collector import CollectStats
from skurl.collect.lost_share import Loss, judge_loss
from skurl.errors import UserError
from skurl.sim.api import ObsSchema

if TYPE_CHECKING:
    import torch

    from skurl.config import Config
    from skurl.modes.ray.actors import ShardSpec
    from skurl.policy.nets import ActorCritic
    from skurl.store.api import RolloutStore
    from skurl.telemetry.stages import StageTimer

log = logging.getLogger("skurl.ray")

KEEP_STORED_ITERATIONS = 2  # ray.rollouts=store: the current iteration's shards and the previous
PER_SKU = (Columns.LAST_OBS, Columns.BOOTSTRAP, Columns.SKU_IDS)  # [N, ...]; the rest are [T, N, ...]


class CollectorsLost(UserError):
    """Collectors kept dying beyond deploy.max_restarts."""


@dataclasses.dataclass
class Share:
    """One collector actor's part of a SKU set."""

    index: int  # the collector (run.collector_actors[index], id ray-collector-{index})
    rows: np.ndarray  # its rows within the SKU set, ascending
    specs: list[ShardSpec]  # its workers' shards, rows relative to its own SKUs


@dataclasses.dataclass
class Placement:
    """One SKU set (a training shard) laid out over workers and collectors."""

    key: str
    num_skus: int
    schema: ObsSchema
    shares: list[Share]
    catalog_refs: list[Any]  # kept alive here: workers rebuild shards from them
    sku_ids: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))  # in row order


class ClusterView(Protocol):
    """What the fan-out reads of its RayCluster (modes/ray/cluster.py)."""

    cfg: Config
    collector_actors: list[Any]  # Ray actor handles

    @property
    def model(self) -> ActorCritic: ...

    @property
    def timer(self) -> StageTimer: ...

    def store(self) -> RolloutStore: ...

    def replace_collector(self, index: int) -> None: ...


class RayCollectors:
    """What Trainer.iteration asks of a collector, fanned out to collector actors.
    `run` is the RayCluster: its cfg, model, timer, store(), collector_actors and replace_collector()."""

    def __init__(self, run: ClusterView, placement: Placement) -> None:
        self.run, self.placement = run, placement
        self.stats = CollectStats(skus=placement.num_skus)
        self.version = 0
        self.failed_sku_ids: list[int] = []
        self.recoveries = 0
        self.loss = Loss()
        self.reused = 0  # stored shards trained on instead of collecting (after a restart)

    def set_weights(self, version: int, tensors: dict[str, torch.Tensor]) -> None:
        # The actors take these weights from the slot themselves; the driver's model
        # (evaluated by the Evaluator) follows them as a local collector's would.
        self.version = version
        self.run.model.load_state_dict(tensors)

    def collect(self, seed: int, episode: int, version: int | None = None) -> Rollout:
        p = self.placement
        want = self.version if version is None else version
        start = time.perf_counter()
        self.reused = 0
        if episode == getattr(self.run, "resumed_from", None) and self.run.cfg.ray.rollouts == "store":
            stored = self._stored(seed, episode, want)
            if stored is not None:
                return stored
        with self.run.timer.stage("collect"):
            replies, lost = self._gather({s.index: self._send(s, seed, episode, want) for s in p.shares})
            self.loss = self._handle_loss(lost)
            if self.loss.waited:  # the replacements re-collect the lost shares
                for _ in range(self.run.cfg.deploy.max_restarts + 1):
                    more, lost = self._gather({s.index: self._send(s, seed, episode, want) for s in lost})
                    replies.update(more)
                    if not lost:
                        break
                    self._replace(lost)
                if lost:
                    raise CollectorsLost(f"ray collectors {_ids(lost)}: died again while re-collecting episode "
                                         f"{episode} (deploy.max_restarts {self.run.cfg.deploy.max_restarts})")
            if self.run.cfg.ray.rollouts == "store":  # read back; older iterations are of no more use
                self.run.store().delete_before(max(episode - KEEP_STORED_ITERATIONS + 1, 0))
        return self._finish(replies, start)

    def _finish(self, replies: dict[int, dict[str, Any]], start: float) -> Rollout:
        p = self.placement
        kept = [s for s in p.shares if s.index in replies]
        answers = [replies[s.index] for s in kept]
        parts = [self._rollout(r) for r in answers]
        first = parts[0]
        assembly = ShardAssembly(p.sku_ids, first.days, first.obs.shape[2])  # the one assembly of every mode
        rollout = assembly.assemble((part.arrays() for part in parts), version=first.policy_version,
                                    seed=first.seed, episode=first.episode, missing_ok=len(kept) < len(p.shares))
        self.stats = _merge_stats([r["stats"] for r in answers], time.perf_counter() - start)
        self.failed_sku_ids = sorted(i for r in answers for i in r["failed_sku_ids"])
        self.recoveries = sum(r["recoveries"] for r in answers)
        return rollout

    def _stored(self, seed: int, episode: int, version: int) -> Rollout | None:
        """After a learner restart: the interrupted iteration's shards, when the store holds
        every collector's, written with these weights, seed and SKUs (else None: collect)."""
        from skurl.store import CorruptShardError

        store, start = self.run.store(), time.perf_counter()
        listed = {m.collector_id: m for m in store.list_shards(episode)}
        replies = {}
        for share in self.placement.shares:
            m = listed.get(f"ray-collector-{share.index}")
            if (m is None or m.policy_version != version or m.meta.get("seed") != seed
                    or m.sku_count != share.rows.size or "stats" not in m.meta):
                return None
            replies[share.index] = {"manifest": m.to_json(), "stats": m.meta["stats"],
                                    "failed_sku_ids": m.meta.get("failed_sku_ids", []), "recoveries": 0}
        try:
            rollout = self._finish(replies, start)
        except CorruptShardError as exc:
            log.warning("iteration %d: %s; collecting it again", episode, exc)
            return None
        log.warning("iteration %d: training on its %d stored shards (written before the restart)",
                    episode, len(replies))
        self.reused = len(replies)
        return rollout

    def _send(self, share: Share, seed: int, episode: int, version: int) -> Any:
        actor = self.run.collector_actors[share.index]
        return actor.collect.remote(self.placement.key, seed, episode, version)

    def _gather(self, refs: dict[int, Any]) -> tuple[dict[int, dict[str, Any]], list[Share]]:
        """Each collector's reply, or its share in the lost list when its actor died."""
        from ray.exceptions import RayActorError, RayTaskError

        from skurl.modes.ray.actors import get

        rc, key = self.run.cfg.ray, self.placement.key
        by_index = {s.index: s for s in self.placement.shares}
        replies, lost = {}, []
        for index, ref in refs.items():
            try:
                replies[index] = get(ref, rc.get_timeout_s, f"ray collector {index}: collect '{key}'")
            except RayActorError as exc:
                if isinstance(exc, RayTaskError):  # the collector raised (e.g. a worker it could not
                    raise  # recover): its error, not its death
                lost.append(by_index[index])
        return replies, lost

    def _handle_loss(self, lost: list[Share]) -> Loss:
        """The collector-loss rule (collect/lost_share.py); the dead are replaced either way."""
        p = self.placement
        loss = judge_loss({f"ray-collector-{s.index}": int(s.rows.size) for s in lost}, p.num_skus,
                          self.run.cfg.deploy.max_lost_share, f"'{p.key}'")
        self._replace(lost)
        return loss

    def _replace(self, lost: list[Share]) -> None:
        for s in lost:
            self.run.replace_collector(s.index)

    def _rollout(self, reply: dict[str, Any]) -> Rollout:
        if "manifest" in reply:
            from skurl.store import ShardManifest

            manifest = ShardManifest.from_json(reply["manifest"], "ray collector")
            arrays, meta = self.run.store().get_shard(manifest), manifest.meta
            version = manifest.policy_version
        else:
            arrays, meta = reply["arrays"], reply["meta"]
            version = meta["policy_version"]
        fields = {k: arrays[k] for k in Rollout.__dataclass_fields__ if k in arrays}
        return Rollout(**fields, policy_version=version, seed=meta["seed"], episode=meta["episode"])


def _ids(shares: list[Share]) -> str:
    return ", ".join(f"ray-collector-{s.index}" for s in shares)


def _merge_stats(stats: list[dict[str, Any]], seconds: float) -> CollectStats:
    out = CollectStats(days=max(s["days"] for s in stats), skus=sum(s["skus"] for s in stats),
                       reward_sum=sum(s["reward_sum"] for s in stats), seconds=seconds)
    out.infer_seconds = max(s["infer_seconds"] for s in stats)
    out.sim_seconds = max(s["sim_seconds"] for s in stats)
    out.clipped_orders = sum(int(s.get("clipped_orders", 0)) for s in stats)
    return out
