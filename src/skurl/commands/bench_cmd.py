"""`skurl bench ...`: throughput benchmarks of the loop's parts, one subcommand each.

    skurl bench sim --skus 1000000 --steps 100 [--threads K] [--json]

`bench sim` also runs the memory floor of its layout on the env's own arrays after its
timed steps (commands/bench_sim_floor.py) and prints bound_ratio, its rate over the floor's.
Without --skus it simulates catalog.skus where --config or --set gives it, else 1M SKUs.

`bench sim` lives here; other parts add theirs by listing a module in BENCH_MODULES that
defines `register_bench(subparsers)` (e.g. skurl.commands.bench_train adds collect/learn).
"""

from __future__ import annotations

import argparse
import importlib
import os
import resource
import sys
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from skurl.commands.common import add_config_flags, config_from_args, print_json
from skurl.errors import UserError

if TYPE_CHECKING:
    from skurl.catalog.schema import Catalog
    from skurl.config import SimConfig
    from skurl.sim.env import VectorEnv

# Modules adding `skurl bench` subcommands (skipped while they do not exist).
BENCH_MODULES = ("skurl.commands.bench_train", "skurl.commands.bench_shards", "skurl.commands.bench_modes",
                 "skurl.commands.bench_sync", "skurl.commands.bench_rollouts",
                 "skurl.commands.bench_recommend", "skurl.commands.bench_stages",
                 "skurl.commands.bench_labelling")


def register(sub: argparse._SubParsersAction) -> None:
    bench = sub.add_parser("bench", help="throughput benchmarks (sim, collect, learn)")
    cmds = bench.add_subparsers(dest="bench_command", required=True, parser_class=type(bench))
    sim = cmds.add_parser("sim", help="simulator throughput in SKU-steps per second")
    add_config_flags(sim)
    sim.add_argument("--skus", type=int, default=None,
                     help="SKUs (default: catalog.skus where --config/--set gives it, else 1000000)")
    sim.add_argument("--steps", type=int, default=100, help="days simulated (timed)")
    sim.add_argument("--threads", type=int, default=None, help="simulator threads (default sim.threads; 0 = all cores)")
    sim.add_argument("--json", action="store_true", help="print one JSON object")
    sim.set_defaults(func=run_sim)
    for name in BENCH_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        module.register_bench(cmds)


def peak_rss_mb() -> float:
    """Peak resident set size of this process (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def configured_skus(args: argparse.Namespace, default: int) -> int:
    """--skus when given, else catalog.skus when the --config file or a --set gives it
    (a bench must simulate the catalog it is told to), else the bench's `default`."""
    from skurl.config import Config, refuse_moved
    from skurl.config.loader import apply_overrides, read_yaml

    if args.skus is not None:
        return int(args.skus)
    data = read_yaml(args.config) if args.config else {}
    refuse_moved(data, list(args.overrides))
    data = apply_overrides(data, list(args.overrides), Config)
    catalog = data.get("catalog")
    if isinstance(catalog, dict) and "skus" in catalog:
        return int(config_from_args(args).catalog.skus)
    return default


