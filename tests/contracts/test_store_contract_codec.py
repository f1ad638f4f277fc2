"""Shard bytes are plain safetensors inside zstd: checked both ways against the safetensors
library, plus damage that only a decoder can see (the checksum matches, the content lies)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace

import numpy as np
import pytest
import safetensors.numpy
import zstandard

from skurl.store import CorruptShardError, ShardManifest
from skurl.store.shard_codec import build_manifest, decode_arrays, encode_arrays


def sample() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {
        "flags": rng.random(7) < 0.5,  # 1-byte items first in insertion order on purpose
        "obs": rng.standard_normal((3, 7, 2)).astype(np.float32),
        "actions": rng.integers(-5, 20, (3, 7)).astype(np.int64),
        "half": rng.standard_normal(5).astype(np.float16),
        "u16": np.arange(9, dtype=np.uint16),
        "scalar": np.array(2.5),
        "empty": np.zeros((0, 3), np.int32),
    }


def manifest_for(payload: bytes, raw_bytes: int, arrays: dict[str, np.ndarray]) -> ShardManifest:
    _, specs, _ = encode_arrays(arrays, 1)
    return build_manifest(0, "c", specs, payload, raw_bytes, {"policy_version": 0})


def test_our_bytes_are_read_by_the_safetensors_library() -> None:
    arrays = sample()
    payload, _, raw_bytes = encode_arrays(arrays, 3)
    raw = zstandard.ZstdDecompressor().decompress(payload)
    assert len(raw) == raw_bytes
    loaded = safetensors.numpy.load(raw)
    assert set(loaded) == set(arrays)
    for k, v in arrays.items():
        assert loaded[k].dtype == v.dtype and loaded[k].shape == v.shape, k
        assert loaded[k].tobytes() == v.tobytes(), k


def test_the_safetensors_library_bytes_are_read_by_us() -> None:
    arrays = sample()
    raw = safetensors.numpy.save(arrays, metadata={"who": "library"})
    payload = zstandard.ZstdCompressor().compress(raw)
    got = decode_arrays(payload, manifest_for(payload, len(raw), arrays))
    for k, v in arrays.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape and got[k].tobytes() == v.tobytes()


def test_decoded_arrays_are_writable() -> None:
    arrays = sample()
    payload, specs, raw_bytes = encode_arrays(arrays, 1)
    got = decode_arrays(payload, build_manifest(0, "c", specs, payload, raw_bytes, {"policy_version": 0}))
    got["obs"] *= 2  # learners normalize in place
    np.testing.assert_array_equal(got["obs"], arrays["obs"] * 2)


def forged(header: dict, data: bytes, arrays: dict[str, np.ndarray]) -> tuple[bytes, ShardManifest]:
    """A well-compressed payload with a consistent checksum whose safetensors content lies."""
    head = json.dumps(header).encode()
    raw = len(head).to_bytes(8, "little") + head + data
    payload = zstandard.ZstdCompressor().compress(raw)
    return payload, manifest_for(payload, len(raw), arrays)


@pytest.mark.parametrize(
    ("header", "data"),
    [
        ({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 64]}}, b"\0" * 16),
        ({"x": {"dtype": "F32", "shape": [5], "data_offsets": [0, 16]}}, b"\0" * 16),
        ({"x": {"dtype": "Q99", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 16),
        ({"x": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}}, b"\0" * 16),
        (["not", "an", "object"], b""),
    ],
)
def test_lying_safetensors_content_is_corrupt(header: object, data: bytes) -> None:
    payload, manifest = forged(header, data, {"x": np.zeros(4, np.float32)})  # type: ignore[arg-type]
    with pytest.raises(CorruptShardError, match="cannot be decoded"):
        decode_arrays(payload, manifest)


def test_header_length_beyond_the_data_is_corrupt() -> None:
    raw = (10**9).to_bytes(8, "little") + b"{}"
    payload = zstandard.ZstdCompressor().compress(raw)
    with pytest.raises(CorruptShardError, match="header length"):
        decode_arrays(payload, manifest_for(payload, len(raw), {"x": np.zeros(1)}))


def test_manifest_raw_size_must_match_the_decompressed_size() -> None:
    arrays = sample()
    payload, specs, raw_bytes = encode_arrays(arrays, 1)
    good = build_manifest(0, "c", specs, payload, raw_bytes, {"policy_version": 0})
    for wrong in (raw_bytes - 1, raw_bytes + 1):
        with pytest.raises(CorruptShardError, match="decompressed size"):
            decode_arrays(payload, replace(good, raw_bytes=wrong))
    assert hashlib.sha256(payload).hexdigest() == good.sha256
