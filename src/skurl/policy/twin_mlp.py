"""The policy and value MLPs of an ActorCritic evaluated together for training, with a
hand-written backward pass: one autograd node instead of ~30, and no torch.autocast.

Under autocast every linear casts its weight to bf16 in each minibatch and records the
casts in the graph; here the weights are cast once per call (= once per optimizer step)
from the fp32 masters, and the gradients come back in fp32 to the fp32 parameters. The
arithmetic is autograd's own (addmm with the transposed weight forward; mm for the
weight and input gradients, a bias gradient summed in the compute dtype, ReLU backward
by `threshold_backward` on the saved ReLU outputs), so results are bit-identical to
the nn.Modules in fp32 and to autocast in bf16 (tests/unit/test_twin_mlp.py).

More: docs/internals.md (policy/twin_mlp.py)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import torch
from torch import nn

from skurl.policy.bf16 import cpu_has_bf16

T = TypeVar("T")
_POOL: ThreadPoolExecutor | None = None  # the value net's thread when the nets run side by side
# oneDNN's fused linear (+ bias + pointwise op), as torch.compile's CPU backend calls it;
# only where the CPU has native bf16 (elsewhere oneDNN refuses to build the primitive)
_MKLDNN_LINEAR = getattr(getattr(torch.ops, "mkldnn", None), "_linear_pointwise", None) \
    if cpu_has_bf16() else None


def linears_of(net: nn.Module) -> list[nn.Linear]:
    """The Linear layers of an `mlp()` stack (Linear, ReLU, ..., Linear), in order."""
    seq = getattr(net, "net", net)
    layers = list(seq.children()) if isinstance(seq, nn.Sequential) else []
    linears = [m for m in layers if isinstance(m, nn.Linear)]
    expected = [nn.Linear if i % 2 == 0 else nn.ReLU for i in range(2 * len(linears) - 1)]
    if not linears or [type(m) for m in layers] != expected:
        raise TypeError(f"twin_forward: expected a Linear-ReLU-...-Linear stack, got {net}")
    return linears


def twin_forward(policy: nn.Module, value: nn.Module, x: torch.Tensor,
                 dtype: torch.dtype = torch.float32, side_by_side: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Normalized observations x [B, D] (data: no gradient flows to it) -> (logits
    [B, A] float32, values [B] float32), differentiable in both nets' parameters.
    `dtype`: compute dtype of the GEMMs and activations (float32 or bfloat16).
    `side_by_side`: the value net's forward and backward run on a second thread while the
    policy's run on this one (for a caller that set torch to one intra-op thread: two
    single-threaded nets keep two cores busier than two threads splitting each small op,
    and each net's arithmetic is the same whichever thread runs it)."""
    pol, val = linears_of(policy), linears_of(value)
    if len(pol) != len(val):
        raise ValueError(f"twin_forward: policy has {len(pol)} layers, value {len(val)}; expected equal depth")
    params: list[torch.Tensor] = [p for lin in pol + val for p in (lin.weight, lin.bias)]
    logits, values = _TwinMLP.apply(x, dtype, len(pol), bool(side_by_side), *params)
    return logits, values.squeeze(-1)


