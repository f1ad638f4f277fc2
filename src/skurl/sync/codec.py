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


def decode_weights(blob: WeightBlob) -> dict[str, torch.Tensor]:
    """Tensors of `blob` after checking its sha256."""
    digest = hashlib.sha256(blob.payload).hexdigest()
    if digest != blob.sha256:
        raise WeightIntegrityError(
            f"weights '{blob.model_key}' version {blob.version}: sha256 {digest[:12]}..., expected {blob.sha256[:12]}..."
        )
    try:
        return load(blob.payload)
    except Exception as exc:  # safetensors raises its own error types for bad headers
        raise WeightIntegrityError(f"weights '{blob.model_key}' version {blob.version}: not safetensors ({exc})") from None