def run_sim(args: argparse.Namespace) -> int:
    from skurl.catalog import load_catalog
    from skurl.commands.bench_sim_floor import memory_floor
    from skurl.sim import VectorEnv

    args.skus = configured_skus(args, 1_000_000)
    if args.skus < 1 or args.steps < 1:
        raise UserError(f"bench sim: --skus {args.skus} and --steps {args.steps} must be >= 1")
    extra = [f"sim.days={args.steps}"]
    if args.threads is not None:
        if args.threads < 0:
            raise UserError(f"bench sim: --threads {args.threads}, expected >= 0 (0 = all cores)")
        extra.append(f"sim.threads={args.threads}")
    cfg = config_from_args(args, extra)
    t0 = time.perf_counter()
    catalog = load_catalog(cfg.catalog, args.skus)
    t_catalog = time.perf_counter() - t0
    env = VectorEnv(catalog, cfg.sim)
    if args.threads is not None and args.threads > env.threads:  # stderr: --json output stays one object
        print(f"bench sim: --threads {args.threads} capped at {env.threads} (the cores numba may use, "
              "NUMBA_NUM_THREADS)", file=sys.stderr)
    t_compile = _warm_up(catalog, cfg.sim)
    load_before = os.getloadavg()[0]
    step_s, t_policy, cpu_sim, t_reset = timed_steps(env, args.steps)
    out = _sim_report(args, env, float(step_s.sum()), t_policy, t_catalog, t_reset)
    out["warm_up_s"] = t_compile
    # On a shared machine wall time depends on other load; CPU seconds (all threads) do
    # not, so both are reported, with the load average for context. The median step is
    # robust to bursts of other load, which inflate the mean (session 14, a shared VM: the
    # same code's step time varied up to 1.7x between runs; a burst moves the mean, the
    # median only when it covers most steps).
    out["sku_steps_per_cpu_s"] = env.num_skus * args.steps / max(cpu_sim, 1e-9)
    median_s = float(np.median(step_s))
    out["median_ms_per_step"] = median_s * 1e3
    out["median_sku_steps_per_s"] = env.num_skus / max(median_s, 1e-12)
    floor = memory_floor(env, args.steps, env.threads)  # overwrites the env's state: last
    out["floor_sku_steps_per_s"] = floor["floor_sku_steps_per_s"]
    out["median_floor_sku_steps_per_s"] = floor["median_floor_sku_steps_per_s"]
    out["floor_bytes_per_sku_step"] = floor["bytes_per_sku_step"]
    out["bound_ratio"] = out["sku_steps_per_s"] / floor["floor_sku_steps_per_s"]
    out["median_bound_ratio"] = out["median_sku_steps_per_s"] / floor["median_floor_sku_steps_per_s"]
    out["load_average"] = max(load_before, os.getloadavg()[0])
    if args.json:
        print_json(out)
    else:
        print(f"bench sim: {out['skus']} SKUs x {out['steps']} steps, {out['threads']} threads, "
              f"obs_dim {out['obs_dim']}: {out['sku_steps_per_s'] / 1e6:.2f}M SKU-steps/s "
              f"({out['ms_per_step']:.1f} ms/step incl. observation build), "
              f"policy {out['policy_ms_per_step']:.1f} ms/step, peak RSS {out['peak_rss_mb']:.0f} MB, "
              f"failed SKUs {out['failed_skus']}; {out['sku_steps_per_cpu_s'] / 1e6:.2f}M SKU-steps "
              f"per CPU-second, median step {out['median_ms_per_step']:.1f} ms "
              f"({out['median_sku_steps_per_s'] / 1e6:.2f}M SKU-steps/s; load average {out['load_average']:.1f})")
        print(f"bench sim: memory floor of this layout {out['floor_sku_steps_per_s'] / 1e6:.2f}M SKU-steps/s "
              f"({out['floor_bytes_per_sku_step']} bytes per SKU-step), bound_ratio {out['bound_ratio']:.2f} "
              f"(medians: {out['median_bound_ratio']:.2f})")
    return 0


def timed_steps(env: VectorEnv, steps: int) -> tuple[np.ndarray, float, float, float]:
    """Reset `env` and step it `steps` days under order-up-to orders: wall seconds of each
    step, policy seconds, CPU seconds of the steps (all threads) and the reset's seconds."""
    from skurl.sim.testing import order_up_to

    t0 = time.perf_counter()
    obs = env.reset(seed=0)
    t_reset = time.perf_counter() - t0
    orders = np.zeros(env.num_skus)
    lead = env.catalog.lead_time.astype(np.float64)
    t_policy = cpu_sim = 0.0
    step_s = np.empty(steps)
    for k in range(steps):
        t0 = time.perf_counter()
        raw = obs.raw
        order_up_to(raw.on_hand, raw.pipeline, raw.backlog, raw.forecast, lead, orders)
        t1, c1 = time.perf_counter(), time.process_time()
        obs = env.step(orders).obs
        step_s[k] = time.perf_counter() - t1
        cpu_sim += time.process_time() - c1
        t_policy += t1 - t0
    return step_s, t_policy, cpu_sim, t_reset


def _warm_up(catalog: Catalog, sim_cfg: SimConfig) -> float:
    """Reset and step a few of the catalog's SKUs once, untimed, so that neither the reset
    nor the first timed step includes numba's compilation or the loading of its on-disk cache
    (on a fresh install the step kernel compiles for ~25 s, which made a 20-step run report
    ~7x too few SKU-steps/s). Same array types as the full env: the same machine code."""
    from skurl.sim import VectorEnv
    from skurl.sim.layout import catalog_widths

    t0 = time.perf_counter()
    small = catalog.subset(np.arange(min(64, len(catalog))))
    warm = VectorEnv(small, sim_cfg, catalog_widths(catalog))
    warm.reset(seed=0)
    warm.step(np.zeros(warm.num_skus))
    warm.close()
    return time.perf_counter() - t0


def _sim_report(args: argparse.Namespace, env: VectorEnv, t_sim: float, t_policy: float,
                t_catalog: float, t_reset: float) -> dict[str, Any]:
    info = env.info()
    steps, skus = args.steps, env.num_skus
    return {
        "bench": "sim",
        "skus": skus,
        "steps": steps,
        "threads": env.threads,
        "obs_dim": info["obs_dim"],
        "sku_steps_per_s": skus * steps / t_sim,
        "ms_per_step": t_sim / steps * 1e3,
        "policy_ms_per_step": t_policy / steps * 1e3,
        "loop_sku_steps_per_s": skus * steps / (t_sim + t_policy),
        "catalog_s": t_catalog,
        "reset_s": t_reset,
        "peak_rss_mb": peak_rss_mb(),
        "failed_skus": len(info["failed_sku_ids"]),
        "config": args.config or "embedded defaults",
    }
