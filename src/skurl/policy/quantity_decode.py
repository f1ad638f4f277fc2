"""The greedy order quantity of a multiplier or cover grid, decoded in one numba pass.

policy.nets.most_likely_quantity's definition (the first action of the quantity with the
most probability, summed over every action ordering it), per row without the sort,
scatter and [B, A] float64 temporaries of its torch form, which cost a fifth of a network
rollout on the embedded catalog (docs/dcl.md). Each quantity's mass is summed in action
order, as the torch form's stable sort sums it; the softmax's exp may differ from torch's
in the last bit, so only near-exact ties between quantities can resolve otherwise."""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from skurl.sim.env import dynamic_blocks

BLOCK = 64  # rows per parallel work item; its scratch is allocated once


@njit(cache=True, inline="always")
def shifted_exps(logits: np.ndarray, b: np.int64, p: np.ndarray, actions: int) -> float:
    """p[a] = exp(logits[b, a] - max over a) for the first `actions` actions; returns their
    sum (the softmax's denominator, summed in action order)."""
    top = -np.inf
    for a in range(actions):
        top = max(top, np.float64(logits[b, a]))
    total = 0.0
    for a in range(actions):
        p[a] = math.exp(np.float64(logits[b, a]) - top)
        total += p[a]
    return total


@njit(cache=True, inline="always")
def most_likely_row(logits: np.ndarray, b: np.int64, q: np.ndarray, p: np.ndarray) -> np.int64:
    """The first action of row b's most probable quantity, q [A] its actions' quantities
    (p: scratch [A])."""
    actions = q.shape[0]
    total = shifted_exps(logits, b, p, actions)
    for a in range(actions):
        p[a] = p[a] / total
    best, best_mass = np.int64(0), -1.0
    for a in range(actions):
        first = True
        for k in range(a):  # a quantity is scored at its first action only
            if q[k] == q[a]:
                first = False
                break
        if not first:
            continue
        mass = 0.0
        for k in range(a, actions):
            if q[k] == q[a]:
                mass += p[k]
        if mass > best_mass:
            best, best_mass = np.int64(a), mass
    return best


@njit(cache=True, parallel=True)
def _decode(logits: np.ndarray, units: np.ndarray, out: np.ndarray) -> None:
    rows, actions = logits.shape
    for blk in prange((rows + BLOCK - 1) // BLOCK):
        q = np.empty(actions)
        p = np.empty(actions)
        for b in range(blk * BLOCK, min(rows, (blk + 1) * BLOCK)):
            for a in range(actions):
                q[a] = units[b, a]
            out[b] = most_likely_row(logits, np.int64(b), q, p)


def greedy_quantity(logits: np.ndarray, units: np.ndarray) -> np.ndarray:
    """Per row of logits [B, A] (float32) and the units each action orders [B, A]: the
    first action of the most probable quantity (int64 [B])."""
    logits = np.ascontiguousarray(logits, dtype=np.float32)
    units = np.ascontiguousarray(units, dtype=np.float64)
    if logits.shape != units.shape or logits.ndim != 2:
        raise ValueError(f"greedy_quantity: logits {logits.shape} and units {units.shape}, expected equal [B, A]")
    out = np.empty(logits.shape[0], np.int64)
    dynamic_blocks(_decode, logits, units, out)
    return out
