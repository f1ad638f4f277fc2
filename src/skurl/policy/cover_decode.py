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
from skurl.policy.quantity_decode import BLOCK, most_likely_row, shifted_exps
from skurl.sim.api import RawState
from skurl.sim.env import dynamic_blocks


@njit(cache=True, inline="always")
def _np_max0(x: float) -> float:
    """np.maximum(0.0, x): NaN stays NaN."""
    return x if (x != x or x > 0.0) else 0.0


RISING, RUNS, MIXED = 0, 1, 2  # a row's orders: strictly rising, non-decreasing, neither


@njit(cache=True, inline="always")
def _row_orders(values: np.ndarray, z0: float, mean: float, sigma: float, position: float, lot: float,
                has_lot: bool, scale: np.ndarray, has_scale: bool, q: np.ndarray) -> int:
    """Orders of every action (ActionGrid.unit_table's arithmetic; a joint grid's lot is
    round(scale[a] x lot), as ActionGrid._lots), and their shape: RISING (every quantity is
    one action's), RUNS (each quantity's actions are one run of neighbours) or MIXED."""
    rising, runs = True, True
    for a in range(values.shape[0]):
        z = values[a] + z0
        if z == -np.inf:  # the skip action orders nothing
            u = 0.0
        else:
            u = _np_max0(_np_max0(np.ceil(mean + z * sigma - 1e-9)) - position)
            if has_lot:
                lot_a = np.floor(scale[a] * lot + 0.5) if has_scale else lot
                u = u + (lot_a if u > 0.0 else 0.0)
        q[a] = u
        if a > 0 and not q[a] > q[a - 1]:
            rising = False
            runs = runs and q[a] == q[a - 1]  # NaN ends both
    return RISING if rising else (RUNS if runs else MIXED)


@njit(cache=True, inline="always")
def _most_likely_run(logits: np.ndarray, b: np.int64, q: np.ndarray, p: np.ndarray) -> np.int64:
    """quantity_decode.most_likely_row where each quantity is one run of neighbouring
    actions: the same exps, sums and comparisons in the same order, in one pass over the
    runs instead of a search over all earlier actions per action."""
    actions = q.shape[0]
    total = shifted_exps(logits, b, p, actions)
    best, best_mass = np.int64(0), -1.0
    start, mass = np.int64(0), 0.0
    for a in range(actions):
        mass += p[a] / total
        if a + 1 == actions or q[a + 1] != q[start]:  # the run of q[start] ends at a
            if mass > best_mass:
                best, best_mass = start, mass
            start, mass = np.int64(a + 1), 0.0
    return best


@njit(cache=True, parallel=True)
def _cover_greedy(logits: np.ndarray, values: np.ndarray, z0: np.ndarray, mean: np.ndarray, var: np.ndarray,
                  position: np.ndarray, lot: np.ndarray, has_lot: bool, scale: np.ndarray, has_scale: bool,
                  idx: np.ndarray, units: np.ndarray) -> None:
    rows, actions = logits.shape
    for blk in prange((rows + BLOCK - 1) // BLOCK):
        q = np.empty(actions)
        p = np.empty(actions)
        for b in range(blk * BLOCK, min(rows, (blk + 1) * BLOCK)):
            shape = _row_orders(values, z0[b], mean[b], math.sqrt(var[b]), position[b], lot[b], has_lot, scale,
                                has_scale, q)
            if shape == RISING:
                # one action per quantity: the most probable quantity is the largest logit's
                # (exp is strictly increasing on distinct float32 logits), the first on ties
                best = np.int64(0)
                for a in range(1, actions):
                    if logits[b, a] > logits[b, best]:
                        best = np.int64(a)
            elif shape == RUNS:
                best = _most_likely_run(logits, np.int64(b), q, p)
            else:
                best = most_likely_row(logits, np.int64(b), q, p)
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
    mean, var, position = cover.moments(raw, rows)
    lot = np.zeros(b) if cover.lot is None else np.ascontiguousarray(cover.lot[rows], np.float64)
    scale = np.ones(grid.n) if grid.lot_scale is None else np.ascontiguousarray(grid.lot_scale, np.float64)
    dynamic_blocks(_cover_greedy, np.ascontiguousarray(logits, np.float32),
                   np.ascontiguousarray(grid.values, np.float64), np.ascontiguousarray(cover.z0[rows], np.float64),
                   mean, var, position, lot, cover.lot is not None, scale, grid.lot_scale is not None,
                   idx, units)
    return idx, units
