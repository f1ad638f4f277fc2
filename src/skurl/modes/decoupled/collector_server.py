"""CollectorService: a collector process driven over gRPC (decoupled mode).

Pushed weights are checked as every receiver checks them (weights/codec.py: INVALID_ARGUMENT
and weights_rejected_total otherwise), wait in a slot and load at the start of the next
Collect, never mid-episode; Collect is the sync barrier (a finite wait, at most MAX_WAIT_S,
never past the caller's deadline), then one episode (stored as this collector's shard);
GetBuffer streams the rollout in chunks under the message limit; GetStats returns counters.

More: docs/internals.md (modes/decoupled/collector_server.py)."""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

import grpc
import numpy as np

from skurl.config import RpcConfig
from skurl.errors import UserError
from skurl.rpc.codec import encode_into
from skurl.rpc.errors import CapacityError, NotFoundError, WireError
from skurl.rpc.gen import skurl_pb2 as pb
from skurl.rpc.gen import skurl_pb2_grpc as pb_grpc
from skurl.rpc.health import service_name
from skurl.rpc.options import max_message_bytes
from skurl.rpc.servicer_base import GrpcServer, rpc_method
from skurl.rpc.weights_server import NotNewerError, from_message
from skurl.sim.api import EnvStateError
from skurl.weights.codec import (
    Spec,
    WeightIntegrityError,
    check_weights,
    decode_weights,
    note_rejected,
    spec_of,
)
from skurl.weights.slot import VersionedSlot

if TYPE_CHECKING:
    from skurl.buffer.rollout import Rollout
    from skurl.store.api import RolloutStore

SKU_IDS = "sku_ids"
MAX_WAIT_S = 86_400.0  # the longest sync-barrier wait a Collect may ask for (timeout_s)
MAX_COLLECTS = 4  # Collect calls in flight at once, of the server's 8 handler threads


class NotWiredError(UserError):
    grpc_code = grpc.StatusCode.UNIMPLEMENTED


class CollectorBackend(Protocol):
    def set_weights(self, version: int, tensors: dict[str, Any]) -> None: ...

    def collect(self, seed: int, episode: int, version: int | None = None,
                record: bool = True, obs_skus: np.ndarray | None = None) -> Any: ...


