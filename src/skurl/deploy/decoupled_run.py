"""The learner of the decoupled deployment: the co-located loop with remote collectors.

DecoupledRun is ColocatedRun (deploy/colocated.py: evaluation, logging, checkpoints,
report) with another `iteration`: publish version V on the sync backend; ask every
collector for one episode at V (each waits until it holds V: the sync barrier); read the
iteration's shards from the rollout store, verify them (checksums, version, seed,
episode, shapes, SKUs), scatter their columns into the catalog's row order and train.
The minibatch order depends only on (seed, iteration) (learn/learner.py), so the weights
are those of `--mode colocated` bit for bit.

Failures: a corrupt or missing shard is reported and that collector's share collected
again (never trained on); weights no collector could load (corrupted in Redis: the
collectors keep the previous version) time out at the barrier and are published again
under a newer version; a lost collector is waited for (a launcher restarts it). After a
learner restart (`--resume`) the interrupted iteration's stored shards are read back
instead of collected again.

Versions on the wire: collectors accept only growing versions, so what is published is a
"wire" version >= the learner's version, mapped back through run_dir/wire_versions.jsonl
(it grows past the learner's when weights are published again or a Redis key already
holds newer versions).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any

import grpc
import numpy as np

from skurl.buffer.assemble import ShardAssembly, sample_mask
from skurl.buffer.rollout import Rollout
from skurl.config import Config
from skurl.deploy.collect_report import CollectReport, report_scalars, rollout_scalars
from skurl.deploy.colocated import TRAINED, ColocatedRun
from skurl.deploy.remote_grid import publish_center
from skurl.deploy.roles import check_decoupled
from skurl.deploy.shard_envs import business_from_totals
from skurl.errors import UserError
from skurl.rpc.collector_client import CollectorClient
from skurl.rpc.errors import RequestRejectedError, ServerUnavailableError
from skurl.sim.layout import layout_for
from skurl.store import CorruptShardError, ShardManifest, open_store
from skurl.sync.wire_versions import WIRE_FILE, WireVersions
from skurl.telemetry.metrics import get_metrics

log = logging.getLogger("skurl.deploy")
_UNAVAILABLE_PAUSE_S = 0.5


class CollectError(UserError):
    """An iteration's data could not be collected (shards still bad after the retries)."""


class _SchemaOnly:
    """What ColocatedRun asks of its first env: the observation schema (the learner
    simulates nothing; the sim servers' shards together have the catalog's schema)."""

    def __init__(self, schema: Any) -> None:
        self.schema = schema


