"""`skurl bench collect` and `skurl bench learn`: throughput of the training loop's parts.

    skurl bench collect --skus 1000000 --steps 20 --json   # simulator + policy + value inference
    skurl bench learn --transitions 1000000 --json         # PPO update, transitions x epochs / s

`bench learn` also times the GEMMs of its own shapes alone (learn/gemm_bound.py), before
and after the timed updates, and prints bound_ratio: its rate over that GEMM-only ceiling.

Registered under `skurl bench` by skurl.commands.bench_cmd (`register_bench(subparsers)`).
"""

from __future__ import annotations

import argparse
import os
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from skurl.commands.common import add_config_flags, config_from_args, print_json
from skurl.errors import UserError
from skurl.learn.threads import set_torch_threads
from skurl.policy.bf16 import cpu_has_bf16

BOUND_SECONDS = 0.1  # per timed round of each GEMM of the bound (3 rounds, best kept)
if TYPE_CHECKING:
    from skurl.buffer.rollout import Rollout
    from skurl.config import Config


def register_bench(sub: argparse._SubParsersAction) -> None:
    """Add `collect` and `learn` to the `skurl bench` subcommands."""
    c = sub.add_parser("collect", help="collector throughput: simulator + policy + value inference")
    add_config_flags(c)
    c.add_argument("--skus", type=int, default=100_000, help="SKUs simulated (synthetic catalog unless --config)")
    c.add_argument("--steps", type=int, default=20, help="days simulated")
    c.add_argument("--json", action="store_true", help="print one JSON object")
    c.set_defaults(func=run_collect)
    learn = sub.add_parser("learn", help="learner throughput: PPO update on synthetic transitions")
    add_config_flags(learn)
    learn.add_argument("--transitions", type=int, default=200_000, help="transitions per update (100 days x SKUs)")
    learn.add_argument("--repeat", type=int, default=2, help="updates timed (after one warm-up update)")
    learn.add_argument("--bound-seconds", type=float, default=BOUND_SECONDS,
                       help="seconds per timed round of each GEMM of the bound (3 rounds, best kept)")
    learn.add_argument("--autograd", action="store_true",
                       help="the reference update through autograd's graph instead of the fused step (same bits)")
    learn.add_argument("--json", action="store_true", help="print one JSON object")
    learn.set_defaults(func=run_learn)


def _threads(cfg: Config) -> int:
    threads = cfg.train.torch_threads or os.cpu_count() or 1
    set_torch_threads(threads)
    return threads


