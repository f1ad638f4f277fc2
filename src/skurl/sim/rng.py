"""Counter-based random numbers: every draw is a pure function of its coordinates.

A draw is identified by (seed, episode, sku_id, day, stream, k), where k counts the draws
made within one (sku, day, stream) (rejection samplers need several). Nothing is carried
from one draw to the next, so a SKU sees the same numbers whichever shard, thread, row order
or process simulates it, and skipping a draw (e.g. no order placed, no delay drawn) never
shifts any other draw.

More: docs/internals.md (sim/rng.py)."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S11 = np.uint64(11)
_S32 = np.uint64(32)
_S24 = np.uint64(24)
_MASK64 = (1 << 64) - 1
# Salts keep the seed, episode and sku levels of the key apart (arbitrary odd constants).
_SALT_SEED = 0x243F6A8885A308D3  # pi digits
_SALT_EPISODE = 0x13198A2E03707345
_TWO_POW_M53 = 1.0 / 9007199254740992.0
MAX_DAY = 2**31 - 1
MAX_K = 2**24 - 1


@njit(cache=True, inline="always")
def fmix64(x: np.uint64) -> np.uint64:
    """SplitMix64 finalizer: a bijection of 64-bit words with full avalanche."""
    x = (x ^ (x >> _S30)) * _M1
    x = (x ^ (x >> _S27)) * _M2
    return x ^ (x >> _S31)


def _fmix_py(x: int) -> int:
    x &= _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def run_key(seed: int, episode: int) -> np.uint64:
    """The key of one (run seed, episode); any Python ints (taken modulo 2^64)."""
    k = _fmix_py(_fmix_py((seed & _MASK64) ^ _SALT_SEED) + 0x9E3779B97F4A7C15)
    k = _fmix_py(_fmix_py(k ^ ((episode & _MASK64) ^ _SALT_EPISODE)) + 0x9E3779B97F4A7C15)
    return np.uint64(k)


@njit(cache=True, inline="always")
def sku_key(key: np.uint64, sku_id: np.int64) -> np.uint64:
    """The key of one SKU within a run/episode key (pass keys as np.uint64 from Python)."""
    x = np.uint64(key) ^ (np.uint64(sku_id) * _GOLDEN)
    return fmix64(fmix64(x) + _GOLDEN)


@njit(cache=True, parallel=True)
def sku_keys(key: np.uint64, sku_ids: np.ndarray) -> np.ndarray:
    """sku_key for every id (uint64 [N]); computed once per reset."""
    out = np.empty(sku_ids.shape[0], np.uint64)
    for i in prange(sku_ids.shape[0]):
        out[i] = sku_key(key, sku_ids[i])
    return out


@njit(cache=True, inline="always")
def draw_u64(skey: np.uint64, day: np.int64, stream: np.int64, k: np.int64) -> np.uint64:
    """64 random bits for draw k of (sku, day, stream); day < 2^31, stream < 256, k < 2^24."""
    ctr = (np.uint64(day) << _S32) | (np.uint64(stream) << _S24) | np.uint64(k)
    # np.uint64(skey): an int64-typed key would otherwise promote the xor to float64.
    x = np.uint64(skey) ^ (ctr * _GOLDEN)
    return fmix64(fmix64(x) + _GOLDEN)


@njit(cache=True, inline="always")
def uniform(skey: np.uint64, day: np.int64, stream: np.int64, k: np.int64) -> float:
    """A double strictly inside (0, 1) from the top 53 bits of draw k."""
    bits = draw_u64(skey, day, stream, k) >> _S11
    return (np.float64(bits) + 0.5) * _TWO_POW_M53


@njit(cache=True)
def uniforms(skey: np.uint64, day: np.int64, stream: np.int64, n: np.int64) -> np.ndarray:
    """Draws k = 0..n-1 of one (sku, day, stream) (for tests and the reference)."""
    out = np.empty(n, np.float64)
    for k in range(n):
        out[k] = uniform(skey, day, stream, k)
    return out
