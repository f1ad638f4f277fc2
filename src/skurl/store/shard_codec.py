"""Shard bytes: named arrays -> safetensors -> zstd, and back with every check on the way.

Shared by all store backends so that the bytes on disk and in S3 are identical and
every backend detects the same damage (checksum, truncation, undecodable, mismatch).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import safetensors.numpy
import zstandard

from skurl.store.api import ArraySpec, CorruptShardError, ShardManifest, StoreError

# dtypes safetensors can hold; anything else (object, strings, complex) is refused up front.
_SUPPORTED = {
    "bool", "uint8", "int8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
    "float16", "float32", "float64",
}
_RESERVED_META = ("policy_version", "sku_start", "sku_count", "rows")
# Multi-threaded zstd pays off only on big payloads (thread start-up costs ~ms).
_THREADS_FROM_BYTES = 8 << 20


def encode_arrays(
    arrays: Mapping[str, np.ndarray], level: int
) -> tuple[bytes, tuple[ArraySpec, ...], int]:
    """(compressed payload, array specs, uncompressed size)."""
    if not isinstance(arrays, Mapping) or not arrays:
        raise StoreError("shard arrays: expected a non-empty mapping of name -> numpy array")
    prepared: dict[str, np.ndarray] = {}
    specs = []
    for name, arr in arrays.items():
        if not isinstance(arr, np.ndarray):
            raise StoreError(f"shard array '{name}': expected a numpy array, got {type(arr).__name__}")
        if arr.dtype.name not in _SUPPORTED:
            raise StoreError(
                f"shard array '{name}': dtype {arr.dtype} is not storable "
                f"(expected one of {', '.join(sorted(_SUPPORTED))})"
            )
        # safetensors is little-endian and contiguous by definition.
        arr = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<"))
        prepared[str(name)] = arr
        specs.append(ArraySpec(str(name), arr.dtype.name, tuple(int(d) for d in arr.shape)))
    raw = safetensors.numpy.save(prepared)
    threads = -1 if len(raw) >= _THREADS_FROM_BYTES else 0
    payload = zstandard.ZstdCompressor(level=level, threads=threads).compress(raw)
    return payload, tuple(specs), len(raw)


def build_manifest(
    iteration: int,
    collector_id: str,
    specs: tuple[ArraySpec, ...],
    payload: bytes,
    raw_bytes: int,
    meta: Mapping[str, Any],
) -> ShardManifest:
    if not isinstance(meta, Mapping) or "policy_version" not in meta:
        raise StoreError("shard meta: expected a mapping with 'policy_version'")
    counts = {k: _meta_int(meta, k) for k in _RESERVED_META}
    extra = {str(k): v for k, v in meta.items() if k not in _RESERVED_META}
    try:
        json.dumps(extra)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"shard meta: values must be JSON-serializable ({exc})") from None
    return ShardManifest(
        iteration=iteration,
        collector_id=collector_id,
        policy_version=counts["policy_version"],
        sku_start=counts["sku_start"],
        sku_count=counts["sku_count"],
        rows=counts["rows"],
        arrays=specs,
        sha256=hashlib.sha256(payload).hexdigest(),
        payload_bytes=len(payload),
        raw_bytes=raw_bytes,
        created=time.time(),
        meta=extra,
    )


def _meta_int(meta: Mapping[str, Any], key: str) -> int:
    value = meta.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise StoreError(f"shard meta '{key}': got {value!r}, expected an integer >= 0")
    return int(value)


def decode_arrays(payload: bytes | None, manifest: ShardManifest) -> dict[str, np.ndarray]:
    """Verify `payload` against `manifest` and return its arrays, or raise CorruptShardError."""
    name = manifest.name
    if payload is None:
        raise CorruptShardError(name, "payload is missing")
    if len(payload) != manifest.payload_bytes:
        raise CorruptShardError(
            name, f"payload is {len(payload)} bytes, manifest says {manifest.payload_bytes} (truncated?)"
        )
    if hashlib.sha256(payload).hexdigest() != manifest.sha256:
        raise CorruptShardError(name, "sha256 of the payload does not match the manifest")
    try:
        raw = zstandard.ZstdDecompressor().decompress(payload)
        arrays = safetensors.numpy.load(raw)
    except Exception as exc:  # zstd and safetensors raise assorted types on bad bytes
        raise CorruptShardError(name, f"payload cannot be decoded ({type(exc).__name__}: {exc})") from None
    _check_specs(name, arrays, manifest.arrays)
    return arrays


def _check_specs(name: str, arrays: dict[str, np.ndarray], specs: tuple[ArraySpec, ...]) -> None:
    if set(arrays) != {s.name for s in specs}:
        raise CorruptShardError(
            name, f"arrays {sorted(arrays)} differ from the manifest's {sorted(s.name for s in specs)}"
        )
    for spec in specs:
        arr = arrays[spec.name]
        if arr.dtype.name != spec.dtype or tuple(arr.shape) != spec.shape:
            raise CorruptShardError(
                name,
                f"array '{spec.name}' is {arr.dtype}{list(arr.shape)}, "
                f"manifest says {spec.dtype}{list(spec.shape)}",
            )
