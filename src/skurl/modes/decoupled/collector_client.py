"""Client of a CollectorService: what a decoupled learner calls on each collector."""

from __future__ import annotations

from typing import Any

import grpc
import numpy as np

from skurl.config import RpcConfig
from skurl.modes.decoupled.collector_server import SKU_IDS
from skurl.rpc.codec import decode_batch
from skurl.rpc.env_client import DEFAULT_CONNECT_TIMEOUT_S, connect
from skurl.rpc.errors import COLLECTOR, VersionNotNewerError, WireError, from_rpc_error
from skurl.rpc.gen import skurl_pb2 as pb
from skurl.rpc.gen import skurl_pb2_grpc as pb_grpc
from skurl.rpc.weights_server import to_message
from skurl.weights.codec import encode_weights


class CollectorClient:
    def __init__(self, address: str, cfg: RpcConfig | None = None,
                 connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S) -> None:
        self.address = address
        self._cfg = cfg or RpcConfig()
        self._channel = connect(address, self._cfg, connect_timeout_s, COLLECTOR)
        self._stub = pb_grpc.CollectorServiceStub(self._channel)

    def update_weights(self, version: int, tensors: dict[str, Any],
                       model_key: str = "policy") -> int:
        message = to_message(encode_weights(tensors, version, model_key))
        reply = self._call("UpdateWeights", message, rejected={
            grpc.StatusCode.FAILED_PRECONDITION: VersionNotNewerError})
        return int(reply.version)

    def collect(self, iteration: int, seed: int, episode: int, min_version: int = 0,
                wait_s: float = 60.0, deadline_s: float | None = None,
                obs_sku_ids: np.ndarray | None = None,
                grid_center: tuple[str, str] = ("", "")) -> dict[str, Any]:
        """One episode on the collector once it holds `min_version` (waiting up to wait_s);
        `deadline_s` bounds the whole call (default: wait_s + rpc.timeout_s). With
        `obs_sku_ids` its shard keeps the observations of those SKUs only. `grid_center`:
        (store blob, sha256) of the cover grid's tuned centre (modes/decoupled/remote_grid.py)."""
        request = pb.CollectRequest(iteration=iteration, seed=seed, episode=episode,
                                    min_version=min_version, timeout_s=wait_s,
                                    obs_sku_ids=[] if obs_sku_ids is None else obs_sku_ids.tolist(),
                                    grid_center_blob=grid_center[0], grid_center_sha256=grid_center[1])
        reply = self._call("Collect", request, timeout=deadline_s or wait_s + self._cfg.timeout_s)
        return {"collector_id": reply.collector_id, "iteration": int(reply.iteration),
                "policy_version": int(reply.policy_version),
                "transitions": int(reply.transitions), "seconds": reply.seconds,
                "manifest_json": reply.manifest_json}

    def label(self, job: bytes, timeout_s: float, grid_center: tuple[str, str] = ("", "")) -> pb.LabelReply:
        """A DCL label or check job (learn/label_wire.py) on the collector's SKUs, within timeout_s."""
        request = pb.LabelRequest(job=job, grid_center_blob=grid_center[0], grid_center_sha256=grid_center[1])
        reply: pb.LabelReply = self._call("Label", request, timeout=timeout_s)
        return reply

    def get_buffer(self, iteration: int, names: list[str] | None = None,
                   max_chunk_rows: int = 0) -> tuple[int, dict[str, np.ndarray]]:
        """(policy_version, arrays) of the rollout of `iteration`, per-step arrays [T, N, ...]."""
        request = pb.GetBufferRequest(iteration=iteration, names=names or [],
                                      max_chunk_rows=max_chunk_rows)
        what = f"GetBuffer {iteration}"
        try:
            chunks = list(self._stub.GetBuffer(request, timeout=self._cfg.timeout_s))
        except grpc.RpcError as exc:
            raise from_rpc_error(exc, self.address, what, server=COLLECTOR) from None
        return _assemble(chunks, what)

    def stats(self, timeout: float | None = None) -> dict[str, Any]:
        reply = self._call("GetStats", pb.StatsRequest(), timeout)
        return {"collector_id": reply.collector_id, "policy_version": int(reply.policy_version),
                "iterations": int(reply.iterations), "transitions": int(reply.transitions),
                "steps_per_second": reply.steps_per_second, **dict(reply.values)}

    def close(self) -> None:
        self._channel.close()

    def _call(self, method: str, request: Any, timeout: float | None = None,
              rejected: dict[grpc.StatusCode, Any] | None = None) -> Any:
        try:
            return getattr(self._stub, method)(request, timeout=timeout or self._cfg.timeout_s)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc, self.address, method, rejected, server=COLLECTOR) from None


def _assemble(chunks: list[pb.BufferChunk], what: str) -> tuple[int, dict[str, np.ndarray]]:
    if not chunks or chunks[0].rows != 0:
        raise WireError(f"{what}: the stream does not start with the per-SKU arrays")
    out = {k: v.copy() for k, v in decode_batch(chunks[0].tensors, what=what).items()}
    n, total = out[SKU_IDS].shape[0], int(chunks[0].total_rows)
    parts: dict[str, list[np.ndarray]] = {}
    expected = 0
    for chunk in chunks[1:]:
        if chunk.row_start != expected or chunk.rows <= 0:
            raise WireError(f"{what}: chunk at row {chunk.row_start}, expected row {expected}")
        for name, arr in decode_batch(chunk.tensors, what=what).items():
            parts.setdefault(name, []).append(arr)
        expected += chunk.rows
    if expected != total or (n and total % n):
        raise WireError(f"{what}: {expected} rows received, expected {total} ({n} SKUs per day)")
    days = total // n if n else 0
    for name, pieces in parts.items():
        flat = np.concatenate(pieces)
        out[name] = flat.reshape(days, n, *flat.shape[1:])
    return int(chunks[0].policy_version), out
