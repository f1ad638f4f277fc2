"""How fast could a simulated day be if it only moved its bytes? A memory-traffic floor for
`skurl bench sim` (issue 2's throughput target).

More: docs/benchmarks.md (benchmarks/sim_memory_floor.py)."""

from __future__ import annotations

import argparse
import json
import sys
import time

import numba
import numpy as np
from numba import njit, prange

from skurl.catalog import load_catalog
from skurl.config import load_config
from skurl.sim.env import VectorEnv

BLOCK = 512  # SKUs per parallel work item, like the real kernel's chunks


@njit(cache=True, parallel=True)
def _touch_day(par, st, stock, slot, forecast, feats, acc, day):
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


def _blocks(env: VectorEnv, half: bool) -> tuple[np.ndarray, ...]:
    p, s, out = env._params, env._state, env._out
    slot = s.st[:, 8].copy()  # S_SLOT_OFF: each SKU's first stock slot
    st, acc = s.st, out.acc
    if half:
        st, acc = st.astype(np.int32), acc.astype(np.float32)
    return p.par, st, s.stock, slot, s.forecast, out.features, acc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config")
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    ap.add_argument("--skus", type=int, default=1_000_000)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--half", action="store_true", help="int32 state and float32 metrics")
    args = ap.parse_args(argv)
    cfg = load_config(args.config, [*args.overrides, f"sim.days={args.steps}"])
    env = VectorEnv(load_catalog(cfg.catalog, args.skus), cfg.sim)
    env.reset(0, 0)
    numba.set_num_threads(args.threads)
    blocks = _blocks(env, args.half)
    _touch_day(*blocks, np.int64(0))  # compile and warm the pages
    t0 = time.perf_counter()
    for day in range(args.steps):
        _touch_day(*blocks, np.int64(day))
    dt = time.perf_counter() - t0
    row_bytes = {name: int(a.strides[0]) if a.ndim == 2 else a.itemsize
                 for name, a in zip(("par", "st", "stock", "slot", "forecast", "features", "acc"),
                                    blocks, strict=True)}
    # Bytes a SKU-day moves: rows read (par), read and written back (st, forecast, acc,
    # one stock slot) and written (features: read for ownership, then written back).
    moved = (row_bytes["par"] + 2 * (row_bytes["st"] + row_bytes["forecast"] + row_bytes["acc"])
             + 2 * row_bytes["stock"] + row_bytes["slot"] + 2 * row_bytes["features"])
    rate = env.num_skus * args.steps / dt
    print(json.dumps({"skus": env.num_skus, "steps": args.steps, "threads": args.threads,
                      "half": args.half, "row_bytes": row_bytes, "bytes_per_sku_step": moved,
                      "floor_sku_steps_per_s": rate, "gb_per_s": rate * moved / 1e9}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
