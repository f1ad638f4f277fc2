"""DCL's labelling on the decoupled collectors (learn/labelling.py's Labellers over gRPC).

Every collector gets the job (Label RPC, modes/decoupled/label_service.py) and labels the
planned states among its own SKUs; its part comes back through the rollout store, verified by
checksum. A collector found unreachable is waited for (the launcher restarts it) up to
deploy.reconnect_timeout_s and asked again: its labels are a function of (seed, iteration,
SKU), so the replacement's part is the one the lost process would have given. One still lost
then follows collection's rule (collect/lost_share.py): within deploy.max_lost_share of the
job's states the iteration proceeds without its part and says so; above it, it fails. A part
the store refuses is asked again once, then fails the iteration.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import numpy as np
from safetensors.numpy import load as st_load

from skurl.collect.lost_share import judge_loss
from skurl.learn.dcl_check import CheckPart
from skurl.learn.dcl_parts import LabelPart
from skurl.learn.label_wire import encode_job
from skurl.learn.labelling import CheckJob, LabelJob
from skurl.rpc.errors import ServerUnavailableError
from skurl.rpc.gen import skurl_pb2 as pb
from skurl.store import CorruptShardError, ShardManifest
from skurl.telemetry.metrics import get_metrics

if TYPE_CHECKING:
    from skurl.modes.decoupled.grpc_collectors import GrpcCollectors

log = logging.getLogger("skurl.modes")
_UNAVAILABLE_PAUSE_S = 0.5


class GrpcLabellers:
    """Label and check jobs sent to every collector of `collectors` (the run's GrpcCollectors:
    its clients, store and grid centre)."""

    def __init__(self, collectors: GrpcCollectors) -> None:
        self.collectors = collectors
        self._pool = ThreadPoolExecutor(max(len(collectors.clients), 1), "label")
        self._figures: dict[str, float] = {}
        self._share_of: dict[str, float] = {}  # each collector's share of the last label job's states
        self._states = 0  # the last label job's planned states

    def label(self, job: LabelJob) -> list[LabelPart]:
        replies = self._fan_out(job)
        parts = {cid: self._label_part(cid, job, reply) for cid, reply in replies.items()}
        self._share_of.update({cid: p.sku_ids.size / max(self._states, 1) for cid, p in parts.items()})
        self._add("dcl_rollout_sku_days_max_collector", max(float(r.sku_days) for r in replies.values()))
        return list(parts.values())

    def check(self, job: CheckJob) -> list[CheckPart]:
        parts = []
        for reply in self._fan_out(job).values():
            arrays = st_load(reply.check)
            parts.append(CheckPart(arrays["sku_ids"].astype(np.int64), arrays["gains"]))
        return parts

    def figures(self) -> dict[str, float]:
        out, self._figures = self._figures, {}
        return out

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def _fan_out(self, job: LabelJob | CheckJob) -> dict[str, pb.LabelReply]:
        """Every reachable collector's reply; those lost past the reconnect timeout are judged
        by deploy.max_lost_share (_judge_lost)."""
        blob, start = encode_job(job), time.perf_counter()
        if isinstance(job, LabelJob):
            self._states = job.plan.states
        futures = {cid: self._pool.submit(self._ask, cid, blob, job.iteration) for cid in self.collectors.clients}
        kind = "label" if isinstance(job, LabelJob) else "check"
        lost = {cid: exc for cid, f in futures.items()
                if isinstance(exc := f.exception(), ServerUnavailableError)}
        replies = {cid: f.result() for cid, f in futures.items() if cid not in lost}
        self._judge_lost(job.iteration, kind, lost, replies)
        seconds, wall = [r.seconds for r in replies.values()], time.perf_counter() - start
        for s in seconds:
            get_metrics().dcl_collector_label_seconds.observe(s)
        self._add(f"dcl_{kind}_collector_seconds_max", max(seconds))
        self._add(f"dcl_{kind}_wall_seconds", wall)
        idle = max(1.0 - (sum(seconds) / len(seconds)) / wall, 0.0)  # of the average collector
        self._figures[f"dcl_{kind}_collector_idle_share"] = idle
        if kind == "label":
            get_metrics().dcl_collector_idle_share.set(idle)
        return replies

    def _judge_lost(self, iteration: int, kind: str, lost: dict[str, ServerUnavailableError],
                    replies: dict[str, pb.LabelReply]) -> None:
        """Proceed without collectors still unreachable when their states are at most
        deploy.max_lost_share of the job's (each one's share of the last label job's states;
        1/collectors before any), else raise the first one's error."""
        if not lost:
            return
        even = 1.0 / len(self.collectors.clients)
        shares = {cid: self._share_of.get(cid, even) for cid in lost}
        share, threshold = sum(shares.values()), self.collectors.cfg.deploy.max_lost_share
        if share > threshold or not replies:
            raise next(iter(lost.values()))
        states = max(self._states, 1)
        judge_loss({cid: round(s * states) for cid, s in shares.items()}, states, threshold,
                   f"dcl iteration {iteration}'s {kind} job", unit="states")
        self._add(f"dcl_{kind}_lost_share", share)

    def _ask(self, cid: str, blob: bytes, iteration: int) -> pb.LabelReply:
        """`cid`'s reply; while it is unreachable, wait for its restart (deploy.reconnect_timeout_s)."""
        cfg = self.collectors.cfg
        deadline = time.monotonic() + cfg.deploy.reconnect_timeout_s
        asked_again = False
        while True:
            try:
                reply = self.collectors.clients[cid].label(blob, cfg.dcl.label_timeout_s,
                                                           grid_center=self.collectors.grid_center)
                if asked_again:
                    self._add("dcl_label_requeued", 1.0)
                return reply
            except ServerUnavailableError:
                if time.monotonic() > deadline:
                    raise
                if not asked_again:
                    log.warning("dcl iteration %d: collector %s unreachable while labelling; waiting to ask "
                                "it again", iteration, cid)
                asked_again = True
                time.sleep(_UNAVAILABLE_PAUSE_S)

    def _label_part(self, cid: str, job: LabelJob, reply: pb.LabelReply) -> LabelPart:
        try:
            return self._read(reply)
        except CorruptShardError as exc:  # asked again once; a second bad part fails the iteration
            self._add("dcl_label_shards_refused", 1.0)
            get_metrics().dcl_label_shards_total.labels("refused").inc()
            log.warning("dcl iteration %d: %s; asking collector %s again", job.iteration, exc, cid)
            return self._read(self._ask(cid, encode_job(job), job.iteration))

    def _read(self, reply: pb.LabelReply) -> LabelPart:
        manifest = ShardManifest.from_json(reply.manifest_json.encode(), "collector label")
        arrays = self.collectors.store.get_shard(manifest)
        if manifest.sku_count != int(arrays["sku_ids"].size):
            raise CorruptShardError(manifest.name, "its SKU count differs from its manifest's")
        self._add("dcl_label_shards_stored", 1.0)
        get_metrics().dcl_label_shards_total.labels("stored").inc()
        return LabelPart.from_arrays(arrays)

    def _add(self, name: str, value: float) -> None:
        self._figures[name] = self._figures.get(name, 0.0) + value
