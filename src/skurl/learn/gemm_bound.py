"""The GEMM bound of the PPO update: how fast it could be doing nothing but its matmuls.

Per Linear layer (in -> out) of both nets, a minibatch of B rows costs the forward
x [B, in] @ W^T, the weight gradient g^T @ x and (not for the first layer: observations
need no gradient) the input gradient g @ W, each timed alone with torch at the exact
shapes, layouts and dtype, warm, on the caller's thread count. Their sum is one minibatch
with zero time for everything else (activations, softmax, loss, Adam, clipping), so
B / sum bounds transitions x epochs/s from above. `skurl bench learn` and `bench train`
measure it in the same run as the update (docs/performance.md).
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import nn

Operands = tuple[torch.Tensor, torch.Tensor]


def gemm_operands(model: nn.Module, batch: int, dtype: torch.dtype = torch.float32) -> list[tuple[str, Operands]]:
    """(name, (A, B)) of every GEMM A @ B in one forward + backward of a minibatch of
    `model`'s policy and value nets."""
    gemms = []
    for net_name in ("policy", "value"):
        layers = [m for m in getattr(model, net_name).modules() if isinstance(m, nn.Linear)]
        for j, layer in enumerate(layers):
            i, o = layer.in_features, layer.out_features
            x, g, w = (torch.randn(*shape).to(dtype) for shape in ((batch, i), (batch, o), (o, i)))
            tag = f"{net_name}.{j} {i}->{o}"
            gemms.append((f"{tag} forward", (x, w.t())))
            gemms.append((f"{tag} weight grad", (g.t(), x)))
            if j > 0:
                gemms.append((f"{tag} input grad", (g, w)))
    return gemms


def seconds_per_gemm(a: torch.Tensor, b: torch.Tensor, min_seconds: float = 0.3, rounds: int = 3) -> float:
    """Best of `rounds` timed rounds of C = A @ B, each at least `min_seconds` long."""
    c = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype)
    for _ in range(20):
        torch.mm(a, b, out=c)
    best = float("inf")
    for _ in range(rounds):
        reps, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < min_seconds:
            torch.mm(a, b, out=c)
            reps += 1
        best = min(best, elapsed / reps)
    return best


def gemm_bound(model: nn.Module, batch: int, dtype: torch.dtype = torch.float32,
               min_seconds: float = 0.3) -> dict[str, Any]:
    """Each GEMM's time and the bound: gemm_ms_per_minibatch and
    ceiling_transition_epochs_per_s (batch / the summed GEMM time)."""
    rows: list[dict[str, Any]] = []
    for name, (a, b) in gemm_operands(model, batch, dtype):
        s = seconds_per_gemm(a, b, min_seconds)
        (m, k), n = a.shape, b.shape[1]
        rows.append({"gemm": name, "m": m, "k": k, "n": n, "ms": s * 1e3, "gflops": 2 * m * k * n / s / 1e9})
    gemm_s = sum(r["ms"] for r in rows) / 1e3
    flops = sum(2 * r["m"] * r["k"] * r["n"] for r in rows)
    return {
        "minibatch": batch, "dtype": str(dtype).removeprefix("torch."), "threads": torch.get_num_threads(),
        "flops_per_transition_epoch": flops / batch,
        "gemm_ms_per_minibatch": gemm_s * 1e3,
        "gemm_gflops": flops / gemm_s / 1e9,
        "ceiling_transition_epochs_per_s": batch / gemm_s,
        "gemms": rows,
    }


def forward_rows_per_s(net: nn.Module, batch: int, dtype: torch.dtype = torch.float32,
                       min_seconds: float = 0.3) -> float:
    """Rows per second of `net`'s Linear forward products alone (x [batch, in] @ W^T, each
    timed as seconds_per_gemm does): inference with zero time for bias, activations and
    everything around it, the ceiling of any loop that runs `net` on every row it steps."""
    seconds = 0.0
    for layer in (m for m in net.modules() if isinstance(m, nn.Linear)):
        x = torch.randn(batch, layer.in_features).to(dtype)
        w = torch.randn(layer.out_features, layer.in_features).to(dtype)
        seconds += seconds_per_gemm(x, w.t(), min_seconds)
    return batch / seconds if seconds > 0 else float("inf")


def peak_sgemm_gflops(size: int = 2048, min_seconds: float = 1.0) -> float:
    """The machine's best fp32 GEMM rate on a large square product, for scale."""
    s = seconds_per_gemm(torch.randn(size, size), torch.randn(size, size), min_seconds)
    return 2 * size**3 / s / 1e9
