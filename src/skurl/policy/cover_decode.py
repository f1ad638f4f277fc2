"""The cover grid's greedy action and its order in one numba pass per SKU row.

LearnedPolicy's greedy step on a cover grid built the [B, A] unit table in numpy (the
order-up-to level of every safety factor), decoded the most probable quantity from it,
then built the chosen action's row again to order it (ActionGrid.orders_for). Here each
row's A orders are computed once, in registers, with ActionGrid.unit_table's arithmetic in
the same order (the same bits), the quantity's probability summed as
policy/quantity_decode.py does, and the chosen action's order kept."""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from skurl.policy.actions import ActionGrid
from skurl.policy.baselines import inventory_position, protection_moments
from skurl.sim.api import RawState


@njit(cache=True, inline="always")
def _np_max0(x: float) -> float:
    """np.maximum(0.0, x): NaN stays NaN."""
    return x if (x != x or x > 0.0) else 0.0


@njit(cache=True, parallel=True)
def _cover_greedy(logits: np.ndarray, values: np.ndarray, z0: np.ndarray, mean: np.ndarray, var: np.ndarray,
                  position: np.ndarray, lot: np.ndarray, has_lot: bool, idx: np.ndarray, units: np.ndarray) -> None:
    rows, actions = logits.shape
    for b in prange(rows):
        sigma = math.sqrt(var[b])
        q = np.empty(actions)
        p = np.empty(actions)
        top = -np.inf
        for a in range(actions):
            z = values[a] + z0[b]
            if z == -np.inf:  # the skip action orders nothing
                q[a] = 0.0
            else:
                level = _np_max0(math.ceil(mean[b] + z * sigma - 1e-9))
                u = _np_max0(level - position[b])
                if has_lot:
                    u = u + (lot[b] if u > 0.0 else 0.0)
                q[a] = u
            top = max(top, np.float64(logits[b, a]))
        total = 0.0
        for a in range(actions):
            p[a] = math.exp(np.float64(logits[b, a]) - top)
            total += p[a]
        for a in range(actions):
            p[a] = p[a] / total
        best, best_mass = np.int64(0), -1.0
        for a in range(actions):
            first = True
            for k in range(a):
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
        idx[b] = best
        units[b] = q[best]


def cover_greedy(grid: ActionGrid, raw: RawState, rows: slice, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(greedy action int64 [B], its order float64 [B], unclipped) of SKU rows `rows` of a
    bound cover grid, from their logits [B, A]."""
    cover = grid.bound_cover(raw)
    b = logits.shape[0]
    idx, units = np.empty(b, np.int64), np.empty(b)
    if grid.review_days > 1 and raw.day % grid.review_days:  # no order today: one quantity, 0
        return np.zeros(b, np.int64), np.zeros(b)
    mean, var = protection_moments(raw.forecast[rows], cover.cover_days[rows], cover.dist[rows],
                                   cover.dispersion[rows])
    sub = RawState(raw.on_hand[rows], raw.pipeline[rows], raw.backlog[rows], raw.forecast[rows], raw.day)
    lot = np.zeros(b) if cover.lot is None else np.ascontiguousarray(cover.lot[rows], np.float64)
    _cover_greedy(np.ascontiguousarray(logits, np.float32), np.ascontiguousarray(grid.values, np.float64),
                  np.ascontiguousarray(cover.z0[rows], np.float64), mean, var, inventory_position(sub), lot,
                  cover.lot is not None, idx, units)
    return idx, units
