"""Lossless day-to-day delta of observation matrices: the codec of lean EnvService
replies (rpc/feature_delta.py) and of rollout shards' observations in the store.

From one day to the next only ~10% of a feature matrix's elements change and ~80% are
zero, so a delta is a bitmask of the elements whose bits changed (compared as uint32, so
copies are bit-identical, -0.0 and NaN payloads included) and those elements' values.
A core codec: the learner's shard assembly (buffer/assemble.py) decodes with it.
"""

from __future__ import annotations

import numpy as np
from numba import njit

BASE_ZEROS = -1  # the base of a reset's delta: an all-zero matrix


@njit(cache=True, nogil=True)
def _encode(cur: np.ndarray, prev: np.ndarray, mask: np.ndarray, values: np.ndarray) -> int:
    """Set mask bits (little bit order) where cur != prev, append those cur values to
    `values`, update prev; returns the count. cur/prev: uint32 [M]; mask: uint8 [ceil(M/8)]."""
    k = 0
    m = cur.shape[0]
    for byte in range(mask.shape[0]):
        bits = 0
        base = byte * 8
        for b in range(min(8, m - base)):
            i = base + b
            v = cur[i]
            if v != prev[i]:
                bits |= 1 << b
                values[k] = v
                prev[i] = v
                k += 1
        mask[byte] = bits
    return k


@njit(cache=True, nogil=True)
def _decode(mask: np.ndarray, values: np.ndarray, cols: np.ndarray, out: np.ndarray) -> int:
    """out[i // D, cols[i % D]] = next value for every set bit i of mask (D = len(cols));
    returns how many values were used. out: uint32 [N, D'] with D' >= max(cols) + 1."""
    d = cols.shape[0]
    n = out.shape[0]
    k = 0
    for byte in range(mask.shape[0]):
        bits = mask[byte]
        if bits == 0:
            continue
        row, col = divmod(byte * 8, d)  # once per byte, then stepped: no division per bit
        for b in range(8):
            if bits & (1 << b):
                if row >= n or k >= values.shape[0]:
                    return -1
                out[row, cols[col]] = values[k]
                k += 1
            col += 1
            if col == d:
                row, col = row + 1, 0
    return k


# Set bits per byte value: counting the values of the rows a decode skips.
_POPCOUNT = np.array([bin(b).count("1") for b in range(256)], np.int64)


@njit(cache=True, nogil=True)
def _count_bits(mask: np.ndarray, start: int, end: int) -> int:
    """Set bits of mask (little bit order) in the bit range [start, end)."""
    n = 0
    while start < end and start & 7:
        n += (mask[start >> 3] >> (start & 7)) & 1
        start += 1
    while start + 8 <= end:
        n += _POPCOUNT[mask[start >> 3]]
        start += 8
    while start < end:
        n += (mask[start >> 3] >> (start & 7)) & 1
        start += 1
    return n


@njit(cache=True, nogil=True)
def _decode_rows(mask: np.ndarray, values: np.ndarray, select: np.ndarray, dim: int,
                 total_bits: int, out: np.ndarray) -> int:
    """`_decode` for the rows `select` (sorted, distinct) of a [N, dim] matrix only:
    out[j, c] = the value of element (select[j], c) where its bit is set. The values of
    the rows in between are skipped by counting their bits, and the rest of the mask is
    counted too, so the return value (values the mask calls for) checks as `_decode`'s."""
    pos = 0
    k = 0
    for j in range(select.shape[0]):
        first = select[j] * dim
        k += _count_bits(mask, pos, first)
        for c in range(dim):
            bit = first + c
            if (mask[bit >> 3] >> (bit & 7)) & 1:
                if k >= values.shape[0]:
                    return -1
                out[j, c] = values[k]
                k += 1
        pos = first + dim
    return k + _count_bits(mask, pos, total_bits)


def _frozen(a: np.ndarray, dtype: type) -> np.ndarray:
    """An aligned, C-ordered, read-only view (a copy only when unaligned) reinterpreted as
    `dtype`: one array type for the kernels whatever the source (received bytes, store
    buffers), so `warm_up` compiles every specialization they will ever need."""
    out: np.ndarray = np.require(a, requirements=["C", "A"]).view(dtype)
    out = out.view()
    out.flags.writeable = False
    return out


def mask_bytes(rows: int, dim: int) -> int:
    return (rows * dim + 7) // 8


