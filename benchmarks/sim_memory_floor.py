"""How fast could a simulated day be if it only moved its bytes? A memory-traffic floor for
`skurl bench sim` (issue 2's throughput target).

It builds the real simulator for the default synthetic catalog (or --config/--set) and runs
skurl.commands.bench_sim_floor's kernel over the env's own arrays: per SKU and day only the
memory traffic the real step cannot avoid, with no simulation arithmetic. The SKU-steps/s it
reaches is an upper bound for any kernel with today's array layout on this machine. `--half`
runs the same traffic on blocks of half the width (int32 state, float32 metrics): the bound
for a layout redesign that keeps the observation contract. `skurl bench sim` measures the
same floor in its own run and prints bound_ratio.

More: docs/benchmarks.md (benchmarks/sim_memory_floor.py)."""

from __future__ import annotations

import argparse
import json
import sys

from skurl.catalog import load_catalog
from skurl.commands.bench_sim_floor import memory_floor
from skurl.config import load_config
from skurl.sim.env import VectorEnv


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
    out = memory_floor(env, args.steps, args.threads, args.half)
    out.pop("median_floor_sku_steps_per_s")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
