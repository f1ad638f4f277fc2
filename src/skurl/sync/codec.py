"""Weights on the wire: safetensors bytes + version + model key + sha256 (never pickle)."""

from __future__ import annotations

import hashlib
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


def check_sha256(blob: WeightBlob) -> None:
    """WeightIntegrityError unless the payload's sha256 is the one the blob declares."""
    digest = hashlib.sha256(blob.payload).hexdigest()
    if digest != blob.sha256:
        raise WeightIntegrityError(
            f"weights '{blob.model_key}' version {blob.version}: sha256 {digest[:12]}..., expected {blob.sha256[:12]}..."
        )


def decode_weights(blob: WeightBlob) -> dict[str, torch.Tensor]:
    """Tensors of `blob` after checking its sha256."""
    check_sha256(blob)
    try:
        return load(blob.payload)
    except Exception as exc:  # safetensors raises its own error types for bad headers
        raise WeightIntegrityError(f"weights '{blob.model_key}' version {blob.version}: not safetensors ({exc})") from None


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
