"""State cloning: copy chosen SKU rows of an env into a new env, to replay their futures.

A clone row holds a copy of its source row's state and keeps the source SKU's random-stream
key, so stepped with the source's orders it replays the source's trajectory bit for bit,
and clones under different orders see the same demand (common random numbers); another
(seed, episode) key gives an independent future (a replication). `whole_groups` brings
each cloned row's substitution group along (group_expansion), one group per clone, so a
grouped SKU's clone replays its group too; on a catalog with supply networks each cloned
row brings its whole network (network_expansion, clone_network). More: docs/internals.md
(sim/clone.py)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit, prange

from skurl.sim.network import Network
from skurl.sim.rng import run_key, sku_key
from skurl.sim.state import P_GROUPED, P_SLOTS, S_KEY, S_SLOT_OFF, Outputs, Params, State


@njit(cache=True, parallel=True)
def _copy_rows(rows: np.ndarray, keys: np.ndarray, src_par: np.ndarray, src_st: np.ndarray,
               src_stock: np.ndarray, src_forecast: np.ndarray, src_failed: np.ndarray,
               src_features: np.ndarray, dst_par: np.ndarray, dst_st: np.ndarray,
               dst_stock: np.ndarray, dst_forecast: np.ndarray, dst_failed: np.ndarray,
               dst_features: np.ndarray) -> None:
    for j in prange(rows.shape[0]):
        i = rows[j]
        grouped = dst_par[j, P_GROUPED]  # the clone env's own grouping
        for k in range(src_par.shape[1]):
            dst_par[j, k] = src_par[i, k]
        dst_par[j, P_GROUPED] = grouped
        base = dst_st[j, S_SLOT_OFF]
        src_base = src_st[i, S_SLOT_OFF]
        for k in range(np.int64(src_par[i, P_SLOTS])):
            dst_stock[base + k] = src_stock[src_base + k]
        for k in range(src_st.shape[1]):
            dst_st[j, k] = src_st[i, k]
        dst_st[j, S_SLOT_OFF] = base
        dst_st[j, S_KEY] = keys[j]
        for k in range(src_forecast.shape[1]):
            dst_forecast[j, k] = src_forecast[i, k]
        dst_failed[j] = src_failed[i]
        for k in range(src_features.shape[1]):
            dst_features[j, k] = src_features[i, k]


def copy_rows(src_p: Params, src_s: State, src_out: Outputs, rows: np.ndarray, keys: np.ndarray,
              dst_p: Params, dst_s: State, dst_out: Outputs) -> None:
    """Row j of dst := row rows[j] of src (parameters, state, stock slots, forecasts,
    features), with random-stream key keys[j]. dst is a fresh env of rows' catalog rows
    with src's widths (its slot offsets, zero metrics and totals are kept)."""
    if dst_s.st.shape[1] != src_s.st.shape[1] or dst_out.features.shape[1] != src_out.features.shape[1]:
        raise ValueError("copy_rows: the two envs' layouts differ (expected the source's widths)")
    _copy_rows(rows, keys, src_p.par, src_s.st, src_s.stock, src_s.forecast, src_s.failed,
               src_out.features, dst_p.par, dst_s.st, dst_s.stock, dst_s.forecast, dst_s.failed,
               dst_out.features)


class Expansion(NamedTuple):
    """Rows of a whole-group clone env."""

    src: np.ndarray  # int64 [R]: the source row of every clone env row
    heads: np.ndarray  # int64 [M]: the clone env row of each requested clone
    owner: np.ndarray  # int64 [R]: the requested clone each row belongs to
    group: np.ndarray  # int64 [R]: its substitution group in the clone env (-1: none)
    parent: np.ndarray | None = None  # int64 [R]: its upstream's clone env row (-1: a supplier); None: no networks


