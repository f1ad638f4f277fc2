"""One PPO minibatch's gradients without the autograd graph, bit-identical to autograd's.

The nets' forward and backward are twin_mlp's (policy/twin_mlp.py); between them the
loss's gradient with respect to the logits and values is computed here by the same
kernels, in the same order, as autograd runs the graph of learner.ppo_minibatch_loss
(derivative formulas of torch's derivatives.yaml; the engine runs later nodes first, so
the log-softmax output sums its gradients as (entropy-product + exp) + gather). That
saves ~25 graph nodes, their saved tensors and the engine's bookkeeping per minibatch.
tests/unit/test_fused_update.py holds it to autograd's update bit for bit (fp32, bf16,
weighted rows, value-only updates); docs/performance.md has the figures.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from skurl.policy.twin_mlp import _net_backward, _net_forward, linears_of, run_both

LossGrads = Callable[..., tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]]

def net_params(net: torch.nn.Module) -> list[torch.Tensor]:
    """(weight, bias) of each Linear of an mlp stack, in twin_mlp's order."""
    return [p for lin in linears_of(net) for p in (lin.weight, lin.bias)]


def fused_minibatch_grads(policy: torch.nn.Module, value: torch.nn.Module, obs: torch.Tensor,
                          actions: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor,
                          returns: torch.Tensor, weight: torch.Tensor | None, *, clip: float,
                          vf_coef: float, ent_coef: float, train_policy: bool, dtype: torch.dtype,
                          side_by_side: bool, grads_fn: LossGrads | None = None,
                          mark: Callable[[str], None] | None = None) -> dict[str, torch.Tensor]:
    """Set .grad of both nets' parameters to the PPO loss's gradient on this minibatch
    (as `loss.backward()` after zero_grad(set_to_none=True) would); the detached stats.
    `grads_fn`: loss_grads (the default) or a torch.compile of it (train.compile).
    `mark(phase)`: called after each phase (`skurl bench train` times them)."""
    mark = mark or _no_mark
    pol_p, val_p = net_params(policy), net_params(value)
    with torch.no_grad():
        x_c = obs.to(dtype)
        (logits, pol_saved), (head, val_saved) = run_both(
            side_by_side, lambda: _net_forward(x_c, tuple(pol_p), dtype),
            lambda: _net_forward(x_c, tuple(val_p), dtype))
        values = head.squeeze(-1)
        mark("forward (nets)")
        stats, g_logits, g_values = (grads_fn or loss_grads)(logits, values, actions, old_logp, adv, returns, weight,
                                               clip, vf_coef, ent_coef, train_policy)
        mark("loss and its gradient")
        pol_g, val_g = run_both(side_by_side, lambda: _net_backward(g_logits, tuple(pol_saved), dtype),
                                lambda: _net_backward(g_values.unsqueeze(-1), tuple(val_saved), dtype))
    for p, g in zip(pol_p + val_p, pol_g + val_g, strict=True):
        # autograd's AccumulateGrad lays a fresh gradient out as its parameter
        p.grad = g if g.stride() == p.stride() else g.contiguous()
    mark("backward (nets)")
    return stats


def loss_grads(logits: torch.Tensor, values: torch.Tensor, actions: torch.Tensor, old_logp: torch.Tensor,
               adv: torch.Tensor, returns: torch.Tensor, weight: torch.Tensor | None, clip: float,
               vf_coef: float, ent_coef: float,
               train_policy: bool) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
    """Stats of ppo_loss and d loss / d logits ([B, A]; zeros for a value-only update, as
    autograd materializes an unused output's gradient) and d loss / d values ([B])."""
    n = values.shape[0]
    one = torch.ones((), dtype=values.dtype, device=values.device)  # backward()'s seed
    logp_all = torch.log_softmax(logits, dim=-1)
    index = actions.unsqueeze(-1)
    new_logp = logp_all.gather(-1, index).squeeze(-1)
    p = logp_all.exp()
    entropy = -(p * logp_all).sum(-1)
    log_ratio = new_logp - old_logp
    ratio = log_ratio.exp()
    s1 = ratio * adv
    s2 = ratio.clamp(1.0 - clip, 1.0 + clip) * adv
    surrogate = torch.min(s1, s2)
    weighted = surrogate if weight is None else weight * surrogate
    diff = values - returns
    stats = {
        "policy_loss": -weighted.mean(),
        "value_loss": 0.5 * diff.square().mean(),
        "entropy": entropy.mean(),
        "approx_kl": ((ratio - 1.0) - log_ratio).mean(),
        "clip_frac": ((ratio - 1.0).abs() > clip).float().mean(),
    }
    # value term: Mul(vf_coef) -> Mul(0.5) -> Mean -> Pow(2) -> Sub
    g_vm = (one * vf_coef) * 0.5
    g_values = (g_vm / n).expand(n) * (2.0 * diff.pow(1.0))
    if not train_policy:
        return stats, torch.zeros_like(logits), g_values
    # entropy term: Sub -> Mul(ent_coef) -> Mean -> Neg -> Sum -> Mul(p, logp) -> Exp
    g_prod = (-((-one * ent_coef) / n)).expand(n).unsqueeze(-1).expand_as(p)
    g_from_mul = g_prod * p
    g_from_exp = (g_prod * logp_all) * p
    # policy term: Neg -> Mean -> (Mul weight) -> Minimum -> Mul adv / Clamp -> Exp -> Sub
    g_surr = ((-one) / n).expand(n)
    if weight is not None:
        g_surr = g_surr * weight
    g_s1, g_s2 = _minimum_backward(g_surr, s1, s2)
    in_range = (ratio >= 1.0 - clip).logical_and_(ratio <= 1.0 + clip)
    g_ratio = g_s1 * adv + torch.where(in_range, g_s2 * adv, torch.zeros((), dtype=adv.dtype))
    g_new_logp = g_ratio * ratio
    g_gather = torch.zeros_like(logp_all).scatter_add_(-1, index, g_new_logp.unsqueeze(-1))
    g_logp_all = (g_from_mul + g_from_exp) + g_gather
    g_logits = torch.ops.aten._log_softmax_backward_data(g_logp_all, logp_all, -1, logits.dtype)
    return stats, g_logits, g_values


def _minimum_backward(grad: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """torch.minimum's gradients: ties split in half."""
    tied = torch.where(a == b, grad / 2, grad)
    return tied.masked_fill(a > b, 0), tied.masked_fill(a < b, 0)


def _no_mark(phase: str) -> None:
    pass
