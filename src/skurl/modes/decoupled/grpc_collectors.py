"""Decoupled mode's collectors for the one loop (train/loop.py): GrpcCollectors (`skurl
collector` processes over gRPC, shards through the rollout store), their weights under
wire versions (sync/wire.py's WirePublisher on the run's sync backend). The minibatch
order depends only on (seed, iteration), so the weights equal `--mode colocated`'s bit
for bit.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import grpc
import numpy as np

from skurl.buffer.assemble import ShardAssembly, sample_mask
from skurl.buffer.rollout import Rollout
from skurl.collect.collectors import Collected, SampleIndex
from skurl.collect.lost_share import judge_loss
from skurl.config import Config
from skurl.errors import UserError
from skurl.modes.decoupled.collect_report import CollectReport, report_scalars, rollout_scalars
from skurl.modes.decoupled.collector_client import CollectorClient
from skurl.modes.decoupled.lag_watch import CollectorLagWatch, held_wire_of, newest_wire
from skurl.rpc.errors import RequestRejectedError, ServerUnavailableError
from skurl.store import CorruptShardError, ShardManifest
from skurl.sync.api import WeightBackend
from skurl.sync.wire import WirePublisher
from skurl.telemetry.metrics import business_from_totals, get_metrics

if TYPE_CHECKING:
    from skurl.store.api import RolloutStore
    from skurl.telemetry.stages import StageTimer

log = logging.getLogger("skurl.modes")
_UNAVAILABLE_PAUSE_S = 0.5


class CollectError(UserError):
    """An iteration's data could not be collected (shards still bad after the retries)."""


