"""The PPO objective as a pure function of tensors (no modules, no state).

Schulman et al. (2017), "Proximal Policy Optimization Algorithms": clipped surrogate
L^CLIP (eq. 7) + value loss (eq. 9) - entropy bonus. approx_kl is the low-variance
estimator E[(r - 1) - log r] (Schulman, "Approximating KL Divergence", 2020).

`weight` makes it decoupled PPO (Hilton, Cobbe & Schulman 2021, "Batch size-invariance
for policy optimization", eq. 4): old_logp is then the proximal policy's (the learner's
own at the update's start) and weight the detached pi_prox / mu of the behaviour policy
mu that collected a stale rollout, so the trust region is around the current policy
however old the data is.
"""

from __future__ import annotations

import torch


def ppo_loss(
    new_logp: torch.Tensor,
    old_logp: torch.Tensor,
    adv: torch.Tensor,
    values: torch.Tensor,
    returns: torch.Tensor,
    entropy: torch.Tensor,
    clip: float,
    vf_coef: float,
    ent_coef: float,
    train_policy: bool = True,
    weight: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Loss to minimize and detached stats (policy_loss, value_loss, entropy, approx_kl,
    clip_frac). All inputs are [B]; adv is already normalized. With train_policy=False
    the loss is the value term alone (the policy gets no gradient; stats as usual). weight
    [B] (or None: 1) scales each row's clipped surrogate."""
    log_ratio = new_logp - old_logp
    ratio = log_ratio.exp()
    surrogate = torch.min(ratio * adv, ratio.clamp(1.0 - clip, 1.0 + clip) * adv)
    if weight is not None:
        surrogate = weight * surrogate
    policy_loss = -surrogate.mean()
    value_loss = 0.5 * (values - returns).square().mean()
    entropy_mean = entropy.mean()
    loss = vf_coef * value_loss
    if train_policy:
        loss = policy_loss + loss - ent_coef * entropy_mean
    with torch.no_grad():
        stats = {
            "policy_loss": policy_loss.detach(),
            "value_loss": value_loss.detach(),
            "entropy": entropy_mean.detach(),
            "approx_kl": ((ratio - 1.0) - log_ratio).mean(),
            "clip_frac": ((ratio - 1.0).abs() > clip).float().mean(),
        }
    return loss, stats