class DecoupledRun(ColocatedRun):
    def __init__(self, cfg: Config, run_dir: str | Path, collectors: Sequence[str], weights: Any,
                 *, resume: bool = False, stream: IO[str] | None = None, baseline: bool = True,
                 run_name: str | None = None) -> None:
        check_decoupled(cfg)
        super().__init__(cfg, run_dir, resume=resume, stream=stream, baseline=baseline)
        self.store = open_store(cfg.store)
        self.grid_center = publish_center(self.store, self.grid.tuned)  # the collectors' cover grid
        self.publisher = weights
        self.run_name = run_name or self.run_dir.name
        self.clients: dict[str, CollectorClient] = {}
        try:
            self._connect(collectors)
        except BaseException:
            self.close()
            raise
        self.wire = WireVersions(self.run_dir / WIRE_FILE, floor=self._version_floor())
        self._published: tuple[int, int] | None = None  # (learner version, wire version)
        self._publish_unix: dict[int, float] = {}
        self._lock = threading.Lock()
        self._resumed = resume
        self._pool = ThreadPoolExecutor(len(self.clients), "collect")
        self.metrics_url: str | None = None  # this process's /metrics, once served
        # Its `chosen`: the catalog rows the learner trains on this iteration (None: all).
        self.assembly = ShardAssembly(self.catalog.sku_id, cfg.sim.days, self.learner.model.obs_dim)

    def _env(self, shard: int) -> Any:
        return _SchemaOnly(layout_for(self.catalog, self.cfg.sim.review_days).schema)

    def warm_start_env(self) -> Any:
        return self._local_env(0)  # the learner records the baseline itself, as colocated does

    def _connect(self, addresses: Sequence[str]) -> None:
        for address in addresses:
            client = CollectorClient(address, self.cfg.rpc,
                                     connect_timeout_s=self.cfg.deploy.start_timeout_s)
            cid = client.stats()["collector_id"]
            if cid in self.clients:
                client.close()
                raise UserError(f"collectors {self.clients[cid].address} and {address} both "
                                f"call themselves '{cid}'; expected distinct ids")
            self.clients[cid] = client

    def _version_floor(self) -> int:
        """First wire version every collector and the sync backend will take as newer."""
        held = [self.publisher.published_version()]
        for client in self.clients.values():
            stats = client.stats()
            held += [stats["policy_version"], int(stats.get("pending_version", -1))]
        return max((v for v in held if v is not None), default=-1) + 1

    def close(self) -> None:
        for client in self.clients.values():
            client.close()
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=True)

    # ------------------------------------------------------------------ the iteration
    def iteration(self, it: int) -> dict[str, Any]:
        """publish -> collect (barrier) -> verify + assemble -> learn."""
        timer = self.timer
        timer.reset()
        start = time.perf_counter()
        report = CollectReport()
        self.assembly.chosen = sample_mask(len(self.catalog), self.learner.sample_index(len(self.catalog)))
        shares = self._stored_shares(it, report) if self._resumed else {}
        self._resumed = False
        missing = [cid for cid in self.clients if cid not in shares]
        if missing:
            with timer.stage("sync"):
                self._ensure_published()
            shares.update(self._collect_shares(it, missing, report))
        with timer.stage("gather"):
            rollout, scalars = self._assemble(it, shares, report)
        with timer.stage("learn"):
            learn_start = time.perf_counter()
            stats = self.learner.update(rollout, train_policy=self.trains_policy(it))
            learn_seconds = time.perf_counter() - learn_start
        with timer.stage("sync"):
            self._publish()
        seconds = time.perf_counter() - start
        self._record_metrics(stats, learn_seconds, report)
        return {**stats, **scalars, "trained_transitions": stats["transitions"],
                "policy_version": self.learner.version, "iteration_seconds": seconds,
                **report_scalars(report, seconds, self._publish_unix), **timer.as_scalars(exclusive=True)}

    def checkpoint(self, it: int) -> bool:
        saved = super().checkpoint(it)
        if saved:
            self.store.delete_before(self.learner.iteration)  # resume needs no older shards
        return saved

    def evaluate(self, it: int) -> dict[str, Any]:
        out = super().evaluate(it)
        if self.last_eval is not None:
            get_metrics().record_business(self.run_name, TRAINED, self.last_eval)
        return out

    # ------------------------------------------------------------------ weights
    def _publish(self) -> int:
        """The learner's weights as a new wire version; returns it."""
        wire = self.wire.new(self.learner.version)
        self._publish_unix[wire] = time.time()
        self.publisher.publish(wire, self.learner.weights())
        self._published = (self.learner.version, wire)
        get_metrics().learner_weight_version.set(self.learner.version)
        return wire

    def _ensure_published(self) -> int:
        if self._published is None or self._published[0] != self.learner.version:
            return self._publish()
        return self._published[1]

    def _republish(self, wire: int, report: CollectReport) -> int:
        """Weights of `wire` reached a collector not in time: publish them again, newer
        (a collector rejects damaged weights and keeps its version; versions only grow)."""
        with self._lock:
            assert self._published is not None
            if self._published[1] == wire:
                log.error("weights v%d (learner version %d) did not reach every collector "
                          "within sync.timeout_s=%g s; publishing them again", wire,
                          self.learner.version, self.cfg.sync.timeout_s)
                self._publish()
                report.republished += 1
            return self._published[1]

    # ------------------------------------------------------------------ collection
    def _collect_shares(self, it: int, ids: list[str],
                        report: CollectReport) -> dict[str, tuple[ShardManifest, dict]]:
        """Collect `ids`' shares of iteration `it`, again for shards that come back bad."""
        got: dict[str, tuple[ShardManifest, dict]] = {}
        pending = list(ids)
        for attempt in range(1 + self.cfg.deploy.collect_retries):
            if attempt:
                report.recollected += len(pending)
                log.warning("iteration %d: collecting the shares of %s again", it, pending)
            with self.timer.stage("collect"):
                t0 = time.perf_counter()
                replies = self._collect_all(it, pending, report)
                report.collect_wall += time.perf_counter() - t0
            with self.timer.stage("gather"):
                found = self._read_shares(it, pending, report, replies)
            got.update(found)
            pending = [cid for cid in pending if cid not in found]
            if not pending:
                return got
        raise CollectError(f"iteration {it}: the shards of collectors {pending} are still corrupt "
                           f"or missing after deploy.collect_retries={self.cfg.deploy.collect_retries} "
                           "re-collections")

    def _collect_all(self, it: int, ids: list[str], report: CollectReport) -> dict[str, dict]:
        futures = {cid: self._pool.submit(self._collect_one, cid, it, report) for cid in ids}
        errors = [f.exception() for f in futures.values()]
        for exc in errors:
            if exc is not None:
                raise exc
        return {cid: f.result() for cid, f in futures.items()}

    def _collect_one(self, cid: str, it: int, report: CollectReport) -> dict[str, Any]:
        cfg, client = self.cfg, self.clients[cid]
        deadline = time.monotonic() + cfg.deploy.reconnect_timeout_s
        republished = 0
        assert self._published is not None
        while True:
            wire = self._published[1]
            start = time.perf_counter()
            try:
                reply = client.collect(iteration=it, seed=cfg.train.seed, episode=it,
                                       min_version=wire, wait_s=cfg.sync.timeout_s,
                                       obs_sku_ids=self._obs_sku_ids(), grid_center=self.grid_center)
                report.rpc_seconds[cid] = time.perf_counter() - start
                return reply
            except ServerUnavailableError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(_UNAVAILABLE_PAUSE_S)  # a launcher restarts a lost collector
            except RequestRejectedError as exc:
                barrier = exc.code == grpc.StatusCode.FAILED_PRECONDITION
                if not barrier or republished >= cfg.deploy.collect_retries:
                    raise
                republished += 1
                self._republish(wire, report)

    def _read_shares(self, it: int, ids: list[str], report: CollectReport,
                     replies: dict[str, dict] | None = None,
                     quiet: bool = False) -> dict[str, tuple[ShardManifest, dict]]:
        """Verified shards of `ids` for iteration `it`; bad ones are reported and left out."""
        say = log.info if quiet else log.error
        listed = {m.collector_id: m for m in self.store.list_shards(it)}
        manifests = {}
        for cid in ids:
            manifest = listed.get(cid)
            written = (replies or {}).get(cid, {}).get("manifest_json")
            if manifest is not None and written and json.loads(written)["sha256"] != manifest.sha256:
                manifest = None  # the listing still shows an older shard
            if manifest is None:
                say("iteration %d: no shard of collector %s in %s", it, cid, self.store.url)
            else:
                manifests[cid] = manifest
        # Shards are read side by side: zstd and the S3 client release the GIL.
        loaded = dict(zip(manifests, self._pool.map(self._load, manifests.values()), strict=True))
        out = {}
        for cid, manifest in manifests.items():
            arrays = loaded[cid]
            problem = arrays if isinstance(arrays, str) else self._check_share(it, manifest, arrays)
            if problem:
                report.corrupt += 1
                say("iteration %d: shard %s %s; not trained on", it, manifest.name, problem)
                continue
            report.metas[cid] = _meta(manifest)
            out[cid] = (manifest, arrays)
        return out

    def _load(self, manifest: ShardManifest) -> dict[str, np.ndarray] | str:
        """The shard's arrays (packed obs unpacked), or why they cannot be read (damaged).
        When the learner trains on a sample of SKUs, OBS and LAST_OBS keep the sampled
        SKUs' rows only (the only ones decoded) and OBS_ROWS names their catalog rows."""
        try:
            arrays = self.store.get_shard(manifest)
        except CorruptShardError as exc:
            return f"is damaged ({exc.reason})"
        return self.assembly.unpack(arrays)

    def _stored_shares(self, it: int, report: CollectReport) -> dict[str, tuple[ShardManifest, dict]]:
        """After a restart: the interrupted iteration's shards already in the store."""
        shares = self._read_shares(it, list(self.clients), CollectReport(), quiet=True)
        if shares:
            log.warning("iteration %d: re-reading %d stored shards (of %s) instead of "
                        "collecting them again", it, len(shares), sorted(shares))
            report.metas.update({cid: _meta(m) for cid, (m, _) in shares.items()})
            report.from_store = len(shares)
        return shares

    def _check_share(self, it: int, manifest: ShardManifest, arrays: dict[str, np.ndarray]) -> str:
        """Why the shard cannot be trained on in this iteration ('' when it can)."""
        meta = manifest.meta
        version = self.wire.map.get(manifest.policy_version)
        if version != self.learner.version:
            return (f"holds wire version {manifest.policy_version} (learner version {version}), "
                    f"expected learner version {self.learner.version}")
        if (meta.get("seed"), meta.get("episode")) != (self.cfg.train.seed, it):
            return (f"is episode {meta.get('episode')} of seed {meta.get('seed')}, expected "
                    f"{it} of {self.cfg.train.seed}")
        return self.assembly.problem(arrays)

    # ------------------------------------------------------------------ assembly
    def _obs_sku_ids(self) -> np.ndarray | None:
        """The SKUs whose observations the collectors keep: the learner's sample."""
        chosen = self.assembly.chosen
        return None if chosen is None else self.catalog.sku_id[chosen]

    def _assemble(self, it: int, shares: dict[str, tuple[ShardManifest, dict]],
                  report: CollectReport) -> tuple[Rollout, dict[str, float]]:
        """The shards as the co-located Rollout (buffer/assemble.py) and the figures of the
        whole rollout (taken before a SKU sample keeps its own obs only)."""
        out = self.assembly.assemble((arrays for _, arrays in shares.values()),
                                     version=self.learner.version, seed=self.cfg.train.seed, episode=it)
        return out, rollout_scalars(out, report)

    # ------------------------------------------------------------------ figures
    def _record_metrics(self, stats: dict[str, float], learn_seconds: float,
                        report: CollectReport) -> None:
        m = get_metrics()
        m.learner_training_step_duration_seconds.observe(learn_seconds)
        if "grad_norm" in stats:
            m.learner_gradient_norm.set(stats["grad_norm"])
        m.record_gpu_memory(self.learner.device)
        waits = [float(x.get("barrier_wait_s") or 0.0) for x in report.metas.values()]
        if waits:
            m.barrier_wait_seconds.observe(max(waits))
        totals: dict[str, float] = {}
        sku_days = 0
        for meta in report.metas.values():
            for k, v in (meta.get("totals") or {}).items():
                totals[k] = totals.get(k, 0.0) + float(v)
            sku_days += int(meta.get("sku_days", 0))
        if sku_days:
            m.record_business(self.run_name, "collect", business_from_totals(totals, sku_days))


def _meta(manifest: ShardManifest) -> dict[str, Any]:
    """A shard's collector meta with the manifest's own fields it was split from."""
    return {**manifest.meta, "policy_version": manifest.policy_version,
            "sku_count": manifest.sku_count, "rows": manifest.rows}