@torch.no_grad()
def twin_outputs(policy: nn.Module, value: nn.Module, x: torch.Tensor,
                 dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """twin_forward's (logits, values) without gradients: the same arithmetic row by row,
    so a learner that recomputes its behaviour outputs with it starts each update at a
    ratio of exactly 1 in bf16 too (rows do not interact: any chunking, the same bits)."""
    nets = [tuple(p for lin in linears_of(net) for p in (lin.weight, lin.bias)) for net in (policy, value)]
    x_c = x.to(dtype)
    logits, values = (_net_forward(x_c, net, dtype)[0] for net in nets)
    return logits, values.squeeze(-1)


def run_both(side_by_side: bool, first: Callable[[], T], second: Callable[[], T]) -> tuple[T, T]:
    """first() here and second() on the pool's thread (without autograd recording, as
    inside an autograd.Function), or both here in turn."""
    global _POOL
    if not side_by_side:
        return first(), second()
    if _POOL is None:
        _POOL = ThreadPoolExecutor(1, "twin-mlp")

    def untracked() -> T:
        with torch.no_grad():
            return second()

    future = _POOL.submit(untracked)
    return first(), future.result()


class _TwinMLP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, dtype: torch.dtype, depth: int,  # type: ignore[override]
                side_by_side: bool, *params: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if ctx.needs_input_grad[0]:
            raise ValueError("twin_forward: x is data; no gradient with respect to it")
        x_c = x.to(dtype)
        (pol_head, pol_saved), (val_head, val_saved) = run_both(
            side_by_side, lambda: _net_forward(x_c, params[:2 * depth], dtype),
            lambda: _net_forward(x_c, params[2 * depth:], dtype))
        ctx.save_for_backward(*pol_saved, *val_saved)
        ctx.depth, ctx.dtype, ctx.side_by_side = depth, dtype, side_by_side
        return pol_head, val_head

    @staticmethod
    def backward(ctx, g_logits: torch.Tensor | None,  # type: ignore[override]
                 g_values: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        depth, dtype = ctx.depth, ctx.dtype
        saved = ctx.saved_tensors
        pol, val = run_both(ctx.side_by_side, lambda: _net_backward(g_logits, saved[:2 * depth], dtype),
                         lambda: _net_backward(g_values, saved[2 * depth:], dtype))
        return (None, None, None, None, *pol, *val)


def _net_forward(x_c: torch.Tensor, net: tuple[torch.Tensor, ...],
                 dtype: torch.dtype) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """One net's fp32 output and what its backward needs (compute-dtype weights, inputs)."""
    depth = len(net) // 2
    weights = [w.to(dtype) for w in net[0::2]]
    h, inputs = x_c, []
    for i, (w, b) in enumerate(zip(weights, net[1::2], strict=True)):
        inputs.append(h)
        h = _linear(h, w, b.to(dtype), relu=i < depth - 1)
    return h.float(), weights + inputs


def _linear(h: torch.Tensor, w: torch.Tensor, b: torch.Tensor, relu: bool) -> torch.Tensor:
    """relu?(h @ w.T + b). bf16 on CPU: oneDNN's linear with the bias and the ReLU in its
    epilogue (one pass over the output instead of three: bias broadcast, GEMM, ReLU), the
    same bits as addmm + relu_ (tests/unit/test_twin_mlp.py); fp32 keeps addmm, whose
    results are autograd's own (oneDNN's fp32 GEMM rounds differently), and so does bf16
    on a CPU without native bf16 (autocast's own addmm there)."""
    if h.dtype == torch.bfloat16 and h.device.type == "cpu" and _MKLDNN_LINEAR is not None:
        return _MKLDNN_LINEAR(h, w, b, "relu" if relu else "none", [], "")
    out = torch.addmm(b, h, w.t())
    return out.relu_() if relu else out


def _net_backward(g_out: torch.Tensor | None, net_saved: tuple[torch.Tensor, ...],
                  dtype: torch.dtype) -> list[torch.Tensor]:
    """One net's fp32 (weight, bias) gradients, layer by layer."""
    depth = len(net_saved) // 2
    weights, inputs = net_saved[:depth], net_saved[depth:]
    g = _output_grad(g_out, inputs[0].shape[0], weights[-1], dtype)
    grads: list[torch.Tensor] = []
    for i in reversed(range(depth)):
        # bias gradient summed in the compute dtype (fp32 accumulation inside the
        # reduction), as autograd does under autocast
        grads[:0] = [_weight_grad(g, inputs[i]).float(), g.sum(0).float()]
        if i > 0:  # ReLU backward in place on the fresh input gradient (no second buffer)
            g_in = torch.mm(g, weights[i])
            g = torch.ops.aten.threshold_backward.grad_input(g_in, inputs[i], 0, grad_input=g_in)
    return grads


def _weight_grad(g: torch.Tensor, inp: torch.Tensor) -> torch.Tensor:
    """g.T @ inp [out, in], as autograd computes it. In bf16 a layer narrower in than out
    (the first: in = obs_dim) as (inp.T @ g).T: 13% faster at [1024, 70] x [1024, 256],
    the same bits (oneDNN); the result is a transposed view (autograd lays it out as the
    weight). Not in fp32, where MKL's sums for it round differently at some shapes, nor
    without native bf16 (torch's own bf16 GEMM, not oneDNN's)."""
    if g.dtype == torch.bfloat16 and _MKLDNN_LINEAR is not None and inp.shape[1] < g.shape[1]:
        return torch.mm(inp.t(), g).t()
    return torch.mm(g.t(), inp)


def _output_grad(g_out: torch.Tensor | None, batch: int, head: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The gradient at a net's output in the compute dtype ([B, out]); zeros when that
    output took no part in the loss."""
    if g_out is None:
        return torch.zeros(batch, head.shape[0], dtype=dtype, device=head.device)
    return g_out.reshape(batch, head.shape[0]).to(dtype)
