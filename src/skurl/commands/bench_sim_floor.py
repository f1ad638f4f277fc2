"""The memory floor of a simulated day: how fast a day could be if it only moved its bytes.

A numba kernel over a VectorEnv's own arrays does, per SKU and day, only the memory
traffic the real step cannot avoid, with no simulation arithmetic: read the parameter
row; read and rewrite the state row (counts, pipeline), the forecast window, the metrics
row and one stock slot; write the SKU's feature row. Its SKU-steps/s bounds any kernel
with that array layout on this machine; `half` runs the same traffic on int32 state and
float32 metrics (the bound of a narrower layout). `skurl bench sim` measures it after its
own timed steps and prints bound_ratio; benchmarks/sim_memory_floor.py prints it alone.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numba
import numpy as np
from numba import njit, prange

if TYPE_CHECKING:
    from skurl.sim.env import VectorEnv

BLOCK = 512  # SKUs per parallel work item, like the real kernel's chunks
NAMES = ("par", "st", "stock", "slot", "forecast", "features", "acc")


@njit(cache=True, parallel=True)
def _touch_day(par, st, stock, slot, forecast, feats, acc, day):  # type: ignore[no-untyped-def]
    n = par.shape[0]
    for b in prange((n + BLOCK - 1) // BLOCK):
        for i in range(b * BLOCK, min((b + 1) * BLOCK, n)):
            s = 0.0
            for k in range(par.shape[1]):
                s += par[i, k]
            for k in range(st.shape[1]):
                st[i, k] += 1
            h = forecast.shape[1]
            for k in range(h - 1):
                forecast[i, k] = forecast[i, k + 1]
            forecast[i, h - 1] = s
            stock[slot[i]] += day
            for k in range(feats.shape[1]):
                feats[i, k] = s
            for k in range(acc.shape[1]):
                acc[i, k] += s


def floor_blocks(env: VectorEnv, half: bool = False) -> tuple[np.ndarray, ...]:
    """The env's arrays the floor kernel touches (overwritten: run it on an env whose
    state is no longer needed)."""
    from skurl.sim.state import S_SLOT_OFF

    p, s, out = env._params, env._state, env._out
    slot = s.st[:, S_SLOT_OFF].copy()  # each SKU's first stock slot
    st, acc = s.st, out.acc
    if half:
        st, acc = st.astype(np.int32), acc.astype(np.float32)
    return p.par, st, s.stock, slot, s.forecast, out.features, acc


def bytes_per_sku_step(blocks: tuple[np.ndarray, ...]) -> tuple[dict[str, int], int]:
    """Row widths and the bytes a SKU-day moves: rows read (par), read and written back
    (st, forecast, acc, one stock slot) and written (features: read for ownership, then
    written back)."""
    row = {name: int(a.strides[0]) if a.ndim == 2 else a.itemsize for name, a in zip(NAMES, blocks, strict=True)}
    moved = (row["par"] + 2 * (row["st"] + row["forecast"] + row["acc"]) + 2 * row["stock"] + row["slot"]
             + 2 * row["features"])
    return row, moved


def memory_floor(env: VectorEnv, steps: int, threads: int, half: bool = False) -> dict[str, Any]:
    """SKU-steps/s of the floor kernel on `env`'s arrays over `steps` days on `threads`
    numba threads (mean and median day), with the bytes it moves."""
    blocks = floor_blocks(env, half)
    before = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        _touch_day(*blocks, np.int64(0))  # compile (or load the cache) and warm the pages
        day_s = np.empty(steps)
        for day in range(steps):
            t0 = time.perf_counter()
            _touch_day(*blocks, np.int64(day))
            day_s[day] = time.perf_counter() - t0
    finally:
        numba.set_num_threads(before)
    row, moved = bytes_per_sku_step(blocks)
    n = env.num_skus
    rate = n * steps / float(day_s.sum())
    return {"skus": n, "steps": steps, "threads": threads, "half": half, "row_bytes": row,
            "bytes_per_sku_step": moved, "floor_sku_steps_per_s": rate,
            "median_floor_sku_steps_per_s": n / float(np.median(day_s)), "gb_per_s": rate * moved / 1e9}
