"""V-trace targets for rollouts from an older policy version (pure torch, [T, N]).

Espeholt et al. (2018), "IMPALA", eq. 1 with the lambda of its section 4.2: with
rho_t = min(rho_bar, pi/mu), c_t = lambda min(c_bar, pi/mu) and
delta_t = r_t + gamma V(x_{t+1}) - V(x_t), the value target is
v_s = V(x_s) + sum_t gamma^(t-s) (c_s ... c_{t-1}) rho_t delta_t. The advantage of a_s
is r_s + gamma ((1 - lambda) V(x_{s+1}) + lambda v_{s+1}) - V(x_s), without rho_s: PPO's
ratio pi/mu (clipped) already weights the action taken. With pi = mu both equal
buffer/gae.py's GAE(lambda) advantages and returns bit for bit, so an on-policy batch
gives today's update. Episode ends and bootstraps are those of gae(). Why this choice:
docs/near_on_policy.md.
"""

from __future__ import annotations

import torch


def vtrace(
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap: torch.Tensor,
    dones: torch.Tensor,
    terminals: torch.Tensor,
    gamma: float,
    lam: float,
    *,
    log_ratio: torch.Tensor,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and value targets [T, N] in values' dtype.

    The arguments of gae(), plus log_ratio [T, N] (log pi - log mu of the actions taken)
    and the truncation levels. rewards, values: [T, N]; bootstrap:
    [N] value of the observation after step T-1; dones / terminals: [T, N] as in gae()
    (episodes truncated inside the rollout are not supported: collectors end episodes at
    the rollout's end).
    """
    steps = rewards.shape[0]
    dones = dones.bool()
    terminals = terminals.bool() & dones
    if steps > 1 and bool((dones[:-1] & ~terminals[:-1]).any()):
        raise ValueError("vtrace: episodes truncated inside the rollout are not supported")
    ratio = log_ratio.to(values.dtype).exp()
    rho, c = ratio.clamp(max=rho_bar), ratio.clamp(max=c_bar)
    adv = torch.zeros_like(values)
    correction = torch.zeros_like(values)  # v_s - V(x_s)
    next_corr = torch.zeros_like(values[0])
    for t in reversed(range(steps)):
        next_value = bootstrap.to(values.dtype) if t == steps - 1 else values[t + 1]
        next_value = torch.where(terminals[t], torch.zeros_like(next_value), next_value)
        ended = torch.ones_like(dones[t]) if t == steps - 1 else dones[t]
        delta = rewards[t].to(values.dtype) + gamma * next_value - values[t]
        carried = torch.where(ended, torch.zeros_like(next_corr), next_corr)
        # (gamma lam) x carried, as gae() writes it: with c = 1 the very same float ops
        adv[t] = delta + gamma * lam * carried
        next_corr = rho[t] * delta + gamma * lam * (c[t] * carried)
        correction[t] = next_corr
    return adv, correction + values


def ratio_stats(log_ratio: torch.Tensor | None, rho_bar: float) -> dict[str, float]:
    """A stale batch's importance ratios pi/mu at the update's start: their mean and the
    share V-trace truncates (above rho-bar); nothing for an on-policy batch (None)."""
    if log_ratio is None:
        return {}
    ratio = log_ratio.double().exp()
    return {"is_ratio_mean": float(ratio.mean()), "is_ratio_truncated": float((ratio > rho_bar).double().mean())}