class GrpcCollectors:
    """Collectors of --mode decoupled: `skurl collector` processes over gRPC, their shards
    through the rollout store. Each iteration: publish the version (wire), ask every
    collector for its share at it (each waits until it holds it: the sync barrier), read and
    verify the shards (checksums, version, seed, episode, shapes, SKUs) and assemble them
    (buffer/assemble.py). A corrupt or missing shard is reported and that collector's share
    collected again (never trained on); a lost collector is waited for (a launcher restarts
    it); after a learner restart the interrupted iteration's stored shards are read back."""

    def __init__(self, cfg: Config, addresses: Sequence[str], store: RolloutStore, weights: WirePublisher,
                 weights_of: Callable[[], dict[str, Any]], assembly: ShardAssembly, timer: StageTimer, *,
                 grid_center: tuple[str, str], run_name: str, resumed: bool) -> None:
        self.cfg, self.store, self.weights, self.weights_of = cfg, store, weights, weights_of
        self.assembly, self.timer, self.grid_center, self.run_name = assembly, timer, grid_center, run_name
        self._resumed = resumed
        self.version = 0  # the learner version of the iteration being collected
        self.seed = cfg.train.seed  # and its seed
        self.clients: dict[str, CollectorClient] = {}
        self._skus_of: dict[str, int] = {}  # each collector's SKUs, from its last shard
        self._pool: ThreadPoolExecutor | None = None
        self.watch: CollectorLagWatch | None = None  # bounded staleness: collectors' lag (Driven)
        try:
            self._connect(addresses)
        except BaseException:
            self.close()
            raise
        self._pool = ThreadPoolExecutor(len(self.clients), "collect")

    def collect(self, iteration: int, seed: int, version: int, sample: SampleIndex) -> Collected:
        """publish -> collect (barrier) -> verify + assemble."""
        self.version, self.seed = version, seed
        report = CollectReport()
        n = len(self.assembly.sku_ids)
        self.assembly.chosen = sample_mask(n, sample(n))
        shares = self._stored_shares(iteration, report) if self._resumed else {}
        self._resumed = False
        missing = [cid for cid in self.clients if cid not in shares]
        if missing:
            with self.timer.stage("sync"):
                self.weights.ensure(version, self.weights_of)
            shares.update(self._collect_shares(iteration, missing, report))
        with self.timer.stage("gather"):
            rollout, scalars = self._assemble(iteration, shares, report)
        self._record_metrics(report)
        watched = self.watch.take_figures() if self.watch is not None else {}
        return Collected(rollout, {**scalars, **report_scalars(report, self.weights.publish_unix),
                                   **report.loss.scalars(), **watched})

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

    def version_floor(self, backend: WeightBackend) -> int:
        """First wire version every collector and the sync backend will take as newer."""
        held = [backend.published_version(), *(newest_wire(c.stats()) for c in self.clients.values())]
        return max((v for v in held if v is not None), default=-1) + 1

    def close(self) -> None:
        """Idempotent: the loop closes its collectors and then the mode's parts, which own
        these too (Driven)."""
        for client in self.clients.values():
            client.close()
        self.clients = {}
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    # ------------------------------------------------------------------ collection
    def _collect_shares(self, it: int, ids: list[str],
                        report: CollectReport) -> dict[str, tuple[ShardManifest, dict]]:
        """Collect `ids`' shares of iteration `it`, again for shards that come back bad;
        collectors found dead are judged by the collector-loss rule (collect/lost_share.py)."""
        got: dict[str, tuple[ShardManifest, dict]] = {}
        pending = list(ids)
        for attempt in range(1 + self.cfg.deploy.collect_retries):
            if attempt:
                report.recollected += len(pending)
                log.warning("iteration %d: collecting the shares of %s again", it, pending)
            with self.timer.stage("collect"):
                t0 = time.perf_counter()
                replies = self._collect_all(it, pending, report, patient=bool(attempt))
                if not attempt:
                    replies.update(self._judge_lost(it, [c for c in pending if c not in replies], replies, report))
                    pending = [c for c in pending if c not in report.loss.collectors or report.loss.waited]
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

    def _judge_lost(self, it: int, lost: list[str], replies: dict[str, dict],
                    report: CollectReport) -> dict[str, dict]:
        """The rule for collectors that were unreachable: train without their SKUs, or wait
        for them (a launcher restarts them) and collect their shares; the latter's replies."""
        if not lost:
            return {}
        n = len(self.assembly.sku_ids)
        covered = sum(int(json.loads(r["manifest_json"])["sku_count"]) for r in replies.values()
                      if r.get("manifest_json"))
        unknown = [c for c in lost if c not in self._skus_of]
        rest = max(n - covered - sum(self._skus_of[c] for c in lost if c in self._skus_of), 0)
        skus = {c: self._skus_of.get(c, rest // max(len(unknown), 1)) for c in lost}
        sampled = self.assembly.chosen is not None  # the learner's SKU sample needs every share
        threshold = 0.0 if sampled else self.cfg.deploy.max_lost_share
        report.loss = judge_loss(skus, n, threshold, f"iteration {it}" + (" (ppo.sample_skus: every share is needed)"
                                                                         if sampled else ""))
        return self._collect_all(it, lost, report, patient=True) if report.loss.waited else {}

    def _collect_all(self, it: int, ids: list[str], report: CollectReport, *, patient: bool) -> dict[str, dict]:
        """Replies of `ids`; impatient: a collector found unreachable is left out (not waited for)."""
        futures = {cid: self._pool.submit(self._collect_one, cid, it, report, patient) for cid in ids}  # type: ignore[union-attr]  # _connect made it in __init__
        if self.watch is not None:
            self.watch.wait(futures, held_wire_of(self.clients, self.watch.poll_s))
        out = {}
        for cid, f in futures.items():
            exc = f.exception()
            if exc is None:
                out[cid] = f.result()
            elif patient or not isinstance(exc, ServerUnavailableError):
                raise exc
        return out

    def _collect_one(self, cid: str, it: int, report: CollectReport, patient: bool) -> dict[str, Any]:
        cfg, client = self.cfg, self.clients[cid]
        deadline = time.monotonic() + cfg.deploy.reconnect_timeout_s
        republished = 0
        while True:
            wire = self.weights.wire_of(self.version)
            start = time.perf_counter()
            try:
                reply = client.collect(iteration=it, seed=self.seed, episode=it,
                                       min_version=wire, wait_s=cfg.sync.timeout_s,
                                       obs_sku_ids=self._obs_sku_ids(), grid_center=self.grid_center)
                report.rpc_seconds[cid] = time.perf_counter() - start
                return reply
            except ServerUnavailableError:
                if not patient or time.monotonic() > deadline:
                    raise
                time.sleep(_UNAVAILABLE_PAUSE_S)  # a launcher restarts a lost collector
            except RequestRejectedError as exc:
                barrier = exc.code == grpc.StatusCode.FAILED_PRECONDITION
                if not barrier or republished >= cfg.deploy.collect_retries:
                    raise
                republished += 1
                if self.weights.republish(wire, self.version, self.weights_of):
                    report.republished += 1

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
        loaded = dict(zip(manifests, self._pool.map(self._load, manifests.values()), strict=True))  # type: ignore[union-attr]  # _connect made it in __init__
        out = {}
        for cid, manifest in manifests.items():
            arrays = loaded[cid]
            problem = arrays if isinstance(arrays, str) else self._check_share(it, manifest, arrays)
            if problem:
                report.corrupt += 1
                say("iteration %d: shard %s %s; not trained on", it, manifest.name, problem)
                continue
            report.metas[cid] = _meta(manifest)
            self._skus_of[cid] = manifest.sku_count
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

    def stored_rollout(self, episode: int, version: int) -> Collected | None:
        """Episode `episode` of learner version `version` from the shards in the store
        (bounded staleness after a restart: modes/decoupled/shard_stream.py); None unless every
        collector's shard is there and verifies."""
        self.version, self.seed, self.assembly.chosen = version, self.cfg.train.seed, None
        report = CollectReport()
        shares = self._read_shares(episode, list(self.clients), report, quiet=True)
        if len(shares) < len(self.clients):
            return None
        rollout, scalars = self._assemble(episode, shares, report)
        return Collected(rollout, {**scalars, **report_scalars(report, self.weights.publish_unix)})

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
        version = self.weights.wire.map.get(manifest.policy_version)
        if version != self.version:
            return (f"holds wire version {manifest.policy_version} (learner version {version}), "
                    f"expected learner version {self.version}")
        if (meta.get("seed"), meta.get("episode")) != (self.seed, it):
            return (f"is episode {meta.get('episode')} of seed {meta.get('seed')}, expected "
                    f"{it} of {self.seed}")
        return self.assembly.problem(arrays)

    # ------------------------------------------------------------------ assembly
    def _obs_sku_ids(self) -> np.ndarray | None:
        """The SKUs whose observations the collectors keep: the learner's sample."""
        chosen = self.assembly.chosen
        return None if chosen is None else self.assembly.sku_ids[chosen]

    def _assemble(self, it: int, shares: dict[str, tuple[ShardManifest, dict]],
                  report: CollectReport) -> tuple[Rollout, dict[str, float]]:
        """The shards as the co-located Rollout (buffer/assemble.py) and the figures of the
        whole rollout (taken before a SKU sample keeps its own obs only)."""
        out = self.assembly.assemble((arrays for _, arrays in shares.values()), version=self.version,
                                     seed=self.seed, episode=it, missing_ok=bool(report.loss.collectors))
        return out, rollout_scalars(out, report)

    # ------------------------------------------------------------------ figures
    def _record_metrics(self, report: CollectReport) -> None:
        """Barrier waits and the collected SKU-days' business figures (Prometheus)."""
        m = get_metrics()
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
            m.record_business(self.run_name, "collect", business_from_totals(totals, sku_days, self.cfg.sim.backorders))


def _meta(manifest: ShardManifest) -> dict[str, Any]:
    """A shard's collector meta with the manifest's own fields it was split from."""
    return {**manifest.meta, "policy_version": manifest.policy_version,
            "sku_count": manifest.sku_count, "rows": manifest.rows}
