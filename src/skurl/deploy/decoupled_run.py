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

from skurl.buffer.rollout import Columns, Rollout
from skurl.config import Config
from skurl.deploy.collect_report import CollectReport, report_scalars, rollout_scalars
from skurl.deploy.colocated import TRAINED, ColocatedRun
from skurl.deploy.remote_grid import publish_center
from skurl.deploy.roles import check_decoupled
from skurl.deploy.shard_envs import business_from_totals
from skurl.errors import UserError
from skurl.rpc.collector_client import CollectorClient
from skurl.rpc.errors import RequestRejectedError, ServerUnavailableError
from skurl.rpc.feature_delta import PACKED, decode_days
from skurl.sim.layout import layout_for
from skurl.store import CorruptShardError, ShardManifest, open_store
from skurl.telemetry.metrics import get_metrics

log = logging.getLogger("skurl.deploy")
WIRE_FILE = "wire_versions.jsonl"
PER_STEP = (Columns.OBS, Columns.ACTIONS, Columns.LOGP, Columns.VALUES, Columns.REWARDS,
            Columns.DONES, Columns.TERMINALS)
PER_SKU = (Columns.LAST_OBS, Columns.BOOTSTRAP)
OBS_ROWS = "obs_rows"  # catalog rows of a shard's decoded obs (the learner's sample)
_UNAVAILABLE_PAUSE_S = 0.5


class CollectError(UserError):
    """An iteration's data could not be collected (shards still bad after the retries)."""


