"""Shard bytes: named arrays -> safetensors -> zstd, and back with every check on the way.

Shared by all store backends so that the bytes on disk and in S3 are identical and
every backend detects the same damage (checksum, truncation, undecodable, mismatch).

The safetensors layout is written and read here directly (format: an 8-byte little-endian
header length, a JSON header {name: {dtype, shape, data_offsets}}, then the raw
little-endian tensor bytes; https://github.com/huggingface/safetensors#format) so that
arrays stream into the compressor and decompress straight into one buffer that the
returned arrays view: no extra copy of a shard that can be hundreds of MB either way.
The bytes are plain safetensors; tests check both directions against the library.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import zstandard

from skurl.store.api import ArraySpec, CorruptShardError, ShardManifest, StoreError

# numpy dtype name <-> safetensors dtype code; anything else (object, strings, complex)
# is refused up front.
_CODES = {
    "bool": "BOOL", "uint8": "U8", "int8": "I8", "int16": "I16", "uint16": "U16",
    "int32": "I32", "uint32": "U32", "int64": "I64", "uint64": "U64",
    "float16": "F16", "float32": "F32", "float64": "F64",
}
_DTYPES = {code: np.dtype(name).newbyteorder("<") for name, code in _CODES.items()}
_RESERVED_META = ("policy_version", "sku_start", "sku_count", "rows")
# Multi-threaded zstd pays off only on big payloads (thread start-up costs ~ms).
_THREADS_FROM_BYTES = 8 << 20


def encode_arrays(
    arrays: Mapping[str, np.ndarray], level: int
) -> tuple[bytes, tuple[ArraySpec, ...], int]:
    """(compressed payload, array specs, uncompressed size)."""
    prepared = _prepare(arrays)
    # Widest items first keeps every tensor aligned to its item size without padding.
    order = sorted(prepared, key=lambda n: (-prepared[n].dtype.itemsize, n))
    header: dict[str, Any] = {}
    offset = 0
    for name in order:
        arr = prepared[name]
        header[name] = {"dtype": _CODES[arr.dtype.name], "shape": list(arr.shape),
                        "data_offsets": [offset, offset + arr.nbytes]}
        offset += arr.nbytes
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-(8 + len(head)) % 8)  # data starts 8-byte aligned
    raw_bytes = 8 + len(head) + offset
    threads = -1 if raw_bytes >= _THREADS_FROM_BYTES else 0
    compressor = zstandard.ZstdCompressor(level=level, threads=threads).compressobj(size=raw_bytes)
    chunks = [compressor.compress(len(head).to_bytes(8, "little") + head)]
    chunks += [compressor.compress(_byte_view(prepared[name])) for name in order]
    chunks.append(compressor.flush())
    specs = tuple(ArraySpec(n, a.dtype.name, tuple(int(d) for d in a.shape))
                  for n, a in prepared.items())
    return b"".join(chunks), specs, raw_bytes


def _prepare(arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    if not isinstance(arrays, Mapping) or not arrays:
        raise StoreError("shard arrays: expected a non-empty mapping of name -> numpy array")
    prepared: dict[str, np.ndarray] = {}
    for name, arr in arrays.items():
        if not isinstance(arr, np.ndarray):
            raise StoreError(f"shard array '{name}': expected a numpy array, got {type(arr).__name__}")
        if arr.dtype.name not in _CODES:
            raise StoreError(
                f"shard array '{name}': dtype {arr.dtype} is not storable "
                f"(expected one of {', '.join(sorted(_CODES))})"
            )
        if str(name) == "__metadata__":
            raise StoreError("shard array '__metadata__': the name is reserved by safetensors")
        # safetensors is little-endian and contiguous by definition (astype, unlike
        # ascontiguousarray, keeps 0-d arrays 0-d).
        prepared[str(name)] = arr.astype(arr.dtype.newbyteorder("<"), order="C", copy=False)
    return prepared


def _byte_view(arr: np.ndarray) -> memoryview:
    return memoryview(arr.reshape(-1).view(np.uint8))  # type: ignore[arg-type]  # numpy's stubs give ndarray __buffer__ on Python 3.12+ only


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
    """Verify `payload` against `manifest` and return its arrays, or raise CorruptShardError.

    The arrays are writable views into one buffer holding the decompressed shard."""
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
        raw = _decompress(payload, manifest.raw_bytes)
        arrays = _parse_safetensors(raw)
    except (zstandard.ZstdError, ValueError, KeyError, TypeError) as exc:
        raise CorruptShardError(name, f"payload cannot be decoded ({exc})") from None
    _check_specs(name, arrays, manifest.arrays)
    return arrays


def _decompress(payload: bytes, size: int) -> np.ndarray:
    buf = np.empty(size, np.uint8)
    view = memoryview(buf)  # type: ignore[arg-type]  # numpy's stubs give ndarray __buffer__ on Python 3.12+ only
    filled = 0
    with zstandard.ZstdDecompressor().stream_reader(payload) as reader:
        while filled < size:
            got = reader.readinto(view[filled:])
            if got == 0:
                break
            filled += got
        if filled != size or reader.read(1):
            raise ValueError(f"decompressed size differs from the manifest's {size} bytes")
    return buf


def _parse_safetensors(raw: np.ndarray) -> dict[str, np.ndarray]:
    """Arrays viewing `raw` (uint8), after checking the header against the buffer."""
    if raw.size < 8:
        raise ValueError("shorter than a safetensors header")
    head_len = int.from_bytes(raw[:8].tobytes(), "little")
    if head_len > raw.size - 8:
        raise ValueError("safetensors header length exceeds the data")
    header = json.loads(raw[8 : 8 + head_len].tobytes())
    if not isinstance(header, dict):
        raise ValueError("safetensors header is not a JSON object")
    data = raw[8 + head_len :]
    arrays = {}
    for key, entry in header.items():
        if key == "__metadata__":
            continue
        dtype = _DTYPES[entry["dtype"]]
        shape = tuple(int(d) for d in entry["shape"])
        start, end = (int(x) for x in entry["data_offsets"])
        if min(shape, default=0) < 0 or not 0 <= start <= end <= data.size:
            raise ValueError(f"tensor '{key}' lies outside the data")
        if end - start != int(np.prod(shape, dtype=np.int64)) * dtype.itemsize:
            raise ValueError(f"tensor '{key}': {end - start} bytes do not fit shape {list(shape)}")
        arrays[key] = data[start:end].view(dtype).reshape(shape)
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
