"""The observation statistics of a policy: a `torch.nn.Module` with float64 buffers, so it
travels inside the model's `state_dict` (a published or exported model carries its
observation normalization) and survives a checkpoint round trip bit for bit. The learner
updates it (learn/); the policy only applies it.
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
