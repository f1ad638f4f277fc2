"""The rollout-store contract: collectors write shards, the learner lists and reads them.

A shard is one (iteration, collector) batch of named arrays (struct of arrays, e.g. a
Rollout's [T, N] fields), serialized with safetensors (never pickle) and compressed with
zstd. Beside it lies a JSON manifest (policy version, SKU range, rows, array specs,
sha256 of the compressed payload). The payload is written first and the manifest
second, so a listed manifest always has its data; a damaged payload is caught by the
checksum and raises CorruptShardError, which the learner skips and reports.

Every backend (local directory, S3) runs the same contract suite
(tests/contracts/test_store_contract.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from skurl.errors import UserError

FORMAT = "safetensors+zstd/1"
_COLLECTOR_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


class StoreError(UserError):
    """The store cannot be used as configured: bad URL, unreachable endpoint, missing bucket."""


class CorruptShardError(Exception):
    """A shard's payload or manifest is damaged (checksum, truncation, undecodable, mismatch)."""

    def __init__(self, shard: str, reason: str) -> None:
        super().__init__(f"corrupt rollout shard '{shard}': {reason}")
        self.shard = shard
        self.reason = reason


@dataclass(frozen=True)
class ArraySpec:
    name: str
    dtype: str  # numpy dtype name, e.g. "float32"
    shape: tuple[int, ...]


@dataclass(frozen=True)
class ShardManifest:
    """What a shard holds; written as JSON next to the payload."""

    iteration: int
    collector_id: str
    policy_version: int
    sku_start: int  # first SKU index of the collector's range
    sku_count: int  # SKUs in the range (0 = not given)
    rows: int  # transitions in the shard (e.g. T x N; 0 = not given)
    arrays: tuple[ArraySpec, ...]
    sha256: str  # of the compressed payload
    payload_bytes: int  # compressed size
    raw_bytes: int  # safetensors size before compression
    created: float  # unix time
    meta: dict[str, Any] = field(default_factory=dict)  # other JSON-able collector meta
    format: str = FORMAT

    @property
    def name(self) -> str:
        """Stable shard name used in errors and logs: it00000007/collector-3."""
        return shard_name(self.iteration, self.collector_id)

    def to_json(self) -> bytes:
        data = asdict(self)
        data["arrays"] = [
            {"name": a.name, "dtype": a.dtype, "shape": list(a.shape)} for a in self.arrays
        ]
        return json.dumps(data, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes, shard: str) -> ShardManifest:
        """Parse a manifest; anything malformed is a CorruptShardError naming `shard`."""
        try:
            data = json.loads(raw)
            arrays = tuple(
                ArraySpec(str(a["name"]), str(a["dtype"]), tuple(int(d) for d in a["shape"]))
                for a in data.pop("arrays")
            )
            manifest = cls(arrays=arrays, **data)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise CorruptShardError(shard, f"manifest is not valid ({exc})") from None
        if manifest.format != FORMAT:
            raise CorruptShardError(shard, f"unknown format {manifest.format!r}, expected {FORMAT}")
        return manifest


@runtime_checkable
class RolloutStore(Protocol):
    """Where collectors put rollout shards and the learner reads them."""

    url: str

    def put_shard(
        self,
        iteration: int,
        collector_id: str | int,
        arrays: Mapping[str, np.ndarray],
        meta: Mapping[str, Any],
    ) -> ShardManifest:
        """Write one shard. `meta` must hold `policy_version`; it may hold `sku_start`,
        `sku_count`, `rows` and any other JSON-able keys (kept in manifest.meta).
        Writing the same (iteration, collector_id) again replaces the shard."""
        ...

    def list_shards(self, iteration: int) -> list[ShardManifest]:
        """Manifests of `iteration` whose payload exists, sorted by collector id.
        Unreadable manifests are logged and left out."""
        ...

    def get_shard(self, manifest: ShardManifest) -> dict[str, np.ndarray]:
        """The arrays, verified against the manifest; CorruptShardError when damaged."""
        ...

    def iterations(self) -> list[int]:
        """Iterations that hold anything, ascending."""
        ...

    def delete_before(self, iteration: int) -> int:
        """Delete every shard of iterations < `iteration`; returns the number of shards."""
        ...

    def put_blob(self, name: str, data: bytes) -> None:
        """Store opaque bytes (e.g. published weights) under `name` (letters, digits, / _ - .)."""
        ...

    def get_blob(self, name: str) -> bytes:
        """Bytes stored under `name`; KeyError when absent."""
        ...

    def delete_blob(self, name: str) -> None:
        """Remove the blob `name` (absent is fine)."""
        ...


def shard_name(iteration: int, collector_id: str) -> str:
    return f"{iteration_dir(iteration)}/{collector_id}"


def iteration_dir(iteration: int) -> str:
    # Zero-padded so that lexical order (S3 listings) equals numeric order.
    return f"it{iteration:08d}"


_ITERATION_DIR = re.compile(r"it(\d+)")


def parse_iteration_dir(name: str) -> int | None:
    m = _ITERATION_DIR.fullmatch(name)
    return int(m.group(1)) if m else None


def check_collector_id(collector_id: str | int) -> str:
    cid = str(collector_id)
    if not _COLLECTOR_ID.fullmatch(cid):
        raise StoreError(
            f"collector id {cid!r}: expected 1-128 letters, digits, '_', '-', '.' "
            "(starting with a letter or digit)"
        )
    return cid


def check_iteration(iteration: int) -> int:
    if isinstance(iteration, bool) or not isinstance(iteration, (int, np.integer)) or iteration < 0:
        raise StoreError(f"iteration {iteration!r}: expected an integer >= 0")
    return int(iteration)


_BLOB_NAME = re.compile(r"[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*")


def check_blob_name(name: str) -> str:
    if not _BLOB_NAME.fullmatch(name) or any(p in (".", "..") for p in name.split("/")):
        raise StoreError(f"blob name {name!r}: expected path parts of letters, digits, '_', '-', '.'")
    return name
