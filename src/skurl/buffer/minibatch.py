"""Shuffled minibatches over a flattened batch of transitions [T * N]."""

from __future__ import annotations

from collections.abc import Iterator

import torch


def seeded_generator(*keys: int) -> torch.Generator:
    """A torch.Generator whose seed is a pure function of integer keys (e.g. run seed,
    iteration, epoch), so resuming a run replays the same minibatches without saving
    generator state."""
    h = 0x9E3779B97F4A7C15
    for k in keys:
        h = _mix64(h ^ (int(k) & 0xFFFFFFFFFFFFFFFF))
    gen = torch.Generator()
    gen.manual_seed(h & 0x7FFFFFFFFFFFFFFF)
    return gen


def _mix64(x: int) -> int:
    """splitmix64 finalizer (Steele, Lea & Flood 2014, "Fast splittable PRNGs")."""
    x = (x + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 31)


def minibatch_indices(
    total: int, size: int, generator: torch.Generator, device: torch.device | str = "cpu"
) -> Iterator[torch.Tensor]:
    """Yield index tensors covering a random permutation of range(total) in chunks of
    `size` (the last one may be smaller; it is kept so every transition is used)."""
    perm = torch.randperm(total, generator=generator).to(device)
    for start in range(0, total, size):
        yield perm[start : start + size]
