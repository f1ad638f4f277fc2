"""`skurl bench train`: one iteration of the README's job (a bare `skurl train`) by stage.

    skurl bench train [--config F] [--set k=v] [--iterations 1] [--json]

On the embedded defaults unless --config (as a bare `skurl train`), colocated: collect
(simulate, infer, the rest), learn by phase (learner.mark) and sync (publishing weights),
after one untimed warm-up iteration (JIT, thread pools). The learn stage's minibatch GEMMs
are timed alone at their shapes (learn/gemm_bound.py, before and after; the behaviour
pass's forward GEMMs estimated per row); learn minus them is what it spends outside matrix
multiplies, itemized by phase. A cover grid centred on tuned factors is centred on the
newsvendor factors here (no tuning: the centre moves no figure of an iteration's cost).
Evaluations (every train.eval_every) and the baseline's tuning are not part of it."""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from skurl.commands.common import add_config_flags, config_from_args, print_json
from skurl.errors import UserError
from skurl.learn.threads import set_torch_threads

if TYPE_CHECKING:
    from skurl.catalog import Catalog
    from skurl.collect.collector import Collector
    from skurl.config import Config
    from skurl.learn.learner import Learner
    from skurl.policy.actions import ActionGrid

BOUND_SECONDS = 0.1


def register_bench(sub: argparse._SubParsersAction) -> None:
    """Add `train` to the `skurl bench` subcommands."""
    p = sub.add_parser("train", help="one iteration of the README's job by stage, and the learn stage outside GEMMs")
    add_config_flags(p)
    p.add_argument("--iterations", type=int, default=1, help="timed iterations (after one warm-up)")
    p.add_argument("--autograd", action="store_true", help="the reference update through autograd's graph")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run_train_stages)


def _untuned(cfg: Config) -> Config:
    actions = cfg.policy.actions
    if actions.kind == "cover" and actions.z_center == "tuned":
        actions = dataclasses.replace(actions, z_center="newsvendor")
    return dataclasses.replace(cfg, policy=dataclasses.replace(cfg.policy, actions=actions))


def run_train_stages(args: argparse.Namespace) -> int:

    from skurl.catalog import load_catalog
    from skurl.collect.collector import Collector
    from skurl.collect.evaluate import make_env
    from skurl.learn.learner import Learner
    from skurl.policy.learned import grid_for
    from skurl.policy.nets import ActorCritic

    if args.iterations < 1:
        raise UserError(f"bench train: --iterations {args.iterations}, expected an integer >= 1")
    cfg = _untuned(config_from_args(args, embedded=True))
    threads = cfg.train.torch_threads or os.cpu_count() or 1
    set_torch_threads(threads)
    catalog = load_catalog(cfg.catalog)
    env = make_env(catalog, cfg.sim)
    grid = grid_for(cfg, catalog)
    learner = Learner(cfg, env.schema.dim, grid.n)
    learner.fused = not args.autograd
    model = ActorCritic.from_state(learner.weights())
    collector = Collector.from_config(env, model, grid, cfg.collect)
    sampled = SampledEnvs(catalog, cfg, collector, grid_for(cfg))  # unbound: bound to each sample's env
    load_before = os.getloadavg()[0]
    runs = [_iteration(learner, sampled, cfg, it) for it in range(args.iterations + 1)][1:]
    bounds = [_bound(learner, cfg)]
    out = _report(runs, bounds, learner, cfg, threads)
    out["load_avg_1m"] = round(max(load_before, os.getloadavg()[0]), 2)
    out["update"] = "autograd" if args.autograd else "fused"
    if args.json:
        print_json(out)
    else:
        _print(out)
    return 0


class SampledEnvs:
    """What the job's collection simulates under ppo.sample_skus: only the units of the
    iteration's SKU sample (train/core.py sample_units_env), as colocated training does."""

    def __init__(self, catalog: Catalog, cfg: Config, whole: Collector, grid: ActionGrid) -> None:
        from skurl.catalog.partition import units
        from skurl.sim.layout import catalog_widths

        self.catalog, self.cfg, self.whole, self.grid = catalog, cfg, whole, grid
        self.unit, self.widths = units(catalog), catalog_widths(catalog)

    def collector(self, learner: Learner) -> tuple[Collector, np.ndarray | None]:
        """This iteration's collector (the sample's units, or the whole catalog's) at the
        learner's version, and the sample's columns in its env (None: every SKU)."""
        from skurl.collect.collector import Collector
        from skurl.train.core import sample_units_env

        index = learner.sample_index(self.whole.env.num_skus)
        narrowed = None if index is None else sample_units_env(self.catalog, self.unit, index, self.cfg.sim,
                                                                self.widths)
        collector = self.whole if narrowed is None else Collector.from_config(
            narrowed[0], self.whole.model, self.grid, self.cfg.collect)
        collector.set_weights(learner.version, learner.weights())
        return collector, index if narrowed is None else narrowed[1]


