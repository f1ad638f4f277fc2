"""`skurl bench shards`: how evenly a partition method balances the simulator workers.

    skurl bench shards --skus 200000 --workers 4 --steps 20 [--methods equal,round_robin_cost,lpt] [--json]

For each method the catalog is partitioned over `--workers` shards (catalog/partition.py)
and every shard's day is timed one shard after another in this one process, each with a
single simulator thread: the figure measures the partition, not contention between
workers on shared cores. Time is CPU seconds of the process (the one thread that works),
so other jobs on the machine slow the wall clock but hardly the figure. A worker's time is
its shard's summed step time over `--steps` days; the spread is slowest / fastest.

Registered under `skurl bench` by skurl.commands.bench_cmd (`register_bench(subparsers)`)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from skurl.commands.common import add_config_flags, config_from_args, print_json
from skurl.errors import UserError

if TYPE_CHECKING:
    from skurl.catalog import Catalog
    from skurl.catalog.partition import Method
    from skurl.config import SimConfig
    from skurl.sim.api import Obs

METHODS = ("equal", "round_robin_cost", "lpt")


def register_bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("shards", help="shard balance: per-worker simulator step time per partition method")
    add_config_flags(p)
    p.add_argument("--skus", type=int, default=None,
                   help="SKUs (default: catalog.skus where --config/--set gives it, else 200000)")
    p.add_argument("--workers", type=int, default=4, help="simulator workers (shards)")
    p.add_argument("--steps", type=int, default=20, help="days timed per shard")
    p.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated partition methods ({', '.join(METHODS)})")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run_shards)


def _methods(text: str) -> list[Method]:
    methods = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in methods if m not in METHODS]
    if not methods or bad:
        raise UserError(f"bench shards: --methods {text!r}, expected a comma-separated list of {', '.join(METHODS)}")
    return methods  # type: ignore[return-value]  # each checked to be in METHODS above


def shard_seconds(catalog: Catalog, sim: SimConfig, parts: list[np.ndarray], steps: int) -> list[float]:
    """CPU seconds of `steps` simulated days of each shard, shards timed in turn, days
    interleaved (day d of every shard before day d + 1), so that a slow spell of the
    machine falls on all shards alike."""
    from skurl.sim.env import VectorEnv

    envs = [VectorEnv(catalog.subset(rows), sim) for rows in parts]
    obs = [env.reset(seed=0) for env in envs]
    leads = [env.catalog.lead_time.astype(np.float64) for env in envs]
    orders = [np.zeros(env.num_skus) for env in envs]
    seconds = [0.0] * len(envs)
    for w, env in enumerate(envs):  # a warm-up day (numba compiles on a first run ever)
        obs[w] = env.step(_orders(obs[w], leads[w], orders[w])).obs
    for _ in range(steps):
        for w, env in enumerate(envs):
            day_orders = _orders(obs[w], leads[w], orders[w])
            start = time.process_time()
            obs[w] = env.step(day_orders).obs
            seconds[w] += time.process_time() - start
    return seconds


def _orders(obs: Obs, lead: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Order-up-to orders (a cheap, realistic policy: stock moves, pipelines fill)."""
    from skurl.sim.testing import order_up_to

    raw = obs.raw
    order_up_to(raw.on_hand, raw.pipeline, raw.backlog, raw.forecast, lead, out)
    return out


def run_shards(args: argparse.Namespace) -> int:
    from skurl.catalog import load_catalog
    from skurl.catalog.partition import partition, sku_cost
    from skurl.commands.bench_cmd import configured_skus

    args.skus = configured_skus(args, 200_000)
    if args.skus < 1 or args.workers < 1 or args.steps < 1:
        raise UserError(f"bench shards: --skus {args.skus}, --workers {args.workers} and --steps {args.steps} "
                        "must be >= 1")
    methods = _methods(args.methods)
    cfg = config_from_args(args, [f"sim.days={args.steps + 1}"])
    sim = dataclasses.replace(cfg.sim, threads=1)  # one thread per shard: the partition, not contention
    catalog = load_catalog(cfg.catalog, args.skus)
    cost = sku_cost(catalog)
    load_before = os.getloadavg()[0]
    results: dict[Method, dict[str, Any]] = {}
    for method in methods:
        parts = [p for p in partition(catalog, args.workers, method) if p.size]
        seconds = shard_seconds(catalog, sim, parts, args.steps)
        results[method] = {
            "worker_seconds": seconds,
            "worker_skus": [int(p.size) for p in parts],
            "worker_model_cost": [float(cost[p].sum()) for p in parts],
            "spread": max(seconds) / max(min(seconds), 1e-12),
        }
    out = {"bench": "shards", "skus": len(catalog), "workers": args.workers, "steps": args.steps,
           "methods": results, "load_average": max(load_before, os.getloadavg()[0]),
           "config": args.config or "embedded defaults"}
    if args.json:
        print_json(out)
        return 0
    print(f"bench shards: {out['skus']} SKUs over {args.workers} workers, {args.steps} days each, "
          f"one thread per shard, timed in turn (load average {out['load_average']:.1f})")
    for method, r in results.items():
        ms = ", ".join(f"{1e3 * s / args.steps:.1f}" for s in r["worker_seconds"])
        print(f"  {method:>16}: slowest/fastest {r['spread']:.3f}  (ms per day by worker: {ms}; "
              f"SKUs {min(r['worker_skus'])}..{max(r['worker_skus'])})")
    return 0
