"""`skurl bench rollouts`: throughput of the common-random-number rollout operator.

    skurl bench rollouts --states 2000 --budget 64 --horizon 20 [--policy network] [--json]
    skurl bench rollouts --policy network --versus configs/lost_sales.yaml --rounds 5

Samples SKU states, estimates Q of every candidate first order by policy/rollout_q, and
prints rollout SKU-days/s and bound_ratio (over `bench sim` on the same catalog); with
`--policy network` also the ceiling the net's forward products alone set
(inference_bound_ratio). Without --config: the embedded defaults. `--versus CONFIG`
alternates both configs over --rounds and prints their medians, ratio and the ratio's
ceiling. More: docs/internals.md (commands/bench_rollouts.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from typing import TYPE_CHECKING

import numpy as np

from skurl.commands.common import add_config_flags, config_from_args, print_json
from skurl.errors import UserError
from skurl.learn.threads import set_torch_threads

if TYPE_CHECKING:
    from torch import nn

    from skurl.catalog import Catalog
    from skurl.config import Config
    from skurl.policy.actions import ActionGrid
    from skurl.policy.api import Policy
    from skurl.policy.rollout_q import RolloutPolicy
    from skurl.sim.env import VectorEnv


def register_bench(sub: argparse._SubParsersAction) -> None:
    """Add `rollouts` to the `skurl bench` subcommands."""
    p = sub.add_parser("rollouts", help="CRN rollout operator throughput in rollout SKU-days per second")
    add_config_flags(p)
    p.add_argument("--states", type=int, default=2000, help="sampled SKU states (one per catalog SKU)")
    p.add_argument("--budget", type=int, default=64, help="rollouts per state, over the halving rounds")
    p.add_argument("--horizon", type=int, default=20, help="days per rollout (H)")
    p.add_argument("--warmup", type=int, default=10, help="days of capped base-stock before the states are taken")
    p.add_argument("--policy", choices=("capped-base-stock", "network"), default="capped-base-stock",
                   help="rollout policy after the first day")
    p.add_argument("--versus", metavar="CONFIG", help="also measure this config, alternated; print the ratio")
    p.add_argument("--rounds", type=int, default=1, help="measurements of each config (medians are printed)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run_rollouts)


def _check(args: argparse.Namespace) -> None:
    for name in ("states", "budget", "horizon", "rounds"):
        if getattr(args, name) < 1:
            raise UserError(f"bench rollouts: --{name} {getattr(args, name)}, expected an integer >= 1")
    if args.warmup < 0:
        raise UserError(f"bench rollouts: --warmup {args.warmup}, expected an integer >= 0")


def _rollout_policy(args: argparse.Namespace, cfg: Config, grid: ActionGrid, env: VectorEnv,
                    base: Policy) -> tuple[RolloutPolicy, nn.Module | None]:
    """The rollout policy, and the net it runs on every clone row (None for the baseline)."""
    from skurl.policy.rollout_q import baseline_rollout, learned_rollout

    if args.policy == "capped-base-stock":
        return baseline_rollout(base), None
    import torch

    from skurl.policy.learned import LearnedPolicy
    from skurl.policy.nets import ActorCritic

    torch.manual_seed(0)
    threads = cfg.train.torch_threads
    if threads:
        set_torch_threads(threads)
    model = ActorCritic(env.layout.dim, grid.n, cfg.policy.hidden)
    return learned_rollout(LearnedPolicy(model, grid, name="network")), model.policy


def run_rollouts(args: argparse.Namespace) -> int:
    _check(args)
    cfg = config_from_args(args, [f"sim.days={args.warmup + 1}"], embedded=True)
    other = None
    if args.versus:
        other = config_from_args(argparse.Namespace(config=args.versus, overrides=[]), [f"sim.days={args.warmup + 1}"])
    runs: list[dict[str, float]] = []
    others: list[dict[str, float]] = []
    for _ in range(args.rounds):
        runs.append(measure(args, cfg))
        if other is not None:
            others.append(measure(args, other))
    key = "rollout_sku_days_per_s"
    out: dict[str, object] = {**runs[-1], key: _median(runs, key), "rounds": args.rounds, "policy": args.policy,
                              "grid": cfg.policy.actions.kind, "hidden": list(cfg.policy.hidden)}
    if other is not None:
        ratio = _median(runs, key) / _median(others, key)
        out.update({f"versus_{k}": v for k, v in others[-1].items()})
        out.update({"versus": args.versus, f"versus_{key}": _median(others, key), "versus_ratio": ratio,
                    "versus_hidden": list(other.policy.hidden),
                    "rounds_per_s": [[a[key], b[key]] for a, b in zip(runs, others, strict=True)]})
        ceiling = "inference_ceiling_sku_days_per_s"
        if ceiling in runs[-1]:  # the most versus_ratio could be with only this config's net costing time
            out["versus_ceiling_ratio"] = _median(runs, ceiling) / _median(others, key)
    if args.json:
        print_json(out)
        return 0
    _print(args, cfg, runs[-1], _median(runs, key))
    if other is not None:
        rounds_text = ", ".join(f"{a[key] / 1e6:.3f}/{b[key] / 1e6:.3f}" for a, b in zip(runs, others, strict=True))
        print(f"bench rollouts: versus {args.versus} ({int(others[-1]['states'])} states x "
              f"{int(others[-1]['actions'])} actions, {other.policy.actions.kind} grid, hidden "
              f"{list(other.policy.hidden)}): {_median(others, key) / 1e6:.3f}M rollout SKU-days/s; rounds "
              f"(this/versus, M) {rounds_text}; ratio of medians {ratio:.3f}")
        if "versus_ceiling_ratio" in out:
            print(f"bench rollouts: with only this config's net forward products costing time, the ratio "
                  f"could reach {out['versus_ceiling_ratio']:.3f} at most")
    return 0


def _median(runs: list[dict[str, float]], key: str) -> float:
    return float(np.median([r[key] for r in runs]))


def _print(args: argparse.Namespace, cfg: Config, out: dict[str, float], per_s: float) -> None:
    print(f"bench rollouts: {int(out['states'])} states x {int(out['actions'])} actions "
          f"({cfg.policy.actions.kind} grid, hidden {list(cfg.policy.hidden)}), budget {args.budget}, "
          f"H {args.horizon}, {args.policy}: {int(out['rollouts'])} rollouts, {int(out['rollout_sku_days'])} "
          f"SKU-days ({out['clone_rows_per_state']:.2f} clone rows each) = {per_s / 1e6:.3f}M rollout "
          f"SKU-days/s (median of {args.rounds}; last: {out['rollout_sku_days_per_cpu_s'] / 1e6:.3f}M per "
          f"CPU-second, {int(out['threads'])} sim threads)")
    print(f"bench rollouts: bench sim on the same catalog ({int(out['sim_skus'])} SKUs, the rollouts' mean "
          f"width) {out['sim_sku_steps_per_s'] / 1e6:.3f}M SKU-steps/s; bound_ratio {out['bound_ratio']:.2f}, counting "
          f"every clone row {out['row_bound_ratio']:.2f} (last)")
    if "inference_ceiling_sku_days_per_s" in out:
        print(f"bench rollouts: the net's forward products alone ({out['inferred_rows_per_sku_day']:.2f} rows "
              f"inferred per rollout SKU-day, {out['inference_rows_per_s'] / 1e6:.3f}M rows/s at "
              f"{int(out['inference_batch'])} rows) cap the rollouts at "
              f"{out['inference_ceiling_sku_days_per_s'] / 1e6:.3f}M rollout SKU-days/s; inference_bound_ratio "
              f"{out['inference_bound_ratio']:.2f} (last)")


def measure(args: argparse.Namespace, cfg: Config) -> dict[str, float]:
    """One timed estimate_q on `cfg`'s catalog (see the module docstring)."""
    from skurl.catalog import load_catalog
    from skurl.policy.baselines import make_policy
    from skurl.policy.learned import grid_for
    from skurl.policy.rollout_q import RolloutSpec, candidate_orders, estimate_q
    from skurl.sim import VectorEnv

    catalog = load_catalog(cfg.catalog, args.states)
    actions = cfg.policy.actions
    if actions.kind == "cover" and actions.z_center == "tuned":
        actions = dataclasses.replace(actions, z_center="newsvendor")
    grid = grid_for(dataclasses.replace(cfg, policy=dataclasses.replace(cfg.policy, actions=actions)), catalog)
    env = VectorEnv(catalog, cfg.sim)
    base = make_policy("capped-base-stock", catalog, cfg.sim)
    obs = env.reset(seed=0)
    for _ in range(args.warmup):
        obs = env.step(base.orders(obs)).obs
    policy, net = _rollout_policy(args, cfg, grid, env, base)
    rows = np.arange(env.num_skus)
    first = candidate_orders(grid, env, rows)
    spec = RolloutSpec(horizon=args.horizon, budget=args.budget, episode_base=1)
    t0 = time.perf_counter()
    estimate_q(env, rows[:8], first[:8], policy, dataclasses.replace(spec, budget=2))  # compile, untimed
    warm_s = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    est = estimate_q(env, rows, first, policy, spec)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    members = env.clone(rows, whole_groups=True).cloned
    out: dict[str, float] = {
           "states": env.num_skus, "actions": grid.n, "budget": args.budget, "horizon": args.horizon,
           "rollouts": int(est.reps.sum()), "rollout_sku_days": est.sku_days,
           "clone_rows_per_state": 1.0 if members is None else members.src.size / env.num_skus,
           "seconds": wall, "rollout_sku_days_per_s": est.sku_days / max(wall, 1e-9),
           "rollout_sku_days_per_cpu_s": est.sku_days / max(cpu, 1e-9), "warm_up_s": warm_s,
           "threads": env.threads}
    n_rounds = rounds(args, grid.n)
    out.update(_sim_bound(catalog, cfg, est.sku_days // max(args.horizon * n_rounds, 1), args.horizon))
    out["bound_ratio"] = out["rollout_sku_days_per_s"] / out["sim_sku_steps_per_s"]
    # Every clone row is simulated (a state's substitution group or network rides along):
    # the simulator's own work, against the same bound.
    out["rollout_row_days"] = est.row_days
    out["rollout_row_days_per_s"] = est.row_days / max(wall, 1e-9)
    out["row_bound_ratio"] = out["rollout_row_days_per_s"] / out["sim_sku_steps_per_s"]
    if net is not None and args.horizon > 1:
        out.update(_inference_bound(net, est.sku_days, est.row_days, args.horizon, n_rounds))
        out["inference_bound_ratio"] = out["rollout_sku_days_per_s"] / out["inference_ceiling_sku_days_per_s"]
    return out


def _inference_bound(net: nn.Module, sku_days: int, row_days: int, horizon: int, n_rounds: int) -> dict[str, float]:
    """The rollouts' ceiling with simulation, decoding and Python free: `net`'s forward
    products alone (learn/gemm_bound.forward_rows_per_s) at the rollouts' batch, over the
    rows they infer per rollout SKU-day. Every clone row is inferred on every day after its
    first (the members of a group on the first day too), so counting H - 1 of H days
    undercounts the rows and the ceiling errs high."""
    from skurl.learn.gemm_bound import forward_rows_per_s
    from skurl.policy.learned import INFER_CHUNK

    inferred = row_days * (horizon - 1) / horizon
    batch = int(min(max(row_days // (horizon * n_rounds), 1), INFER_CHUNK))  # a round's mean clone rows
    rows_per_s = forward_rows_per_s(net, batch, min_seconds=0.1)
    return {"inference_batch": batch, "inference_rows_per_s": rows_per_s,
            "inferred_rows_per_sku_day": inferred / max(sku_days, 1),
            "inference_ceiling_sku_days_per_s": rows_per_s * max(sku_days, 1) / max(inferred, 1.0)}


def rounds(args: argparse.Namespace, actions: int) -> int:
    """Halving rounds of estimate_q's schedule for `actions` candidates and --budget."""
    from skurl.policy.rollout_q import halving_schedule

    return len(list(halving_schedule(actions, args.budget)))


def _sim_bound(catalog: Catalog, cfg: Config, width: int, days: int) -> dict[str, float]:
    """`bench sim`'s loop (order-up-to orders, commands/bench_cmd.timed_steps) on copies of
    the catalog (fresh ids) of at least `width` rows, `days` days: SKU-steps/s."""
    from skurl.commands.bench_cmd import timed_steps
    from skurl.policy.tuning import replicate
    from skurl.sim import VectorEnv

    tiled = replicate(catalog, -(-max(width, 1) // len(catalog)))  # whole copies: networks and groups stay whole
    env = VectorEnv(tiled, dataclasses.replace(cfg.sim, days=days + 1))
    timed_steps(env, 1)  # compiled already (the rollouts ran); pages of the new arrays
    step_s, _, _, _ = timed_steps(env, days)
    return {"sim_skus": env.num_skus, "sim_days": days, "sim_sku_steps_per_s": env.num_skus * days / float(step_s.sum())}
