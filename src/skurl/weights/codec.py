"""Weights on the wire: safetensors bytes + version + model key + sha256 (never pickle).

`decode_weights` refuses (WeightIntegrityError) bytes that do not match their sha256,
that are not safetensors, whose header names another key or version than the blob, and
tensors that are not finite; `check_weights` adds the receiver's expectations (its model
key and state_dict's names, shapes and dtypes). Every receiving path uses both.
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass

import torch
from safetensors.torch import load, save

from skurl.errors import UserError


class WeightIntegrityError(UserError):
    """A weight blob's bytes do not match its sha256, or its header is not ours."""


@dataclass(frozen=True)
class WeightBlob:
    model_key: str
    version: int
    payload: bytes  # safetensors bytes
    sha256: str

    @property
    def nbytes(self) -> int:
        return len(self.payload)


def encode_weights(tensors: dict[str, torch.Tensor], version: int, model_key: str = "policy") -> WeightBlob:
    """Serialize CPU copies of `tensors`; version and key also go into the safetensors header."""
    cpu = {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}
    payload = save(cpu, metadata={"model_key": model_key, "version": str(int(version))})
    return WeightBlob(model_key, int(version), payload, hashlib.sha256(payload).hexdigest())


def check_finite(tensors: dict[str, torch.Tensor], version: int, model_key: str) -> None:
    """A publisher's check, on every backend: NaN or infinite weights are refused here
    (WeightIntegrityError, counted as path=publish) before any collector could load them."""
    for name, t in tensors.items():
        if (t.is_floating_point() or t.is_complex()) and not bool(torch.isfinite(t).all()):
            note_rejected("publish")
            raise WeightIntegrityError(f"weights '{model_key}' version {int(version)}: tensor "
                                       f"'{name[:60]}' holds NaN or infinite values; not published")


def encode_checked(tensors: dict[str, torch.Tensor], version: int, model_key: str = "policy") -> WeightBlob:
    """encode_weights for a publisher, after check_finite."""
    check_finite(tensors, version, model_key)
    return encode_weights(tensors, version, model_key)


def check_sha256(blob: WeightBlob) -> None:
    """WeightIntegrityError unless the payload's sha256 is the one the blob declares."""
    digest = hashlib.sha256(blob.payload).hexdigest()
    if digest != blob.sha256:
        raise WeightIntegrityError(
            f"weights '{blob.model_key}' version {blob.version}: sha256 {digest[:12]}..., expected {blob.sha256[:12]}..."
        )


# safetensors' own cap on its JSON header (100 MB); a larger length is not safetensors.
_MAX_HEADER = 100_000_000


def header_metadata(payload: bytes) -> dict[str, str]:
    """The `__metadata__` of a safetensors payload ({} without one): 8 bytes of
    little-endian header length, then that much JSON."""
    if len(payload) < 8:
        raise ValueError("shorter than a safetensors header")
    (size,) = struct.unpack("<Q", payload[:8])
    if size > min(_MAX_HEADER, len(payload) - 8):
        raise ValueError(f"header length {size} is beyond the payload")
    meta = json.loads(payload[8:8 + size]).get("__metadata__") or {}
    if not isinstance(meta, dict):
        raise ValueError("__metadata__ is not an object")
    return meta


def decode_weights(blob: WeightBlob) -> dict[str, torch.Tensor]:
    """Tensors of `blob` after checking its sha256, its header (a key or version there
    must be the blob's) and that every floating tensor is finite."""
    check_sha256(blob)
    what = f"weights '{blob.model_key}' version {blob.version}"
    try:
        meta = header_metadata(blob.payload)
        tensors = load(blob.payload)
    except Exception as exc:  # safetensors raises its own error types for bad headers
        raise WeightIntegrityError(f"{what}: not safetensors ({exc})") from None
    if meta.get("model_key", blob.model_key) != blob.model_key:
        raise WeightIntegrityError(f"{what}: the payload is for key {meta['model_key'][:40]!r}")
    if meta.get("version", str(blob.version)) != str(blob.version):
        raise WeightIntegrityError(f"{what}: the payload is version {meta['version'][:40]!r}")
    for name, t in tensors.items():
        if (t.is_floating_point() or t.is_complex()) and not bool(torch.isfinite(t).all()):
            raise WeightIntegrityError(f"{what}: tensor '{name[:60]}' holds NaN or infinite values")
    return tensors


def check_weights(blob: WeightBlob, tensors: dict[str, torch.Tensor], model_key: str | None,
                  like: Spec | None) -> None:
    """WeightIntegrityError unless decoded `tensors` are for `model_key` and have the
    names, dtypes and shapes of `like` (None: not checked)."""
    if model_key is not None and blob.model_key != model_key:
        raise WeightIntegrityError(f"weights for key '{blob.model_key[:40]}', expected '{model_key}'")
    wrong = None if like is None else spec_mismatch(spec_of(tensors), like)
    if wrong is not None:
        raise WeightIntegrityError(f"weights '{blob.model_key}' version {blob.version}: tensors {wrong}")


# name -> (dtype, shape): what a subscriber's model expects of every weight set it installs.
Spec = dict[str, tuple[str, tuple[int, ...]]]


def spec_of(tensors: dict[str, torch.Tensor]) -> Spec:
    return {name: (str(t.dtype).removeprefix("torch."), tuple(t.shape)) for name, t in tensors.items()}


def spec_mismatch(got: Spec, want: Spec) -> str | None:
    """None when `got` is `want`, else what differs first (for a one-line rejection)."""
    if got == want:
        return None
    missing, extra = sorted(want.keys() - got.keys()), sorted(got.keys() - want.keys())
    if missing or extra:
        return f"do not match the model: missing {missing}, unexpected {extra}"
    name = next(n for n in sorted(got) if got[n] != want[n])
    (dtype, shape), (want_dtype, want_shape) = got[name], want[name]
    return f"do not match the model: '{name}' is {dtype}{list(shape)}, expected {want_dtype}{list(want_shape)}"


def note_rejected(path: str) -> None:
    """Count one refused weight set in weights_rejected_total{path} (publish | subscribe | push)."""
    from skurl.telemetry.metrics import get_metrics

    get_metrics().weights_rejected_total.labels(path=path).inc()
