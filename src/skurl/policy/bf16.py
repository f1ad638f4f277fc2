"""Whether this CPU runs bfloat16 natively (and so whether oneDNN's bf16 kernels exist)."""

from __future__ import annotations

import functools
import logging

import torch


@functools.cache
def cpu_has_bf16() -> bool:
    """True when oneDNN reports native bf16 kernels on this CPU (AVX512-BF16 or AMX).
    Without them bf16 still computes (torch's own kernels, converting to fp32 and back),
    but oneDNN refuses its fused bf16 primitives ("could not create a primitive
    descriptor"), and bf16 is slower than fp32."""
    try:
        return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def warn_if_emulated(log: logging.Logger, setting: str, expected: str) -> None:
    """One warning on `log` when bf16 (`setting`) is asked for on a CPU without native bf16."""
    if not cpu_has_bf16():
        log.warning("%s: this CPU has no native bf16 (AVX512-BF16 or AMX), so it runs slower than "
                    "float32; expected %s here", setting, expected)
