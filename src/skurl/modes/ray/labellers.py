"""DCL's labelling on Ray's collector actors (learn/labelling.py's Labellers for --mode ray).

Each collector actor labels the planned states among its own SKUs of the training shard, in
an in-process env of those rows (CollectorWorker.label), and puts its part in the rollout
store (ray.rollouts=store, checksummed) or returns it. A collector lost mid-labelling is
replaced and its part asked again (up to deploy.max_restarts): labels are a function of
(seed, iteration, SKU), so the re-labelled part is the one the dead actor would have given.
A part the store refuses by checksum is asked again once, then fails the iteration.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import numpy as np

from skurl.learn.dcl_check import CheckPart
from skurl.learn.dcl_parts import LabelPart
from skurl.learn.label_wire import encode_job
from skurl.learn.labelling import CheckJob, LabelJob, PartReply
from skurl.modes.ray.collectors import CollectorsLost, Share
from skurl.telemetry.metrics import get_metrics

if TYPE_CHECKING:
    from skurl.modes.ray.cluster import RayCluster

log = logging.getLogger("skurl.modes")


class RayLabellers:
    """Label and check jobs fanned out to the collector actors holding the training shard."""

    def __init__(self, cluster: RayCluster) -> None:
        self.cluster = cluster
        self._figures: dict[str, float] = {}

    def label(self, job: LabelJob) -> list[LabelPart]:
        replies = self._fan_out(job)
        parts = [self._label_part(job, share, reply) for share, reply in replies]
        if self.cluster.cfg.ray.rollouts == "store":  # read: earlier iterations' parts are of no more use
            self.cluster.store().delete_before(job.iteration)
        self._add("dcl_rollout_sku_days_max_collector", max(float(r.get("sku_days", 0)) for _, r in replies))
        return parts

    def check(self, job: CheckJob) -> list[CheckPart]:
        return [CheckPart(np.asarray(r["arrays"]["sku_ids"], np.int64), np.asarray(r["arrays"]["gains"]))
                for _, r in self._fan_out(job)]

    def figures(self) -> dict[str, float]:
        out, self._figures = self._figures, {}
        return out

    def close(self) -> None:
        return None

    def _fan_out(self, job: LabelJob | CheckJob) -> list[tuple[Share, PartReply]]:
        """Every share's reply to `job`, the lost ones asked again of their replacements."""
        import ray

        placement = self.cluster.placement(job.shard)
        blob = ray.put(encode_job(job))
        start = time.perf_counter()
        pending, replies = list(placement.shares), {}
        for _ in range(self.cluster.cfg.deploy.max_restarts + 1):
            got, pending = self._gather(placement.key, blob, pending)
            replies.update(got)
            if not pending:
                break
            log.warning("dcl iteration %d: ray collector(s) %s lost while labelling; asking their "
                        "replacements", job.iteration, [s.index for s in pending])
            self._add("dcl_label_requeued", float(len(pending)))
            for share in pending:
                self.cluster.replace_collector(share.index)
        if pending:
            raise CollectorsLost(f"ray collectors {[s.index for s in pending]}: died again while labelling "
                                 f"iteration {job.iteration} (deploy.max_restarts "
                                 f"{self.cluster.cfg.deploy.max_restarts})")
        self._timing(job, [r["seconds"] for r in replies.values()], time.perf_counter() - start)
        return [(s, replies[s.index]) for s in placement.shares]

    def _gather(self, key: str, blob: object, shares: list[Share]) -> tuple[dict[int, PartReply], list[Share]]:
        from ray.exceptions import RayActorError, RayTaskError

        from skurl.modes.ray.actors import get

        actors, timeout = self.cluster.collector_actors, self.cluster.cfg.dcl.label_timeout_s
        refs = {s.index: actors[s.index].label.remote(key, blob) for s in shares}
        replies, lost = {}, []
        for share in shares:
            try:
                replies[share.index] = get(refs[share.index], timeout, f"ray collector {share.index}: label '{key}'")
            except RayActorError as exc:
                if isinstance(exc, RayTaskError):  # it raised: its error, not its death
                    raise
                lost.append(share)
        return replies, lost

    def _label_part(self, job: LabelJob, share: Share, reply: PartReply) -> LabelPart:
        if "manifest" not in reply:
            return LabelPart.from_arrays(reply["arrays"])
        from skurl.store import CorruptShardError

        try:
            return self._read(reply)
        except CorruptShardError as exc:  # asked again once; a second bad part fails the iteration
            self._add("dcl_label_shards_refused", 1.0)
            get_metrics().dcl_label_shards_total.labels("refused").inc()
            log.warning("dcl iteration %d: %s; asking ray collector %d again", job.iteration, exc, share.index)
            got, lost = self._gather(self.cluster.placement(job.shard).key, encode_job(job), [share])
            if lost:
                raise CollectorsLost(f"ray collector {share.index}: lost while re-labelling") from exc
            return self._read(got[share.index])

    def _read(self, reply: PartReply) -> LabelPart:
        from skurl.store import ShardManifest

        arrays = self.cluster.store().get_shard(ShardManifest.from_json(reply["manifest"], "ray collector label"))
        self._add("dcl_label_shards_stored", 1.0)
        get_metrics().dcl_label_shards_total.labels("stored").inc()
        return LabelPart.from_arrays(arrays)

    def _timing(self, job: LabelJob | CheckJob, seconds: list[float], wall: float) -> None:
        """Per-collector busy seconds against the fan-out's wall time: the idle share is the
        part of the wall time the average collector waited (for the slowest one, the wire)."""
        kind = "label" if isinstance(job, LabelJob) else "check"
        for s in seconds:
            get_metrics().dcl_collector_label_seconds.observe(s)
        self._add(f"dcl_{kind}_collector_seconds_max", max(seconds))
        self._add(f"dcl_{kind}_wall_seconds", wall)
        idle = 1.0 - (sum(seconds) / len(seconds)) / max(wall, 1e-9)
        self._figures[f"dcl_{kind}_collector_idle_share"] = max(idle, 0.0)
        if kind == "label":
            get_metrics().dcl_collector_idle_share.set(max(idle, 0.0))

    def _add(self, name: str, value: float) -> None:
        self._figures[name] = self._figures.get(name, 0.0) + value