class CollectorServicer(pb_grpc.CollectorServiceServicer):
    def __init__(self, collector_id: str, collector: CollectorBackend | None, cfg: RpcConfig,
                 store: RolloutStore | None = None, keep_iterations: int = 2, *,
                 model_key: str = "policy", like: Spec | None = None) -> None:
        """Pushed weights must be for `model_key` and have `like`'s names, dtypes and
        shapes; `like` defaults to the spec of the backend's `model` when it has one."""
        self.collector_id = collector_id
        self.model_key = model_key
        model = getattr(collector, "model", None)
        self._like = like if like is not None or model is None else spec_of(model.state_dict())
        self._collector = collector
        self._cfg = cfg
        self._store = store
        self._keep = keep_iterations
        self._pending: VersionedSlot[dict[str, Any]] = VersionedSlot()  # newest pushed weights
        self._loaded = -1  # version loaded into the collector
        self._collect_lock = threading.Lock()  # one episode at a time
        # Collects in flight (waiting or running): the rest of the pool stays free for the
        # other RPCs however many Collects a client sends.
        self._in_flight = threading.BoundedSemaphore(MAX_COLLECTS)
        self._rollouts: OrderedDict[int, Any] = OrderedDict()
        self._counts = {"iterations": 0, "transitions": 0, "seconds": 0.0, "last_rate": 0.0}

    # ---------------------------------------------------------------- RPCs
    @rpc_method
    def UpdateWeights(self, request: pb.Weights, context: grpc.ServicerContext) -> pb.WeightsAck:
        blob = from_message(request)
        if blob.version < 0:
            raise WireError(f"collector {self.collector_id}: weights version {blob.version}, "
                            "expected >= 0")
        try:
            tensors = decode_weights(blob)
            check_weights(blob, tensors, self.model_key, self._like)
        except WeightIntegrityError as exc:
            note_rejected("push")
            raise WireError(f"collector {self.collector_id}: refused, keeping version "
                            f"{self._loaded}: {exc}") from None
        if not self._pending.offer(int(request.version), tensors):
            raise NotNewerError(f"collector {self.collector_id}: weights version "
                                f"{request.version} is not newer than held version {self._pending.version}")
        return pb.WeightsAck(key=request.key, version=request.version, accepted=True)

    @rpc_method
    def Collect(self, request: pb.CollectRequest, context: grpc.ServicerContext) -> pb.CollectReply:
        collector = self._require_collector()
        _check_collect(request)
        wait_s = float(request.timeout_s)
        left = context.time_remaining() if context is not None else None
        if left is not None:
            wait_s = min(wait_s, max(left, 0.0))  # never past the caller's deadline
        if not self._in_flight.acquire(blocking=False):
            raise CapacityError(f"collector {self.collector_id}: {MAX_COLLECTS} Collect calls "
                                "are already in flight; retry when one has finished")
        try:
            return self._collect(collector, request, wait_s, context)
        finally:
            self._in_flight.release()

    def _collect(self, collector: CollectorBackend, request: pb.CollectRequest, wait_s: float,
                 context: grpc.ServicerContext | None) -> pb.CollectReply:
        alive = None if context is None else context.is_active
        version, tensors = self._wait_for(request.min_version, wait_s, alive=alive)
        with self._collect_lock:
            if version > self._loaded:
                collector.set_weights(version, tensors)
                self._loaded = version
            self._prepare(request)
            start = time.perf_counter()
            # Only asked-for keywords: a backend without the obs_skus option serves the rest.
            extra: dict[str, Any] = {"obs_skus": np.asarray(request.obs_sku_ids, np.int64)} if request.obs_sku_ids else {}
            rollout = collector.collect(int(request.seed), int(request.episode), self._loaded, **extra)
            seconds = time.perf_counter() - start
            manifest = self._store_shard(int(request.iteration), rollout)
            self._rollouts[int(request.iteration)] = rollout
            while len(self._rollouts) > self._keep:
                self._rollouts.popitem(last=False)
            transitions = int(rollout.rewards.size)
            self._counts["iterations"] += 1
            self._counts["transitions"] += transitions
            self._counts["seconds"] += seconds
            self._counts["last_rate"] = transitions / max(seconds, 1e-9)
        return pb.CollectReply(collector_id=self.collector_id, iteration=request.iteration,
                               policy_version=self._loaded, transitions=transitions,
                               seconds=seconds, manifest_json=manifest)

    @rpc_method
    def GetBuffer(self, request: pb.GetBufferRequest,
                  context: grpc.ServicerContext) -> Iterator[pb.BufferChunk]:
        self._require_collector()
        rollout = self._rollouts.get(int(request.iteration))
        if rollout is None:
            raise NotFoundError(f"collector {self.collector_id}: no rollout of iteration "
                                f"{request.iteration} (held: {list(self._rollouts)})")
        arrays = rollout.arrays()
        names = list(request.names) or list(arrays)
        unknown = [n for n in names if n not in arrays]
        if unknown:
            raise WireError(f"GetBuffer: unknown array '{unknown[0]}' (have: {', '.join(arrays)})")
        chosen = {n: arrays[n] for n in dict.fromkeys([*names, SKU_IDS])}
        return buffer_chunks(chosen, int(request.iteration), int(rollout.policy_version),
                             int(request.max_chunk_rows), max_message_bytes(self._cfg) // 2)

    @rpc_method
    def GetStats(self, request: pb.StatsRequest, context: grpc.ServicerContext) -> pb.StatsReply:
        c = self._counts
        pending = self._pending.version
        pending = -1 if pending is None else pending
        return pb.StatsReply(
            collector_id=self.collector_id, policy_version=self._loaded,
            iterations=int(c["iterations"]), transitions=int(c["transitions"]),
            steps_per_second=float(c["last_rate"]),
            values={"pending_version": float(pending), "collect_seconds": float(c["seconds"]),
                    "rollouts_held": float(len(self._rollouts))})

    # ---------------------------------------------------------------- helpers
    def _prepare(self, request: pb.CollectRequest) -> None:
        """Before the episode: what else the request names (a role's servicer overrides it)."""

    def _require_collector(self) -> CollectorBackend:
        if self._collector is None:
            raise NotWiredError(f"collector {self.collector_id}: no collector is wired to this "
                                "server (weights and stats only)")
        return self._collector

    def _wait_for(self, version: int, timeout_s: float, *,
                  alive: Callable[[], bool] | None = None) -> tuple[int, dict[str, Any]]:
        """The sync barrier: the newest weights once they are >= `version` (given up when
        `alive()` turns False: the caller left)."""
        held = self._pending.wait_for(version, max(timeout_s, 0.0), alive=alive)
        if held is None:
            raise EnvStateError(f"collector {self.collector_id}: weights version {version} not "
                                f"received within {timeout_s:g} s (holding {self._pending.version})")
        return held

    def _store_shard(self, iteration: int, rollout: Rollout) -> str:
        if self._store is None:
            return ""
        meta = {"policy_version": int(rollout.policy_version), "sku_count": rollout.num_skus,
                "rows": rollout.transitions, "seed": rollout.seed, "episode": rollout.episode}
        manifest = self._store.put_shard(iteration, self.collector_id, rollout.arrays(), meta)
        return manifest.to_json().decode()


def _check_collect(request: pb.CollectRequest) -> None:
    """INVALID_ARGUMENT for what no Collect may ask: a timeout that is not finite (NaN never
    times out) or beyond MAX_WAIT_S, negative seeds, episodes, iterations or SKU ids."""
    t = request.timeout_s
    if not (math.isfinite(t) and 0.0 <= t <= MAX_WAIT_S):
        raise WireError(f"Collect request: timeout_s = {t!r}, expected seconds in [0, {MAX_WAIT_S:g}]")
    for name in ("iteration", "seed", "episode"):
        value = getattr(request, name)
        if value < 0:
            raise WireError(f"Collect request: {name} = {value}, expected an integer >= 0")
    if request.obs_sku_ids and min(request.obs_sku_ids) < 0:
        raise WireError("Collect request: obs_sku_ids holds a negative SKU id, expected ids >= 0")


def buffer_chunks(arrays: dict[str, np.ndarray], iteration: int, version: int, max_rows: int,
                  max_bytes: int) -> Iterator[pb.BufferChunk]:
    """Per-SKU arrays whole (rows = 0), then row slices of the flattened per-step arrays."""
    n = arrays[SKU_IDS].shape[0]
    per_step = {k: v for k, v in arrays.items() if v.ndim >= 2 and v.shape[1] == n and k != SKU_IDS}
    per_sku = {k: v for k, v in arrays.items() if k not in per_step}
    flat = {k: v.reshape(v.shape[0] * n, *v.shape[2:]) for k, v in per_step.items()}
    total = next(iter(flat.values())).shape[0] if flat else 0
    row_bytes = sum(v[:1].nbytes for v in flat.values()) or 1
    rows = max(1, max_bytes // row_bytes)
    if max_rows > 0:
        rows = min(rows, max_rows)
    first = pb.BufferChunk(iteration=iteration, policy_version=version, row_start=0, rows=0,
                           total_rows=total)
    encode_into(first.tensors, per_sku)
    yield first
    for start in range(0, total, rows):
        chunk = pb.BufferChunk(iteration=iteration, policy_version=version, row_start=start,
                               rows=min(rows, total - start), total_rows=total)
        encode_into(chunk.tensors, {k: v[start:start + rows] for k, v in flat.items()})
        yield chunk


class CollectorServer(GrpcServer):
    def __init__(self, servicer: CollectorServicer, cfg: RpcConfig, host: str = "127.0.0.1",
                 port: int = 0) -> None:
        self.servicer = servicer
        super().__init__(lambda s: pb_grpc.add_CollectorServiceServicer_to_server(servicer, s),
                         cfg, host, port, max_workers=8,
                         services=[service_name("CollectorService")])

    def stop(self, grace_s: float = 2.0) -> None:
        self.servicer._pending.close()  # Collects waiting at the barrier end now
        super().stop(grace_s)
