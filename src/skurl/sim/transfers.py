"""Step 3b of a network day: lateral transfers between the stores of one upstream
(docs/networks.md, "Transfers"; the scalar reference sim/reference_network.py follows it).

A store whose cover (on hand / demand_mean, in days) exceeds `above` may give what it holds
over `target` days; one under `below` needs what brings it to `target` days. Receivers are
served lowest cover first, each from the senders highest cover first (ties: lower sku_id),
until it is full or nobody has more to give. Senders issue the units at once; they arrive
after the transfer lead time (0: on hand at once, as an arrival of today), at age 0.
Sibling sets hold a few stores: the O(k^2) scans allocate nothing inside the prange.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from skurl.config import SimConfig
from skurl.errors import ConfigError
from skurl.sim.jit import sku_jit
from skurl.sim.network_cols import N_GIVE, N_NEED, N_SENT
from skurl.sim.sku_ops import ipar, issue, slot_of
from skurl.sim.state import P_DEMAND_MEAN, P_SLOTS, S_ARRIVED, S_FAIL, S_ON_HAND, S_PIPE, S_SLOT_OFF


class TransferRule(NamedTuple):
    """sim.transfers as the kernel reads it (config/transfers.py)."""

    on: bool
    lead: np.int64
    cost: np.float64
    cost_share: np.float64
    above: np.float64
    target: np.float64
    below: np.float64


def transfer_rule(cfg: SimConfig) -> TransferRule:
    t = cfg.transfers
    return TransferRule(bool(t.enabled), np.int64(t.lead_time), np.float64(t.cost), np.float64(t.cost_share),
                        np.float64(t.above),
                        np.float64(t.target), np.float64(t.below))


@sku_jit
def _cover(st: np.ndarray, par: np.ndarray, c: np.int64) -> np.float64:
    """Days of demand on hand (inf at a zero demand mean)."""
    m = np.float64(par[c, P_DEMAND_MEAN])
    return np.float64(st[c, S_ON_HAND]) / m if m > 0.0 else np.float64(np.inf)


@sku_jit
def _pick(st: np.ndarray, par: np.ndarray, sku: np.ndarray, kids: np.ndarray, lo: np.int64, hi: np.int64,
          col: np.int64, lowest: bool) -> np.int64:
    """The row among kids[lo:hi] with st[., col] > 0 of lowest (else highest) cover, ties to
    the lower sku_id; -1 if none."""
    best = np.int64(-1)
    best_cover = 0.0
    for r in range(lo, hi):
        c = kids[r]
        if st[c, col] <= 0:
            continue
        cover = _cover(st, par, c)
        better = cover < best_cover if lowest else cover > best_cover
        if best < 0 or better or (cover == best_cover and sku[c] < sku[best]):
            best, best_cover = c, cover
    return best


@sku_jit
def _needs(st: np.ndarray, par: np.ndarray, kids: np.ndarray, lo: np.int64, hi: np.int64, rule: TransferRule,
           child_start: np.ndarray) -> np.int64:
    """N_GIVE, N_NEED and N_SENT = 0 of the stores among kids[lo:hi]; the number of senders
    times receivers (0: nothing to do)."""
    senders = np.int64(0)
    receivers = np.int64(0)
    for r in range(lo, hi):
        c = kids[r]
        st[c, N_GIVE] = 0
        st[c, N_NEED] = 0
        st[c, N_SENT] = 0
        if child_start[c + 1] > child_start[c] or st[c, S_FAIL] != 0:  # not a store, or isolated
            continue
        m = np.float64(par[c, P_DEMAND_MEAN])
        have = st[c, S_ON_HAND]
        keep = np.int64(math.ceil(rule.target * m))
        if np.float64(have) > rule.above * m:
            st[c, N_GIVE] = have - keep
            if have > keep:
                senders += 1
        elif np.float64(have) < rule.below * m:
            st[c, N_NEED] = keep - have
            receivers += 1
    return senders * receivers


@sku_jit
def transfer_among(par: np.ndarray, st: np.ndarray, stock: np.ndarray, sku: np.ndarray, kids: np.ndarray,
                   lo: np.int64, hi: np.int64, child_start: np.ndarray, rule: TransferRule, day: np.int64,
                   lifo: bool) -> None:
    """Transfers among the stores kids[lo:hi] (the locations of one upstream); N_SENT of each
    store holds what it sent (> 0) or minus what it received."""
    if _needs(st, par, kids, lo, hi, rule, child_start) == 0:
        return
    while True:
        to = _pick(st, par, sku, kids, lo, hi, N_NEED, True)
        if to < 0:
            break
        while st[to, N_NEED] > 0:
            frm = _pick(st, par, sku, kids, lo, hi, N_GIVE, False)
            if frm < 0:
                break
            q = min(st[to, N_NEED], st[frm, N_GIVE])
            st[to, N_NEED] -= q
            st[frm, N_GIVE] -= q
            st[to, N_SENT] -= q
            st[frm, N_SENT] += q
        if st[to, N_NEED] > 0:
            break  # nobody has more to give
    for r in range(lo, hi):
        c = kids[r]
        q = st[c, N_SENT]
        if q > 0:
            have = st[c, S_ON_HAND]
            issue(stock, st[c, S_SLOT_OFF], ipar(par, c, P_SLOTS), day, q, have, lifo)
            st[c, S_ON_HAND] = have - q
        elif q < 0 and rule.lead == 0:
            stock[st[c, S_SLOT_OFF] + slot_of(day, ipar(par, c, P_SLOTS))] -= q
            st[c, S_ON_HAND] -= q
            st[c, S_ARRIVED] -= q
        elif q < 0:
            st[c, S_PIPE + rule.lead - 1] -= q


def check_transfer_lead(cfg: SimConfig, pipeline: int) -> None:
    """ConfigError when transfers are on and their lead time does not fit the pipeline."""
    t = cfg.transfers
    if t.enabled and t.lead_time > pipeline:
        raise ConfigError(f"config key 'sim.transfers.lead_time': got {t.lead_time}, expected at most {pipeline} "
                          "(this catalog's longest lead time + supplier delay: the pipeline's length)")
