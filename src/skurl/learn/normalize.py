"""Reward normalization for the learner, saved in checkpoints (the observation statistics
are part of the policy: policy/normalize.py). float64 buffers, so they survive a
checkpoint round trip bit for bit.
"""

from __future__ import annotations

import torch
from torch import nn

from skurl.policy.normalize import RunningMeanStd


class RewardScaler(nn.Module):
    """Divides rewards by the running std of per-SKU discounted returns.

    The scheme of OpenAI baselines' VecNormalize, studied in Engstrom et al. (2020),
    "Implementation Matters in Deep Policy Gradients": R_t = gamma R_{t-1} + r_t, reset
    at episode ends; rewards are scaled, not centred, so their sign is kept. Returns are
    accumulated from zero at the start of each rollout, which is exact when rollouts
    hold whole episodes (as the collector's do).
    """

    def __init__(self, gamma: float, eps: float = 1e-8, decay: float = 1.0) -> None:
        super().__init__()
        self.gamma = gamma
        self.decay = decay
        self.stats = RunningMeanStd((), eps=eps)

    @torch.no_grad()
    def update(self, rewards: torch.Tensor, dones: torch.Tensor) -> None:
        """Fold the discounted returns of rewards [T, N] (dones [T, N]) into the stats."""
        ret = torch.zeros(rewards.shape[1], dtype=torch.float64, device=rewards.device)
        total = torch.zeros((), dtype=torch.float64, device=rewards.device)
        total_sq = torch.zeros((), dtype=torch.float64, device=rewards.device)
        for t in range(rewards.shape[0]):
            ret = ret * self.gamma + rewards[t].to(torch.float64)
            total += ret.sum()
            total_sq += ret.square().sum()
            ret = ret * (~dones[t].bool()).to(torch.float64)
        n = rewards.numel()
        if n == 0:
            return
        mean = total / n
        self.stats.merge(mean, (total_sq / n - mean.square()).clamp_min(0.0), float(n), self.decay)

    def scale(self, rewards: torch.Tensor) -> torch.Tensor:
        return rewards / self.stats.std.to(rewards.dtype)


class SkuRewardScaler(nn.Module):
    """Divides each SKU's rewards by the running std of that SKU's discounted returns.

    A shared policy over SKUs whose money scales differ by orders of magnitude would
    otherwise learn mostly for the most valuable ones (one global scale). SKUs are
    independent decision problems, so a positive per-SKU factor leaves each SKU's
    optimal policy unchanged while it evens out their weight in the gradient. The std
    has a floor of `floor` x the median SKU std, so a SKU with near-constant returns
    (no demand) is not blown up. Per-SKU stats are kept by sku_id (sorted), merged
    with the same decay as the global scaler.
    """

    ids: torch.Tensor
    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, gamma: float, eps: float = 1e-8, decay: float = 1.0, floor: float = 0.1) -> None:
        super().__init__()
        self.gamma, self.eps, self.decay, self.floor = gamma, eps, decay, floor
        self.stats = RunningMeanStd((), eps=eps)  # catalog-wide, for reporting
        for name, dtype in (("ids", torch.int64), ("mean", torch.float64), ("var", torch.float64),
                            ("count", torch.float64)):
            self.register_buffer(name, torch.zeros(0, dtype=dtype))

    @torch.no_grad()
    def update(self, rewards: torch.Tensor, dones: torch.Tensor, sku_ids: torch.Tensor | None = None) -> None:
        if sku_ids is None:
            raise ValueError("ppo.reward_scale=sku: the learner must pass the rollout's sku_ids")
        returns = torch.empty(rewards.shape, dtype=torch.float64, device=rewards.device)
        ret = torch.zeros(rewards.shape[1], dtype=torch.float64, device=rewards.device)
        for t in range(rewards.shape[0]):
            ret = ret * self.gamma + rewards[t].to(torch.float64)
            returns[t] = ret
            ret = ret * (~dones[t].bool()).to(torch.float64)
        self.stats.merge(returns.mean(), returns.var(unbiased=False), float(returns.numel()), self.decay)
        pos = self._positions(sku_ids.to(self.ids.device))
        tot = self.count[pos] * self.decay + returns.shape[0]
        delta = returns.mean(0) - self.mean[pos]
        m2 = self.var[pos] * self.count[pos] * self.decay + returns.var(0, unbiased=False) * returns.shape[0]
        m2 = m2 + delta.square() * self.count[pos] * self.decay * returns.shape[0] / tot
        self.mean[pos] = self.mean[pos] + delta * returns.shape[0] / tot
        self.var[pos] = m2 / tot
        self.count[pos] = tot

    def _positions(self, sku_ids: torch.Tensor) -> torch.Tensor:
        """Index of each id in the sorted `ids`, inserting unseen ids with empty stats."""
        new = sku_ids[~torch.isin(sku_ids, self.ids)].unique()
        if new.numel():
            ids = torch.cat([self.ids, new])
            order = torch.argsort(ids)
            zeros = torch.zeros(new.numel(), dtype=torch.float64, device=ids.device)
            self.ids = ids[order]
            self.mean = torch.cat([self.mean, zeros])[order]
            self.var = torch.cat([self.var, zeros])[order]
            self.count = torch.cat([self.count, zeros])[order]
        return torch.searchsorted(self.ids, sku_ids)

    def scale(self, rewards: torch.Tensor, sku_ids: torch.Tensor | None = None) -> torch.Tensor:
        if sku_ids is None:
            raise ValueError("ppo.reward_scale=sku: the learner must pass the rollout's sku_ids")
        var = self.var[self._positions(sku_ids.to(self.ids.device))]
        floor = self.floor**2 * float(self.var.median()) if self.var.numel() else 0.0
        std = torch.sqrt(var.clamp_min(floor) + self.eps)
        return rewards / std.to(rewards.dtype)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,  # type: ignore[no-untyped-def]
                              unexpected_keys, error_msgs) -> None:
        # Per-SKU buffers change size as SKUs are seen: adopt the saved sizes first.
        for name in ("ids", "mean", "var", "count"):
            if prefix + name in state_dict:
                setattr(self, name, torch.empty_like(state_dict[prefix + name]))
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs)