class WireVersions:
    """Published wire version -> learner version, appended to a JSONL file (survives a
    learner restart, so stored shards of the interrupted iteration can be matched)."""

    def __init__(self, path: Path, floor: int = 0) -> None:
        self.path = path
        self.map: dict[int, int] = {}
        if path.is_file():
            for line in path.read_text().splitlines():
                try:
                    rec = json.loads(line)
                    self.map[int(rec["wire"])] = int(rec["version"])
                except (ValueError, KeyError, TypeError):
                    continue  # a torn last line
        self.next = max(floor, max(self.map, default=-1) + 1)

    def new(self, learner_version: int) -> int:
        wire = max(learner_version, self.next)
        self.map[wire] = learner_version
        self.next = wire + 1
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(json.dumps({"wire": wire, "version": learner_version}) + "\n")
        return wire


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
        self._sorter = np.argsort(self.catalog.sku_id, kind="stable")
        self.metrics_url: str | None = None  # this process's /metrics, once served
        self._chosen: np.ndarray | None = None  # catalog rows the learner trains on (None: all)

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
        self._chosen = self._learner_rows()
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
        ids = arrays.get(Columns.SKU_IDS)
        if ids is None:
            return arrays  # _check_share names what is missing
        obs_ids = arrays.get(Columns.OBS_SKU_IDS, ids)
        select = None
        if self._chosen is not None:
            obs_rows = self._rows(obs_ids)
            select = np.flatnonzero(self._chosen[obs_rows])
            arrays[OBS_ROWS] = obs_rows[select]
            if Columns.LAST_OBS in arrays:
                arrays[Columns.LAST_OBS] = arrays[Columns.LAST_OBS][select]
        if all(k in arrays for k in PACKED):
            try:
                arrays[Columns.OBS] = decode_days(arrays, obs_ids.shape[0],
                                                  self.learner.model.obs_dim, select)
            except ValueError as exc:
                return f"is damaged ({exc})"
            for k in PACKED:
                del arrays[k]
        elif select is not None and Columns.OBS in arrays:
            arrays[Columns.OBS] = arrays[Columns.OBS][:, select]
        return arrays

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
        missing = [k for k in (*PER_STEP, *PER_SKU, Columns.SKU_IDS) if k not in arrays]
        if missing:
            return f"lacks arrays {missing}"
        n = arrays[Columns.SKU_IDS].shape[0]
        if self._chosen is None and Columns.OBS_SKU_IDS in arrays and arrays[Columns.OBS_SKU_IDS].shape[0] != n:
            return (f"holds the obs of {arrays[Columns.OBS_SKU_IDS].shape[0]} of its {n} SKUs, but "
                    "the learner trains on every SKU (was ppo.sample_skus changed?)")
        if OBS_ROWS in arrays:
            n = arrays[OBS_ROWS].shape[0]
        dim = self.learner.model.obs_dim
        want = (self.cfg.sim.days, n, dim)
        if arrays[Columns.OBS].shape != want:
            return f"has obs of shape {arrays[Columns.OBS].shape}, expected {want}"
        if arrays[Columns.LAST_OBS].shape != (n, dim):
            return f"has last_obs of shape {arrays[Columns.LAST_OBS].shape}, expected {(n, dim)}"
        return ""

    # ------------------------------------------------------------------ assembly
    def _rows(self, sku_ids: np.ndarray) -> np.ndarray:
        """Catalog rows of `sku_ids` (CollectError for ids not in the catalog)."""
        ids = self.catalog.sku_id
        pos = np.searchsorted(ids[self._sorter], sku_ids)
        rows = self._sorter[np.minimum(pos, len(ids) - 1)]
        bad = ids[rows] != sku_ids
        if bad.any():
            raise CollectError(f"a shard holds SKU id {int(sku_ids[np.argmax(bad)])}, which is "
                               "not in the learner's catalog (same catalog config everywhere?)")
        return rows

    def _obs_sku_ids(self) -> np.ndarray | None:
        """The SKUs whose observations the collectors keep: the learner's sample."""
        return None if self._chosen is None else self.catalog.sku_id[self._chosen]

    def _learner_rows(self) -> np.ndarray | None:
        """Catalog rows (as a mask) the learner trains on this iteration; None for all."""
        index = self.learner.sample_index(len(self.catalog))
        if index is None:
            return None
        chosen = np.zeros(len(self.catalog), bool)
        chosen[index] = True
        return chosen

    def _assemble(self, it: int, shares: dict[str, tuple[ShardManifest, dict]],
                  report: CollectReport) -> tuple[Rollout, dict[str, float]]:
        """The shards' columns scattered into catalog row order: the co-located Rollout
        (with the obs of the learner's sample only when it trains on one: the only SKUs
        whose obs were decoded), and the figures of the whole rollout."""
        n, days, dim = len(self.catalog), self.cfg.sim.days, self.learner.model.obs_dim
        out = Rollout.allocate(days, self.catalog.sku_id, dim if self._chosen is None else 0)
        seen = np.zeros(n, np.int32)
        placed = []
        for _, arrays in shares.values():
            rows = self._rows(arrays[Columns.SKU_IDS])
            np.add.at(seen, rows, 1)
            for name in PER_STEP:
                if name != Columns.OBS:
                    getattr(out, name)[:, rows] = arrays[name]
            out.bootstrap[rows] = arrays[Columns.BOOTSTRAP]
            if self._chosen is None:
                out.obs[:, rows] = arrays[Columns.OBS]
                out.last_obs[rows] = arrays[Columns.LAST_OBS]
            else:
                placed.append((arrays[OBS_ROWS], arrays[Columns.OBS], arrays[Columns.LAST_OBS]))
        if not (seen == 1).all():
            i = int(np.argmax(seen != 1))
            raise CollectError(f"iteration {it}: SKU {int(self.catalog.sku_id[i])} is in "
                               f"{int(seen[i])} shards, expected exactly one")
        out.policy_version, out.seed, out.episode = self.learner.version, self.cfg.train.seed, it
        scalars = rollout_scalars(out, report)
        return (out if self._chosen is None else self._sample(out, placed)), scalars

    def _sample(self, full: Rollout, placed: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> Rollout:
        """`full` with the decoded obs of the learner's sample (Rollout.obs_sku_ids), which
        Learner.update restricts to that sample as it would the whole rollout."""
        assert self._chosen is not None
        index = np.flatnonzero(self._chosen)
        position = np.full(len(self.catalog), -1, np.int64)
        position[index] = np.arange(index.size)
        dim = self.learner.model.obs_dim
        full.obs = np.empty((full.days, index.size, dim), np.float32)
        full.last_obs = np.empty((index.size, dim), np.float32)
        full.obs_sku_ids = self.catalog.sku_id[index]
        filled = np.zeros(index.size, np.int64)
        for rows, part, last in placed:
            full.obs[:, position[rows]] = part
            full.last_obs[position[rows]] = last
            np.add.at(filled, position[rows], 1)
        if not (filled == 1).all():
            raise CollectError(f"the shards hold the obs of {int((filled > 0).sum())} of the "
                               f"learner's {index.size} sampled SKUs, expected each exactly once")
        return full

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