def _iteration(learner: Learner, sampled: SampledEnvs, cfg: Config, it: int) -> dict[str, Any]:
    start = time.perf_counter()
    collector, index = sampled.collector(learner)
    obs_skus: dict[str, Any] = {} if index is None else {"obs_skus": collector.sku_ids[index]}
    rollout = collector.collect(cfg.train.seed, it, learner.version, **obs_skus)
    assert rollout is not None  # recorded (record=True)
    if index is not None and index.size < rollout.num_skus and collector is not sampled.whole:
        rollout = rollout.select_skus(index)  # the sample's columns, as colocated collectors hand them over
    collect_s = time.perf_counter() - start
    s = collector.stats
    learner.phase_seconds = {}
    start = time.perf_counter()
    stats = learner.update(rollout)
    learn_s = time.perf_counter() - start
    phases, learner.phase_seconds = learner.phase_seconds, None
    start = time.perf_counter()
    weights = learner.weights()
    sampled.whole.set_weights(learner.version, weights)
    sync_s = time.perf_counter() - start
    return {"collect": collect_s, "simulate": s.sim_seconds, "infer": s.infer_seconds, "learn": learn_s,
            "sync": sync_s, "phases": phases, "transitions": stats["transitions"], "epochs": stats["epochs"],
            "collected_skus": s.skus}


def _bound(learner: Learner, cfg: Config) -> dict[str, Any]:
    from skurl.learn.gemm_bound import gemm_bound

    return gemm_bound(learner.model, cfg.ppo.minibatch, learner.compute_dtype, BOUND_SECONDS,
                      learner.nets_side_by_side())


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return float(np.median([r[key] for r in runs]))


def _report(runs: list[dict[str, Any]], bounds: list[dict[str, Any]], learner: Learner, cfg: Config,
            threads: int) -> dict[str, Any]:
    from skurl.learn.fused_step import SIDE_BY_SIDE_PHASE

    phases = {k: float(np.median([r["phases"].get(k, 0.0) for r in runs])) for k in runs[-1]["phases"]}
    transitions, epochs = runs[-1]["transitions"], runs[-1]["epochs"]
    minibatches = epochs * -(-int(transitions) // cfg.ppo.minibatch)
    rows = bounds[0]["gemms"]
    fwd_ms = sum(r["ms"] for r in rows if r["gemm"].endswith("forward"))
    bwd_ms = sum(r["ms"] for r in rows if not r["gemm"].endswith("forward"))
    gemm_s = {
        "forward (nets)": fwd_ms * minibatches / 1e3,
        "backward (nets)": bwd_ms * minibatches / 1e3,
        # the behaviour pass: one forward per transition, chunks of EVAL_ROWS rows
        "prepare (normalize, behaviour outputs, GAE)": fwd_ms * transitions / cfg.ppo.minibatch / 1e3,
    }
    if "forward and loss (autograd)" in phases:  # the autograd path's phases
        gemm_s["forward and loss (autograd)"] = gemm_s.pop("forward (nets)")
        gemm_s["backward (autograd)"] = gemm_s.pop("backward (nets)")
    elif SIDE_BY_SIDE_PHASE in phases:  # the fused step's one phase with the nets side by side
        gemm_s[SIDE_BY_SIDE_PHASE] = gemm_s.pop("forward (nets)") + gemm_s.pop("backward (nets)")
    learn = _median(runs, "learn")
    gemm_total = sum(gemm_s.values())
    outside = {k: v - gemm_s.get(k, 0.0) for k, v in phases.items()}
    outside["unmarked"] = learn - sum(phases.values())
    return {
        "bench": "train", "skus": int(learner.cfg.catalog.skus), "sample_skus": cfg.ppo.sample_skus,
        "collected_skus": int(_median(runs, "collected_skus")),  # the sample's units (simulated and inferred)
        "transitions_trained": int(transitions), "epochs": int(epochs), "minibatch": cfg.ppo.minibatch,
        "minibatches": int(minibatches), "threads": threads, "iterations_timed": len(runs),
        "stages_s": {k: _median(runs, k) for k in ("collect", "simulate", "infer", "learn", "sync")},
        "learn_phases_s": phases,
        "learn_gemm_s": gemm_s, "learn_gemm_total_s": gemm_total,
        "learn_outside_gemm_s": outside, "learn_outside_gemm_share": (learn - gemm_total) / learn,
        "gemm_bound_transition_epochs_per_s": bounds[0]["ceiling_transition_epochs_per_s"],
        "transition_epochs_per_s": transitions * epochs / learn,
    }


def _print(out: dict[str, Any]) -> None:
    st = out["stages_s"]
    print(f"bench train: one iteration of {out['skus']} SKUs (learn on {out['transitions_trained']:,} transitions x "
          f"{out['epochs']} epochs, {out['minibatches']} minibatches, {out['update']} update, {out['threads']} threads, "
          f"load average {out['load_avg_1m']}), median of {out['iterations_timed']}:")
    print(f"  collect {st['collect']:.2f} s ({out['collected_skus']:,} SKUs: simulate {st['simulate']:.2f}, "
          f"infer {st['infer']:.2f}), "
          f"learn {st['learn']:.2f} s, sync {st['sync']:.3f} s")
    print(f"  learn: GEMMs alone {out['learn_gemm_total_s']:.2f} s; outside matrix multiplies "
          f"{st['learn'] - out['learn_gemm_total_s']:.2f} s ({out['learn_outside_gemm_share']:.0%}):")
    for name, sec in sorted(out["learn_outside_gemm_s"].items(), key=lambda kv: -kv[1]):
        print(f"    {name:<46} {sec:7.3f} s")
