"""Generalized advantage estimation over rollouts [T, N] (vectorized over SKUs).

Schulman et al. (2016), "High-Dimensional Continuous Control Using Generalized
Advantage Estimation", eq. 16: A_t = sum_l (gamma lambda)^l delta_{t+l}, with
delta_t = r_t + gamma V(s_{t+1}) - V(s_t). Episode ends cut the sum. A terminal end
has V(s_{t+1}) = 0; a truncated end (time limit, or the end of the rollout) bootstraps
with the value of the observation that followed, as in Pardo et al. (2018), "Time
Limits in Reinforcement Learning".
"""

from __future__ import annotations

import torch


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap: torch.Tensor,
    dones: torch.Tensor,
    terminals: torch.Tensor,
    gamma: float,
    lam: float,
    truncation_values: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns (= advantages + values), both [T, N] in values' dtype.

    rewards, values: [T, N]; bootstrap: [N] value of the observation after step T-1;
    dones: [T, N] the episode ended after step t; terminals: [T, N] it ended in a
    terminal state; truncation_values: [T, N] value of the final observation of an
    episode truncated at step t < T-1 (needed only if such steps exist).
    """
    steps = rewards.shape[0]
    dones = dones.bool()
    terminals = terminals.bool() & dones
    truncated_inside = dones[:-1] & ~terminals[:-1]
    if truncation_values is None and steps > 1 and bool(truncated_inside.any()):
        raise ValueError("gae: episodes truncated inside the rollout need truncation_values")
    adv = torch.zeros_like(values)
    next_adv = torch.zeros_like(values[0])
    for t in reversed(range(steps)):
        if t == steps - 1:
            next_value = bootstrap.to(values.dtype)
            ended = torch.ones_like(dones[t])
        else:
            next_value = values[t + 1]
            if truncation_values is not None:
                next_value = torch.where(dones[t], truncation_values[t].to(values.dtype), next_value)
            ended = dones[t]
        next_value = torch.where(terminals[t], torch.zeros_like(next_value), next_value)
        delta = rewards[t].to(values.dtype) + gamma * next_value - values[t]
        next_adv = delta + gamma * lam * torch.where(ended, torch.zeros_like(next_adv), next_adv)
        adv[t] = next_adv
    return adv, adv + values
