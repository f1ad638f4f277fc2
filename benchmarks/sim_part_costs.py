"""Where does a simulated day's time go? Each per-SKU piece of the step kernel, timed alone.

More: docs/benchmarks.md (benchmarks/sim_part_costs.py)."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from functools import partial

import numpy as np
from numba import njit

from skurl.catalog import load_catalog
from skurl.config import load_config
from skurl.sim.demand import sample_demand
from skurl.sim.env import VectorEnv
from skurl.sim.jit import sku_jit
from skurl.sim.rng import uniform
from skurl.sim.sku_ops import forecast_of, ipar, key_of, mean_on, write_features
from skurl.sim.state import P_DISPERSION, P_DIST, P_TREND
from skurl.sim.ziggurat import normal

STREAM = np.int64(1)  # any stream: the pieces' cost does not depend on it
FIRST_DAY = 10  # timed days start after the warm-up steps


# One SKU-day of each piece, (par, st, row i, day) -> a value the loop sums (so the work
# is not optimized away).
@njit(cache=True, inline="always")
def _mean(par: np.ndarray, st: np.ndarray, i: np.int64, d: np.int64) -> float:
    return mean_on(par, i, d)


@njit(cache=True, inline="always")
def _demand(par: np.ndarray, st: np.ndarray, i: np.int64, d: np.int64) -> float:
    return sample_demand(ipar(par, i, P_DIST), mean_on(par, i, d), np.float64(par[i, P_DISPERSION]),
                         key_of(st, i), d, STREAM)


@njit(cache=True, inline="always")
def _forecast(par: np.ndarray, st: np.ndarray, i: np.int64, d: np.int64) -> float:
    return forecast_of(par, i, key_of(st, i), d)


@njit(cache=True, inline="always")
def _uniform(par: np.ndarray, st: np.ndarray, i: np.int64, d: np.int64) -> float:
    return uniform(key_of(st, i), d, STREAM, np.int64(0))


@njit(cache=True, inline="always")
def _normal(par: np.ndarray, st: np.ndarray, i: np.int64, d: np.int64) -> float:
    return normal(key_of(st, i), d, STREAM, np.int64(0))[0]


@njit(cache=True, inline="always")
def _exp(par: np.ndarray, st: np.ndarray, i: np.int64, d: np.int64) -> float:
    return math.exp(np.float64(par[i, P_TREND]) * d)


SKU_DAY_PIECES = (("mean", _mean), ("demand", _demand), ("forecast", _forecast), ("uniform", _uniform),
                  ("normal", _normal), ("exp", _exp))


def _every_sku_day(piece: Callable) -> Callable:
    """A loop running `piece` for every SKU and day, summing its values. `piece` is a
    constant of the compiled loop (a closure), so numba inlines it: the loop is what a
    hand-written one would be. (Passed as an argument instead, it stayed a call and timed
    the normal draw at 17 ns instead of 6.)"""

    @sku_jit
    def loop(par: np.ndarray, st: np.ndarray, days: np.int64) -> float:
        acc = 0.0
        for d in range(FIRST_DAY, FIRST_DAY + days):
            for i in range(par.shape[0]):
                acc += piece(par, st, i, d)
        return acc

    return loop


@sku_jit
def _features(par: np.ndarray, st: np.ndarray, stock: np.ndarray, forecast: np.ndarray,
              feats: np.ndarray, npipe: np.int64, days: np.int64) -> float:
    for d in range(FIRST_DAY, FIRST_DAY + days):
        for i in range(par.shape[0]):
            write_features(par, st, stock, forecast, feats, npipe, i, d, False)
    return 0.0


def _best_ns(run: Callable[[], object], work: int, repeat: int) -> float:
    run()  # compile
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    return best / work * 1e9


def _step_ns(env: VectorEnv, days: int, repeat: int) -> float:
    orders = np.zeros(env.num_skus)
    best = math.inf
    for _ in range(repeat):
        env.reset(seed=1)
        t0 = time.perf_counter()
        for _ in range(days):
            env.step(orders)
        best = min(best, time.perf_counter() - t0)
    return best / (days * env.num_skus) * 1e9


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config")
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    ap.add_argument("--skus", type=int, default=10_000)
    ap.add_argument("--days", type=int, default=100, help="days per timed run")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    cfg = load_config(args.config, [*args.overrides, f"sim.days={FIRST_DAY + args.days + 1}",
                                    "sim.threads=1"])
    env = VectorEnv(load_catalog(cfg.catalog, args.skus), cfg.sim)
    env.reset(seed=0)
    for _ in range(FIRST_DAY):  # realistic stock, pipeline and forecasts for the feature rows
        env.step(np.full(env.num_skus, 1.0))
    p, s, out = env._params, env._state, env._out
    days = np.int64(args.days)
    work = args.days * env.num_skus
    npipe = np.int64(env.layout.pipeline)
    pieces: dict[str, Callable[[], object]] = {
        name: partial(_every_sku_day(piece), p.par, s.st, days) for name, piece in SKU_DAY_PIECES}
    pieces["features"] = partial(_features, p.par, s.st, s.stock, s.forecast, out.features, npipe, days)
    ns = {name: _best_ns(run, work, args.repeat) for name, run in pieces.items()}
    ns["full_step"] = _step_ns(env, min(args.days, cfg.sim.days - 1), args.repeat)
    if args.json:
        print(json.dumps({"skus": env.num_skus, "days": args.days, "ns_per_sku": ns}))
    else:
        print(f"{env.num_skus} SKUs, best of {args.repeat} runs of {args.days} days, 1 thread, ns per SKU-day:")
        for name, value in ns.items():
            print(f"  {name:10s} {value:7.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