def group_expansion(group_start: np.ndarray, group_rows: np.ndarray, n: int, rows: np.ndarray) -> Expansion:
    """Clone `rows` [M] of an env of n rows whose groups are the CSR (group_start,
    group_rows): each grouped row brings its group's members (contiguous, in the group's
    order), as group j of the clone env for clone j; an ungrouped row comes alone."""
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    alone = np.arange(rows.size, dtype=np.int64)
    if group_rows.size == 0:
        return Expansion(rows, alone, alone, np.full(rows.size, -1, np.int64))
    sizes = np.diff(group_start)
    group_of = np.full(n, -1, np.int64)
    group_of[group_rows] = np.repeat(np.arange(sizes.size, dtype=np.int64), sizes)
    rank = np.zeros(n, np.int64)  # a member's place in its group
    rank[group_rows] = np.arange(group_rows.size, dtype=np.int64) - np.repeat(group_start[:-1], sizes)
    g = group_of[rows]
    grouped = g >= 0
    g0 = np.maximum(g, 0)
    size = np.where(grouped, sizes[g0], 1)
    offsets = np.cumsum(size) - size
    owner = np.repeat(alone, size)
    in_group = grouped[owner]
    pos = np.where(in_group, group_start[g0][owner] + np.arange(owner.size) - offsets[owner], 0)
    src = np.where(in_group, group_rows[pos], rows[owner])
    heads = offsets + np.where(grouped, rank[rows], 0)
    return Expansion(src.astype(np.int64), heads.astype(np.int64), owner, np.where(in_group, owner, -1))


@njit(cache=True, parallel=True)
def _keys_of(run_keys: np.ndarray, which: np.ndarray, sku_ids: np.ndarray) -> np.ndarray:
    out = np.empty(sku_ids.shape[0], np.int64)
    for j in prange(sku_ids.shape[0]):
        out[j] = np.int64(sku_key(run_keys[which[j]], sku_ids[j]))
    return out


def clone_keys(src_keys: np.ndarray, sku_ids: np.ndarray, seed: int,
               episodes: np.ndarray | None) -> np.ndarray:
    """int64 keys (as stored in S_KEY) of the clone rows: the source rows' own keys
    `src_keys` where `episodes` is None, else the key of (seed, episodes[j], sku_ids[j])."""
    if episodes is None:
        return np.ascontiguousarray(src_keys, dtype=np.int64)
    unique, which = np.unique(episodes, return_inverse=True)
    run_keys = np.array([run_key(seed, int(e)) for e in unique], dtype=np.uint64)
    return _keys_of(run_keys, which.astype(np.int64).ravel(), np.ascontiguousarray(sku_ids, dtype=np.int64))


def network_expansion(net: Network, n: int, rows: np.ndarray) -> Expansion:
    """Clone `rows` [M] of an env of n rows whose supply networks are `net`: each brings its
    whole network along (its rows in the network's day order, upstream first) as network j
    of the clone env for clone j, since a store without its DC (or a DC without its stores)
    is another system. `parent` is each clone row's upstream among the clone env's rows."""
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    sizes = np.diff(net.net_start)
    net_of = np.empty(n, np.int64)
    net_of[net.net_rows] = np.repeat(np.arange(sizes.size, dtype=np.int64), sizes)
    rank = np.empty(n, np.int64)  # a row's place in its network's day order
    rank[net.net_rows] = np.arange(n, dtype=np.int64) - np.repeat(net.net_start[:-1], sizes)
    k = net_of[rows]
    size = sizes[k]
    offsets = np.cumsum(size) - size
    owner = np.repeat(np.arange(rows.size, dtype=np.int64), size)
    src = net.net_rows[net.net_start[k][owner] + np.arange(owner.size) - offsets[owner]]
    up = net.parent[src]
    parent = np.where(up >= 0, offsets[owner] + rank[np.maximum(up, 0)], -1)
    return Expansion(src.astype(np.int64), (offsets + rank[rows]).astype(np.int64), owner,
                     np.full(src.size, -1, np.int64), parent.astype(np.int64))


def clone_network(net: Network, ex: Expansion, sku_id: np.ndarray) -> Network:
    """The topology of the clone env of network_expansion `ex` (source rows ex.src, whose
    sku_ids are `sku_id`): one network per clone, its rows in the source's day order, the
    children of a row in ascending sku_id (as make_network orders them, so allocation ties
    and sums run in the source's order), and today's owed units of the source rows."""
    if ex.parent is None:
        raise ValueError("clone_network: expected a network_expansion (its parent rows)")
    r = ex.src.size
    first = np.ones(r, bool)
    first[1:] = ex.owner[1:] != ex.owner[:-1]
    kids = np.flatnonzero(ex.parent >= 0)
    kids = kids[np.lexsort((sku_id[ex.src[kids]], ex.parent[kids]))]
    child_start = np.concatenate([[0], np.cumsum(np.bincount(ex.parent[kids], minlength=r))])
    return Network(ex.parent.copy(), np.append(np.flatnonzero(first), r).astype(np.int64),
                   np.arange(r, dtype=np.int64), child_start.astype(np.int64), kids.astype(np.int64),
                   net.echelon[ex.src].copy(), net.owed[ex.src].copy(), net.ship_cost[ex.src].copy())