def run_collect(args: argparse.Namespace) -> int:
    from skurl.catalog import load_catalog
    from skurl.collect.collector import Collector
    from skurl.collect.evaluate import make_env
    from skurl.policy.learned import grid_for
    from skurl.policy.nets import ActorCritic
    from skurl.sim.layout import catalog_widths

    if args.skus < 1 or args.steps < 1:
        raise UserError(f"skurl bench collect: --skus {args.skus} --steps {args.steps}, expected integers >= 1")
    cfg = config_from_args(args, [f"catalog.skus={args.skus}", f"sim.days={args.steps}"])
    threads = _threads(cfg)
    catalog = load_catalog(cfg.catalog)
    grid = grid_for(cfg)
    env = make_env(catalog, cfg.sim)
    model = ActorCritic(env.schema.dim, grid.n, cfg.policy.hidden)
    # The warm-up subset shows the whole catalog's feature widths (the model's input width).
    warm_env = make_env(catalog.subset(np.arange(min(1000, len(catalog)))), cfg.sim, catalog_widths(catalog))
    warm = Collector(warm_env, model, grid,
                     chunk=cfg.collect.chunk, infer_dtype=cfg.collect.infer_dtype)
    warm.collect(cfg.train.seed, 0, record=False)  # JIT compilation and thread pools
    collector = Collector.from_config(env, model, grid, cfg.collect)
    collector.collect(cfg.train.seed, 0, record=False)
    s = collector.stats
    out = {
        "skus": len(catalog), "steps": s.days, "transitions": s.transitions, "seconds": round(s.seconds, 4),
        "transitions_per_s": round(s.transitions / s.seconds, 1),
        "simulate_seconds": round(s.sim_seconds, 4), "infer_seconds": round(s.infer_seconds, 4),
        "infer_dtype": str(collector.dtype).removeprefix("torch."), "native_bf16": cpu_has_bf16(),
        "hidden": list(cfg.policy.hidden),
        "obs_dim": env.schema.dim, "actions": grid.n, "chunk": cfg.collect.chunk, "threads": threads,
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    _print(args, out, f"collect: {out['transitions_per_s']:,.0f} transitions/s "
                      f"({s.transitions:,} in {s.seconds:.2f}s; simulate {s.sim_seconds:.2f}s, infer {s.infer_seconds:.2f}s)")
    return 0


def run_learn(args: argparse.Namespace) -> int:
    from skurl.learn.gemm_bound import gemm_bound
    from skurl.learn.learner import Learner

    if args.transitions < 100 or args.repeat < 1 or not args.bound_seconds > 0:
        raise UserError(f"skurl bench learn: --transitions {args.transitions}, --repeat {args.repeat}, "
                        f"--bound-seconds {args.bound_seconds}: expected >= 100, >= 1 and > 0")
    cfg = config_from_args(args)
    threads = _threads(cfg)
    obs_dim, n_actions, days = 70, cfg.policy.actions.n, 100
    learner = Learner(cfg, obs_dim, n_actions)
    learner.fused = not args.autograd
    rollout = _random_rollout(days, args.transitions // days, obs_dim, n_actions)
    learner.update(rollout)  # warm-up
    def bound() -> dict[str, Any]:
        return gemm_bound(learner.model, cfg.ppo.minibatch, learner.compute_dtype, args.bound_seconds,
                          learner.nets_side_by_side())

    # the bound before and after the timed updates: a burst of other load moves both alike
    bounds = [bound()]
    seconds = cpu_seconds = 0.0
    load_before = os.getloadavg()[0]
    for _ in range(args.repeat):
        rollout.policy_version = learner.version
        start, cpu_start = time.perf_counter(), time.process_time()
        stats = learner.update(rollout)
        seconds += time.perf_counter() - start
        cpu_seconds += time.process_time() - cpu_start
    bounds.append(bound())
    n = rollout.transitions * args.repeat
    rate = n * stats["epochs"] / seconds
    ceiling = float(np.mean([b["ceiling_transition_epochs_per_s"] for b in bounds]))
    minibatches = args.repeat * stats["epochs"] * -(-rollout.transitions // cfg.ppo.minibatch)
    gemm_ms = float(np.mean([b["gemm_ms_per_minibatch"] for b in bounds]))
    out = {
        "transitions": rollout.transitions, "epochs": int(stats["epochs"]), "minibatch": cfg.ppo.minibatch,
        "amp": cfg.ppo.amp, "hidden": list(cfg.policy.hidden), "seconds_per_update": round(seconds / args.repeat, 4),
        "update": "autograd" if args.autograd else "fused",
        "transitions_per_s": round(n / seconds, 1),
        "transition_epochs_per_s": round(rate, 1),
        # CPU seconds of all threads: less distorted than wall time by other load on a shared
        # machine (but counts OpenMP threads spinning while they wait for a core)
        "transition_epochs_per_cpu_s": round(n * stats["epochs"] / max(cpu_seconds, 1e-9), 1),
        "gemm_bound_transition_epochs_per_s": round(ceiling, 1),
        "gemm_bound_runs": [round(b["ceiling_transition_epochs_per_s"], 1) for b in bounds],
        # the faster GEMM schedule of each bound run, and each schedule's ms per minibatch
        "gemm_bound_schedules": [{k: round(v, 3) for k, v in b["schedule_ms"].items()} for b in bounds],
        "bound_ratio": round(rate / ceiling, 4),
        # the whole update (incl. its preparation) per minibatch, and its GEMMs alone
        "ms_per_minibatch": round(seconds * 1e3 / minibatches, 3), "gemm_ms_per_minibatch": round(gemm_ms, 3),
        "device": str(learner.device), "threads": threads,
        # bf16 figures depend on it: ~15x slower than fp32 without (bench learn, AVX2 EPYC)
        "native_bf16": cpu_has_bf16(),
        "load_avg_1m": round(max(load_before, os.getloadavg()[0]), 2),
    }
    _print(args, out, f"learn: {out['transition_epochs_per_s']:,.0f} transitions x epochs/s "
                      f"({rollout.transitions:,} transitions x {out['epochs']} epochs in {seconds / args.repeat:.2f}s, "
                      f"{out['update']} update); GEMM bound of these shapes {ceiling:,.0f}/s, "
                      f"bound_ratio {out['bound_ratio']:.2f} (load average {out['load_avg_1m']})")
    return 0


def _random_rollout(days: int, skus: int, obs_dim: int, n_actions: int) -> Rollout:
    from skurl.buffer.rollout import Rollout

    rng = np.random.default_rng(0)
    r = Rollout.allocate(days, np.arange(skus), obs_dim)
    r.obs[:] = rng.standard_normal(r.obs.shape, dtype=np.float32)
    r.actions[:] = rng.integers(0, n_actions, size=r.actions.shape)
    r.rewards[:] = rng.standard_normal(r.rewards.shape, dtype=np.float32)
    r.logp[:] = -np.log(n_actions)
    r.values[:] = 0.0
    r.dones[-1] = True
    r.last_obs[:] = r.obs[-1]
    r.bootstrap[:] = 0.0
    return r


def _print(args: argparse.Namespace, out: dict[str, Any], line: str) -> None:
    if args.json:
        print_json(out)
    else:
        print(line)