class FeatureDeltaEncoder:
    """Server side: the features last sent to one session, and deltas against them."""

    def __init__(self, rows: int, dim: int) -> None:
        self.shape = (rows, dim)
        self._prev = np.zeros(rows * dim, np.uint32)
        self._mask = np.empty(mask_bytes(rows, dim), np.uint8)
        self._values = np.empty(rows * dim, np.uint32)
        self.day = BASE_ZEROS  # the day of the features held (-1: none sent yet)

    def reset(self) -> None:
        self._prev[:] = 0
        self.day = BASE_ZEROS

    def encode(self, features: np.ndarray, day: int) -> dict[str, np.ndarray]:
        """The delta tensors of `features` (float32 [N, D]) against the previous day's:
        features_mask uint8, features_values float32 [k], features_base int64 [1]."""
        if features.shape != self.shape or features.dtype != np.float32:
            raise ValueError(f"features {features.dtype}{list(features.shape)}, expected "
                             f"float32{list(self.shape)}")
        cur = np.ascontiguousarray(features).reshape(-1).view(np.uint32)
        base = self.day
        k = _encode(cur, self._prev, self._mask, self._values)
        self.day = int(day)
        return {"features_mask": self._mask, "features_values": self._values[:k].view(np.float32),
                "features_base": np.array([base], np.int64)}


# ------------------------------------------------------------------ rollouts in the store
# A decoupled collector's rollout shard holds its observations [T, N, D] the same way
# (day 0 against zeros, each day against the one before): ~1/13 of the bytes for zstd to
# pack and the learner to unpack, the largest part of both sides' store time otherwise.
PACKED = ("obs_mask", "obs_values", "obs_counts")


def encode_days(obs: np.ndarray) -> dict[str, np.ndarray]:
    """obs float32 [T, N, D] as obs_mask uint8 [T, ceil(N*D/8)], obs_values float32 [K],
    obs_counts int64 [T] (values per day)."""
    days, rows, dim = obs.shape
    enc = FeatureDeltaEncoder(rows, dim)
    masks = np.empty((days, mask_bytes(rows, dim)), np.uint8)
    counts = np.empty(days, np.int64)
    parts = []
    for d in range(days):
        delta = enc.encode(obs[d], d)
        masks[d] = delta["features_mask"]
        parts.append(delta["features_values"].copy())
        counts[d] = parts[-1].shape[0]
    values = np.concatenate(parts) if parts else np.zeros(0, np.float32)
    return {"obs_mask": masks, "obs_values": values, "obs_counts": counts}


def decode_days(arrays: dict[str, np.ndarray], rows: int, dim: int,
                select: np.ndarray | None = None) -> np.ndarray:
    """The obs [T, N, D] of `encode_days`' arrays, or with `select` (sorted distinct row
    indices) only those rows' [T, len(select), D] at a fraction of the cost (a learner
    that trains on a sample of SKUs); ValueError when the arrays do not fit."""
    masks, values, counts = (arrays[k] for k in PACKED)
    days = counts.shape[0]
    if masks.shape != (days, mask_bytes(rows, dim)) or values.dtype != np.float32:
        raise ValueError(f"packed obs: mask {list(masks.shape)} of {masks.dtype}, values of "
                         f"{values.dtype}; expected [{days}, {mask_bytes(rows, dim)}] for "
                         f"{rows} x {dim} features per day, float32 values")
    if counts.min(initial=0) < 0 or int(counts.sum()) != values.shape[0]:
        raise ValueError(f"packed obs: day counts sum to {int(counts.sum())}, "
                         f"{values.shape[0]} values")
    if select is None:
        cols = np.arange(dim, dtype=np.int64)
        n_out = rows

        def decode_day(mask: np.ndarray, day_values: np.ndarray, out: np.ndarray) -> int:
            return _decode(mask, day_values, cols, out)
    else:
        select = np.ascontiguousarray(select, np.int64)
        if select.ndim != 1 or (select.size and (select[0] < 0 or select[-1] >= rows
                                                  or (np.diff(select) <= 0).any())):
            raise ValueError(f"packed obs: rows to decode must be sorted, distinct and in [0, {rows})")
        n_out = select.size

        def decode_day(mask: np.ndarray, day_values: np.ndarray, out: np.ndarray) -> int:
            return _decode_rows(mask, day_values, select, dim, rows * dim, out)
    out = np.empty((days, n_out, dim), np.float32)
    view, bits, masks = out.view(np.uint32), _frozen(values, np.uint32), _frozen(masks, np.uint8)
    start = 0
    for d in range(days):  # each day is a delta against the day before (day 0: zeros)
        view[d] = view[d - 1] if d else 0
        end = start + int(counts[d])
        if decode_day(masks[d], bits[start:end], view[d]) != end - start:
            raise ValueError(f"packed obs: day {d}'s mask and {end - start} values disagree")
        start = end
    return out
