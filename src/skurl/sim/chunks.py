"""Work items of the parallel kernels: chunks of consecutive rows and the groups they own.

The kernels run chunks in parallel and the rows of a chunk serially. A substitution group
whose rows all fall inside one chunk ("local") is settled by that chunk right after its
rows' own demand, while those rows are still in cache; chunk boundaries are moved so that
they never cut a compact group. Groups spread over many rows (e.g. a shuffled shard) are
"global" and settled in a second parallel pass. Either way each group is settled by one
thread from its own rows, so the split changes no result.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

CHUNK = 512  # rows per work item: ~0.4 MB of state, so a chunk's rows stay in L2


class Chunks(NamedTuple):
    starts: np.ndarray  # int64 [C + 1], rows of chunk c: starts[c]..starts[c+1]-1
    group_starts: np.ndarray  # int64 [C + 1], local groups of chunk c in local_groups
    local_groups: np.ndarray  # int64 [GL], group indices (into the group CSR)
    global_groups: np.ndarray  # int64 [GG]


def _row_spans(group_start: np.ndarray, group_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first row, last row) of every group."""
    if group_rows.size == 0:
        empty = np.zeros(0, np.int64)
        return empty, empty
    lo = np.minimum.reduceat(group_rows, group_start[:-1])
    hi = np.maximum.reduceat(group_rows, group_start[:-1])
    return lo.astype(np.int64), hi.astype(np.int64)


def chunk_layout(n: int, group_start: np.ndarray, group_rows: np.ndarray,
                 chunk: int = CHUNK) -> Chunks:
    lo, hi = _row_spans(group_start, group_rows)
    local = (hi - lo) < chunk // 2
    # A boundary before row b is forbidden when a local group has rows on both sides:
    # lo < b <= hi. Mark those positions with a difference array.
    blocked = np.zeros(n + 2, np.int64)
    np.add.at(blocked, lo[local] + 1, 1)
    np.add.at(blocked, hi[local] + 1, -1)
    allowed = np.flatnonzero(np.cumsum(blocked)[: n + 1] == 0)  # positions 0..n, sorted
    starts = [0]
    while starts[-1] < n:
        # The first allowed boundary at least `chunk` rows on; local groups span less
        # than chunk/2 rows, so one always exists within 1.5 chunks.
        k = int(np.searchsorted(allowed, starts[-1] + chunk))
        starts.append(int(allowed[k]) if k < allowed.size else n)
    starts_arr = np.asarray(starts, np.int64)
    local_ids = np.flatnonzero(local).astype(np.int64)
    owner = np.searchsorted(starts_arr, lo[local_ids], side="right") - 1
    order = np.argsort(owner, kind="stable")
    local_ids = local_ids[order]
    counts = np.bincount(owner, minlength=starts_arr.size - 1)
    group_starts = np.zeros(starts_arr.size, np.int64)
    np.cumsum(counts, out=group_starts[1:])
    return Chunks(starts_arr, group_starts, local_ids, np.flatnonzero(~local).astype(np.int64))