@torch.no_grad()
def rescale_output_layer(net: nn.Module, factor: float) -> None:
    """Multiply the last nn.Linear of `net` (weight and bias) by `factor`, so the net's
    output is exactly `factor` times what it was (any ReLU stack before it is unchanged).

    With `factor = old_std / new_std` after a change of the reward scale, the value net
    keeps predicting the same returns in money units: the "preserving outputs precisely"
    half of PopArt (van Hasselt et al. 2016, "Learning values across many orders of
    magnitude"). Without it a critic trained at a decaying learning rate lags behind a
    scale that keeps moving (it shrinks as the policy's costs become steadier)."""
    last = [m for m in net.modules() if isinstance(m, nn.Linear)][-1]
    last.weight.mul_(factor)
    if last.bias is not None:
        last.bias.mul_(factor)


@torch.no_grad()
def absorb_normalizer_change(nets: list[nn.Module], norm: RunningMeanStd, old_mean: torch.Tensor,
                             old_var: torch.Tensor, min_var: float = 1e-6) -> None:
    """After `norm` moved from (old_mean, old_var) to its current moments, change the first
    nn.Linear of each net so that it computes the same function of the raw observation:
    x_old = (x_new s1 + m1 - m0) / s0, so W x_old + b = (W s1 / s0) x_new + W (m1 - m0) / s0 + b.
    Exact up to the normalizer's clip. Features whose old variance was below `min_var`
    (constant so far: nothing learnt about them to preserve) are left as they are.

    A policy trained at a decaying learning rate otherwise keeps changing through its
    input statistics alone (they follow the state distribution as the policy sharpens),
    the same drift that PopArt removes on the output side."""
    old_std = torch.sqrt(old_var + norm.eps)
    keep = old_var > min_var
    scale = torch.where(keep, norm.std / old_std, torch.ones_like(old_std))
    shift = torch.where(keep, (norm.mean - old_mean) / old_std, torch.zeros_like(old_std))
    for net in nets:
        first = next(m for m in net.modules() if isinstance(m, nn.Linear))
        w = first.weight.to(torch.float64)
        if first.bias is not None:
            first.bias.add_((w @ shift).to(first.bias.dtype))
        first.weight.copy_((w * scale).to(first.weight.dtype))
