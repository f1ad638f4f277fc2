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
from collections.abc import Callable
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


def best_seconds(once: Callable[[], object], min_seconds: float = 0.3, rounds: int = 3) -> float:
    """Seconds per call of `once`: the best of `rounds` timed rounds, each at least
    `min_seconds` long."""
    best = float("inf")
    for _ in range(rounds):
        reps, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < min_seconds:
            once()
            reps += 1
        best = min(best, elapsed / reps)
    return best


def seconds_per_gemm(a: torch.Tensor, b: torch.Tensor, min_seconds: float = 0.3, rounds: int = 3) -> float:
    """Best of `rounds` timed rounds of C = A @ B, each at least `min_seconds` long."""
    c = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype)
    for _ in range(20):
        torch.mm(a, b, out=c)
    return best_seconds(lambda: torch.mm(a, b, out=c), min_seconds, rounds)


def gemm_bound(model: nn.Module, batch: int, dtype: torch.dtype = torch.float32,
               min_seconds: float = 0.3, side_by_side: bool = False) -> dict[str, Any]:
    """Each GEMM's time and the bound: gemm_ms_per_minibatch and
    ceiling_transition_epochs_per_s (batch / the summed GEMM time). `side_by_side` (the
    update trains the nets side by side, Learner.nets_side_by_side): also time that
    schedule, one intra-op thread with the value net's GEMMs of a phase on the pool thread
    while the policy net's run here (twin_mlp.run_both), and bound by the faster of the two.
    Either schedule alone was beaten by the update in some process states (docs/performance.md)."""
    operands = gemm_operands(model, batch, dtype)
    threads = torch.get_num_threads()
    schedules = {"one by one": _one_by_one_rows(operands, min_seconds)}
    if side_by_side:
        schedules["side by side"] = _side_by_side_rows(operands, min_seconds)
    ms = {name: sum(r["ms"] for r in rows) for name, rows in schedules.items()}
    schedule = min(ms, key=lambda name: ms[name])
    rows = schedules[schedule]
    gemm_s = ms[schedule] / 1e3
    flops = sum(2 * r["m"] * r["k"] * r["n"] for r in rows)
    return {
        "minibatch": batch, "dtype": str(dtype).removeprefix("torch."), "threads": threads,
        "schedule": schedule, "schedule_ms": ms,
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


def _one_by_one_rows(operands: list[tuple[str, Operands]], min_seconds: float) -> list[dict[str, Any]]:
    rows = []
    for name, (a, b) in operands:
        s = seconds_per_gemm(a, b, min_seconds)
        (m, k), n = a.shape, b.shape[1]
        rows.append({"gemm": name, "m": m, "k": k, "n": n, "ms": s * 1e3, "gflops": 2 * m * k * n / s / 1e9})
    return rows


def _side_by_side_rows(operands: list[tuple[str, Operands]], min_seconds: float) -> list[dict[str, Any]]:
    """One row per phase (forward; weight and input gradients): its GEMMs of both nets run
    side by side on one thread each, as the update runs them. A row's m is the phase's
    multiply-adds and k = n = 1, so 2 m k n is its flops, as in the one-by-one rows."""
    threads = torch.get_num_threads()
    # First each product on the caller's threads, as the update's behaviour pass runs before
    # its epochs: side by side ran ~1.5x slower in a process that had not (MKL on this VM).
    for _, (a, b) in operands:
        torch.mm(a, b)
    torch.set_num_threads(1)  # as Learner._one_thread_per_net
    try:
        rows = []
        for phase, is_forward in (("forward", True), ("backward", False)):
            mine = [(n, ab) for n, ab in operands if n.endswith("forward") == is_forward]
            nets = [[ab for n, ab in mine if n.startswith(net)] for net in ("policy", "value")]
            s = _seconds_side_by_side(nets[0], nets[1], min_seconds)
            flops = sum(2 * a.shape[0] * a.shape[1] * b.shape[1] for _, (a, b) in mine)
            rows.append({"gemm": f"policy and value side by side, {phase}", "m": flops // 2, "k": 1, "n": 1,
                         "ms": s * 1e3, "gflops": flops / s / 1e9})
        return rows
    finally:
        torch.set_num_threads(threads)


def _seconds_side_by_side(first: list[Operands], second: list[Operands], min_seconds: float) -> float:
    """Seconds per pass of `first`'s products here while `second`'s run on twin_mlp's pool
    thread (one handoff a pass, as the update's one a phase), best_seconds' way."""
    from skurl.policy.twin_mlp import run_both

    outs = [[torch.empty(a.shape[0], b.shape[1], dtype=a.dtype) for a, b in ops] for ops in (first, second)]

    def products(ops: list[Operands], out: list[torch.Tensor]) -> None:
        for (a, b), c in zip(ops, out, strict=True):
            torch.mm(a, b, out=c)

    def both() -> None:
        run_both(True, lambda: products(first, outs[0]), lambda: products(second, outs[1]))

    for _ in range(5):
        both()  # warm
    return best_seconds(both, min_seconds)


def peak_sgemm_gflops(size: int = 2048, min_seconds: float = 1.0) -> float:
    """The machine's best fp32 GEMM rate on a large square product, for scale."""
    s = seconds_per_gemm(torch.randn(size, size), torch.randn(size, size), min_seconds)
    return 2 * size**3 / s / 1e9
