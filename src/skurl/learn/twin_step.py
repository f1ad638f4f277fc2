"""Grad-norm clip and Adam for the policy and value nets, each net's part run at the start
of its next side-by-side piece: bit for bit `clip_grad_norm_(params, max_norm)` then
`optimizer.step()` over both nets.

Why: side by side, clip and Adam ran on one thread while the other idled. Inside the
nets' pieces they overlap the other net's work, but only as a few ops: Adam.step's Python
holds the GIL the other thread needs between its ops. So each part is the op torch runs
over the whole list, on one net's tensors (`_foreach_norm`, `_foreach_mul_`,
`_foreach_add_`, `_fused_adam_`: torch's private ops, torch is pinned), and
tests/unit/test_twin_step.py holds the result to torch's pair. docs/performance.md has
the figures."""

from __future__ import annotations

import torch

# clip_grads_with_norm_'s guard against a zero norm (torch/nn/utils/clip_grad.py)
NORM_EPS = 1e-6


def sub_optimizer(optimizer: torch.optim.Optimizer, params: list[torch.Tensor]) -> torch.optim.Optimizer:
    """An optimizer of `optimizer`'s class and hyper-parameters over `params` only, sharing
    its state (moments and step counts stay in `optimizer`, so checkpoints are unchanged).
    Build it after any load_state_dict or lr change (both replace what it copied)."""
    if len(optimizer.param_groups) != 1:
        raise ValueError("sub_optimizer: expected an optimizer with one parameter group")
    options = {k: v for k, v in optimizer.param_groups[0].items() if k != "params"}
    sub = type(optimizer)([{**options, "params": params}])  # type: ignore[call-arg]
    sub.state = optimizer.state  # the same dict: steps land in the parent's state
    return sub


def plain_fused_adam(optimizer: torch.optim.Optimizer) -> bool:
    """Adam with fused=True and none of the options its direct call above leaves out."""
    group = optimizer.param_groups[0]
    return (type(optimizer) is torch.optim.Adam and bool(group["fused"]) and not group["amsgrad"]
            and not group["capturable"] and not group["differentiable"]
            and not group.get("decoupled_weight_decay", False) and isinstance(group["lr"], float)
            and all(isinstance(b, float) for b in group["betas"]))


def grad_norms(grads: list[torch.Tensor]) -> list[torch.Tensor]:
    """Each gradient's 2-norm, as clip_grad_norm_ computes them (CPU: one at a time)."""
    return list(torch._foreach_norm(grads, 2.0)) if grads else []


class DeferredClipStep:
    """clip + step of one optimizer whose parameters are the policy net's (half 0) then the
    value net's (half 1). `total(norms0, norms1)` takes each half's gradient norms and
    leaves both halves pending; `step_pending(h)` scales half h's gradients and steps it
    (call it before that net's next forward); `flush()` runs what is still pending."""

    def __init__(self, optimizer: torch.optim.Optimizer, first: list[torch.Tensor],
                 second: list[torch.Tensor], max_norm: float) -> None:
        ordered = [p for group in optimizer.param_groups for p in group["params"]]
        if len(ordered) != len(first) + len(second) or any(
                a is not b for a, b in zip(ordered, first + second, strict=True)):
            raise ValueError("DeferredClipStep: the optimizer's parameters must be first then second, in order")
        self.halves = (first, second)
        self.steps = (sub_optimizer(optimizer, first), sub_optimizer(optimizer, second))
        self.direct = plain_fused_adam(optimizer)  # torch's fused-Adam ops, else the optimizer's step
        self.max_norm = float(max_norm)
        self.coef: torch.Tensor | None = None
        self.pending = [False, False]

    def total(self, norms0: list[torch.Tensor], norms1: list[torch.Tensor]) -> torch.Tensor:
        """The gradients' total norm (clip_grad_norm_'s return); both halves now pending."""
        every = norms0 + norms1
        if not every:
            return torch.tensor(0.0)
        total = torch.linalg.vector_norm(torch.stack(every), 2.0)
        self.coef = torch.clamp(self.max_norm / (total + NORM_EPS), max=1.0)
        self.pending = [True, True]
        if any(p not in self.steps[0].state for half in self.halves for p in half if p.grad is not None):
            # a first step creates the moments: in the parameters' order, as one step would,
            # so the optimizer's state_dict (and a checkpoint) lists them as before
            self.flush()
        return total

    def step_pending(self, half: int) -> None:
        if not self.pending[half]:
            return
        self.pending[half] = False
        params = [p for p in self.halves[half] if p.grad is not None]
        grads = [p.grad for p in params if p.grad is not None]  # (the same list, typed)
        if grads and self.coef is not None:
            torch._foreach_mul_(grads, self.coef)
        state, group = self.steps[half].state, self.steps[half].param_groups[0]
        if not self.direct or any(p not in state for p in params):
            self.steps[half].step()  # creates the moments, or another optimizer's step
            return
        step_counts = [state[p]["step"] for p in params]
        torch._foreach_add_(step_counts, 1)
        torch._fused_adam_(params, grads, [state[p]["exp_avg"] for p in params],
                           [state[p]["exp_avg_sq"] for p in params], [], step_counts, amsgrad=False,
                           lr=group["lr"], beta1=group["betas"][0], beta2=group["betas"][1],
                           weight_decay=group["weight_decay"], eps=group["eps"],
                           maximize=group["maximize"], grad_scale=None, found_inf=None)

    def flush(self) -> None:
        self.step_pending(0)
        self.step_pending(1)
