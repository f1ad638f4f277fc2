"""Running statistics for observation and reward normalization, saved in checkpoints.

Both are `torch.nn.Module`s with float64 buffers so that they travel inside a model's
`state_dict` (a published or exported model carries its observation normalization) and
survive a checkpoint round trip bit for bit.
"""

from __future__ import annotations

import torch
from torch import nn


class RunningMeanStd(nn.Module):
    """Mean and variance of a stream of vectors [B, *shape], merged batch by batch.

    The merge is the parallel algorithm of Chan, Golub & LeVeque (1979), "Updating
    formulae and a pairwise algorithm for computing sample variances": exact for any
    split of the stream into batches, so the result does not depend on chunking.
    """

    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, shape: tuple[int, ...] = (), eps: float = 1e-8, clip: float = 10.0) -> None:
        super().__init__()
        self.eps = eps
        self.clip = clip
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: torch.Tensor, decay: float = 1.0) -> None:
        """Merge a batch x [B, *shape] (any float dtype) into the running moments."""
        x = x.reshape(-1, *self.mean.shape).to(torch.float64)
        n = x.shape[0]
        if n == 0:
            return
        b_mean = x.mean(dim=0)
        b_var = x.var(dim=0, unbiased=False)
        self.merge(b_mean, b_var, float(n), decay)

    @torch.no_grad()
    def merge(self, b_mean: torch.Tensor, b_var: torch.Tensor, b_count: float, decay: float = 1.0) -> None:
        """Merge precomputed batch moments (population variance) of b_count samples.

        decay < 1 first discounts the history's weight (its count), so the statistics
        follow a drifting distribution, like the exponential moving moments of PopArt
        (van Hasselt et al. 2016, "Learning values across many orders of magnitude");
        decay = 1 is the exact merge."""
        if decay != 1.0:
            self.count.mul_(decay)
        tot = self.count + b_count
        delta = b_mean.to(torch.float64) - self.mean
        m2 = self.var * self.count + b_var.to(torch.float64) * b_count
        m2 = m2 + delta.square() * self.count * b_count / tot
        self.mean.add_(delta * b_count / tot)
        self.var.copy_(m2 / tot)
        self.count.copy_(tot)

    @property
    def std(self) -> torch.Tensor:
        return torch.sqrt(self.var + self.eps)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """(x - mean) / std clipped to ±clip, computed in x's dtype (float32 in practice)."""
        mean = self.mean.to(x.dtype)
        inv_std = torch.rsqrt(self.var + self.eps).to(x.dtype)
        return ((x - mean) * inv_std).clamp_(-self.clip, self.clip)


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
