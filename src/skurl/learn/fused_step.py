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

from skurl.learn.twin_step import DeferredClipStep, grad_norms
from skurl.policy.twin_mlp import _net_backward, _net_forward, linears_of, run_both

PolicyLossGrads = Callable[..., tuple[dict[str, torch.Tensor], torch.Tensor]]
# A net's output -> its loss terms' stats and their gradient at that output
OutputTerms = Callable[[torch.Tensor], tuple[dict[str, torch.Tensor], torch.Tensor]]
# stats, (weight, bias) gradients laid out as their parameters, their norms (with a clip step)
NetPiece = tuple[dict[str, torch.Tensor], list[torch.Tensor], list[torch.Tensor]]
# The phase `skurl bench train` sees when the nets run side by side (forward, loss, backward)
SIDE_BY_SIDE_PHASE = "nets side by side (forward, loss, backward)"

def net_params(net: torch.nn.Module) -> list[torch.Tensor]:
    """(weight, bias) of each Linear of an mlp stack, in twin_mlp's order."""
    return [p for lin in linears_of(net) for p in (lin.weight, lin.bias)]


def fused_minibatch_grads(policy: torch.nn.Module, value: torch.nn.Module, obs: torch.Tensor,
                          actions: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor,
                          returns: torch.Tensor, weight: torch.Tensor | None, *, clip: float,
                          vf_coef: float, ent_coef: float, train_policy: bool, dtype: torch.dtype,
                          side_by_side: bool, grads_fn: PolicyLossGrads | None = None,
                          mark: Callable[[str], None] | None = None,
                          clip_step: DeferredClipStep | None = None) -> dict[str, torch.Tensor]:
    """Set .grad of both nets' parameters to the PPO loss's gradient on this minibatch
    (as `loss.backward()` after zero_grad(set_to_none=True) would); the detached stats.
    Each net's forward, its loss terms' gradient and its backward run as one piece (the
    value net's on the second thread when `side_by_side`: one handoff a minibatch).
    `grads_fn`: policy_loss_grads (the default) or a torch.compile of it (train.compile).
    `mark(phase)`: called after each phase (`skurl bench train` times them; side by side,
    the three phases are one). `clip_step`: each net's piece first runs its pending clip
    and Adam step of the last minibatch and ends with its gradients' norms; the stats get
    "grad_norm" (learn/twin_step.py)."""
    pol_p, val_p = net_params(policy), net_params(value)
    one_by_one = mark if mark is not None and not side_by_side else _no_mark
    policy_terms = grads_fn or policy_loss_grads
    with torch.no_grad():
        x_c = obs.to(dtype)

        def piece(half: int, params: list[torch.Tensor], terms: OutputTerms) -> Callable[[], NetPiece]:
            """One net's pending step, forward, its loss terms' (stats, gradient at its
            output), its backward."""
            def run() -> NetPiece:
                if clip_step is not None:
                    clip_step.step_pending(half)
                    one_by_one("Adam")
                head, saved = _net_forward(x_c, tuple(params), dtype)
                one_by_one("forward (nets)")
                stats, g_head = terms(head)
                one_by_one("loss and its gradient")
                # autograd's AccumulateGrad lays a fresh gradient out as its parameter
                grads = [g if g.stride() == p.stride() else g.contiguous()
                         for p, g in zip(params, _net_backward(g_head, tuple(saved), dtype), strict=True)]
                one_by_one("backward (nets)")
                if clip_step is None:
                    return stats, grads, []
                norms = grad_norms(grads)
                one_by_one("grad-norm clip")
                return stats, grads, norms
            return run

        def value_terms(head: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
            stats, g_values = value_loss_grads(head.squeeze(-1), returns, vf_coef)
            return stats, g_values.unsqueeze(-1)

        (pol_stats, pol_g, pol_n), (val_stats, val_g, val_n) = run_both(
            side_by_side,
            piece(0, pol_p, lambda logits: policy_terms(logits, actions, old_logp, adv, weight, clip, ent_coef,
                                                        train_policy)),
            piece(1, val_p, value_terms))
    for p, g in zip(pol_p + val_p, pol_g + val_g, strict=True):
        p.grad = g
    if mark is not None and side_by_side:
        mark(SIDE_BY_SIDE_PHASE)
    stats = _in_loss_order(pol_stats, val_stats)
    if clip_step is not None:
        stats["grad_norm"] = clip_step.total(pol_n, val_n)
    return stats


def _in_loss_order(pol_stats: dict[str, torch.Tensor], val_stats: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """ppo_loss's stats, in its order (the learner sums them as rows)."""
    return {"policy_loss": pol_stats["policy_loss"], "value_loss": val_stats["value_loss"],
            **{k: v for k, v in pol_stats.items() if k != "policy_loss"}}


def loss_grads(logits: torch.Tensor, values: torch.Tensor, actions: torch.Tensor, old_logp: torch.Tensor,
               adv: torch.Tensor, returns: torch.Tensor, weight: torch.Tensor | None, clip: float,
               vf_coef: float, ent_coef: float,
               train_policy: bool) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
    """Stats of ppo_loss and d loss / d logits ([B, A]; zeros for a value-only update, as
    autograd materializes an unused output's gradient) and d loss / d values ([B])."""
    pol_stats, g_logits = policy_loss_grads(logits, actions, old_logp, adv, weight, clip, ent_coef, train_policy)
    val_stats, g_values = value_loss_grads(values, returns, vf_coef)
    return _in_loss_order(pol_stats, val_stats), g_logits, g_values


def value_loss_grads(values: torch.Tensor, returns: torch.Tensor,
                     vf_coef: float) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """ppo_loss's value term: its stat and d loss / d values ([B])."""
    n = values.shape[0]
    one = torch.ones((), dtype=values.dtype, device=values.device)  # backward()'s seed
    diff = values - returns
    # value term: Mul(vf_coef) -> Mul(0.5) -> Mean -> Pow(2) -> Sub
    g_vm = (one * vf_coef) * 0.5
    g_values = (g_vm / n).expand(n) * (2.0 * diff.pow(1.0))
    return {"value_loss": 0.5 * diff.square().mean()}, g_values


def policy_loss_grads(logits: torch.Tensor, actions: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor,
                      weight: torch.Tensor | None, clip: float, ent_coef: float,
                      train_policy: bool) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """ppo_loss's policy and entropy terms: their stats and d loss / d logits ([B, A];
    zeros for a value-only update, as autograd materializes an unused output's gradient)."""
    n = logits.shape[0]
    one = torch.ones((), dtype=logits.dtype, device=logits.device)  # backward()'s seed
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
    stats = {
        "policy_loss": -weighted.mean(),
        "entropy": entropy.mean(),
        "approx_kl": ((ratio - 1.0) - log_ratio).mean(),
        "clip_frac": ((ratio - 1.0).abs() > clip).float().mean(),
    }
    if not train_policy:
        return stats, torch.zeros_like(logits)
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
    return stats, g_logits


def _minimum_backward(grad: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """torch.minimum's gradients: ties split in half."""
    tied = torch.where(a == b, grad / 2, grad)
    return tied.masked_fill(a > b, 0), tied.masked_fill(a < b, 0)


def _no_mark(phase: str) -> None:
    pass
