"""Shuffled minibatches over a flattened batch of transitions [T * N] (PreparedBatch:
the learner's columns on its device), gathered into reused buffers (BlockGather)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from typing import overload

import torch

# Rows gathered at once when shuffling an epoch: whole minibatches, one index_select per
# column per block instead of one gather per column per minibatch (bounds the copy).
SHUFFLE_BLOCK_ROWS = 65_536


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


class BlockGather:
    """Row gathers into buffers allocated once and reused across blocks, epochs and
    updates of the same shapes: a fresh 18 MB block per gather cost its page faults
    every time (index_select into `out=` writes the same values)."""

    def __init__(self) -> None:
        self._buffers: list[torch.Tensor | None] = []

    def gather(self, columns: list[torch.Tensor | None], index: torch.Tensor, rows: int) -> list[torch.Tensor | None]:
        """columns[k][index] for each column (None stays None), as views of buffers of
        `rows` rows (the largest block); valid until the next call."""
        self._fit(columns, rows)
        out: list[torch.Tensor | None] = []
        for col, buf in zip(columns, self._buffers, strict=True):
            if col is None or buf is None:
                out.append(None)
                continue
            view = buf[: index.numel()]
            torch.index_select(col, 0, index, out=view)
            out.append(view)
        return out

    def _fit(self, columns: list[torch.Tensor | None], rows: int) -> None:
        def fits(col: torch.Tensor | None, buf: torch.Tensor | None) -> bool:
            if col is None or buf is None:
                return col is None and buf is None
            return (buf.shape[0] >= rows and buf.shape[1:] == col.shape[1:] and buf.dtype == col.dtype
                    and buf.device == col.device)

        if len(self._buffers) == len(columns) and all(fits(c, b) for c, b in zip(columns, self._buffers, strict=True)):
            return
        self._buffers = [None if c is None else torch.empty((rows, *c.shape[1:]), dtype=c.dtype, device=c.device)
                         for c in columns]


@dataclass
class PreparedBatch:
    """An iteration's training data on the device, flattened to [T * N]."""

    obs: torch.Tensor  # normalized float32 [B, D]
    actions: torch.Tensor  # int64 [B]
    old_logp: torch.Tensor
    advantages: torch.Tensor  # normalized
    returns: torch.Tensor
    old_values: torch.Tensor
    weight: torch.Tensor | None = None  # truncated pi_prox / mu of a stale batch (None: 1)

    def take(self, index: torch.Tensor) -> PreparedBatch:
        """The rows `index` of every column (copies)."""
        return PreparedBatch(*(_maybe(getattr(self, f.name), lambda c: c.index_select(0, index)) for f in fields(self)))

    def rows(self, start: int, stop: int) -> PreparedBatch:
        """Rows [start, stop) of every column (views)."""
        return PreparedBatch(*(_maybe(getattr(self, f.name), lambda c: c[start:stop]) for f in fields(self)))


@overload
def _maybe(column: torch.Tensor, op: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor: ...
@overload
def _maybe(column: None, op: Callable[[torch.Tensor], torch.Tensor]) -> None: ...
def _maybe(column: torch.Tensor | None, op: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor | None:
    return None if column is None else op(column)


def shuffled_minibatches(batch: PreparedBatch, perm: torch.Tensor, size: int,
                         gather: BlockGather | None = None) -> Iterator[PreparedBatch]:
    """Minibatches perm[0:size], perm[size:2 size], ... of `batch` (the last may be
    smaller), gathered SHUFFLE_BLOCK_ROWS rows at a time so that each is a contiguous view
    (into `gather`'s reused buffers when given: each minibatch is valid until the next)."""
    per_block = max(1, SHUFFLE_BLOCK_ROWS // size) * size
    columns = [getattr(batch, f.name) for f in fields(batch)]
    for start in range(0, perm.numel(), per_block):
        index = perm[start:start + per_block]
        block = batch.take(index) if gather is None else PreparedBatch(*gather.gather(columns, index, per_block))  # type: ignore[arg-type]  # None where the column is None
        rows = block.actions.numel()
        for first in range(0, rows, size):
            yield block.rows(first, min(first + size, rows))
