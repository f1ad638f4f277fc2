"""`skurl bench labelling`: DCL's labelling on 1, 2, ... Ray collector actors against in process.

    skurl bench labelling [--config configs/lost_sales.yaml] --workers 1,2 --rounds 3 [--json]

One DCL labelling job (a random-weight policy, the config's dcl.* settings and catalog) is
answered in process (LocalLabellers, what --mode colocated does) and by a local Ray cluster
of W collector actors for each W of --workers (modes/ray/labellers.py), the cluster sizes
interleaved round by round; the first answer of each (env build, compilation) is left out.
It prints the medians of rollout SKU-days/s, the speed-up over one actor, the collectors'
idle share, the learner's fit time on the labels, and a projection to more workers
(docs/dcl.md, "Labelling where the shards are").
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from skurl.commands.common import add_config_flags, config_from_args, print_json
from skurl.errors import UserError

if TYPE_CHECKING:
    from skurl.config import Config
    from skurl.learn.labelling import LabelJob, Labellers
    from skurl.modes.ray.cluster import RayCluster
    from skurl.train.core import RunCore

PROJECTED = (8, 64, 512)
# The machine's own parallel bound: W processes of this numpy workload at once against one
# alone (W x t_one / t_slowest). On shared or hyperthreaded vCPUs it is well under W, and no
# labelling spread over W collector processes can beat it.
_PROBE = ("import numpy as np, time; a = np.random.default_rng(0).random(2_000_000); t = time.perf_counter()\n"
          "for _ in range(40): np.sqrt(a * 1.0001 + 0.5).sum()\nprint(time.perf_counter() - t)")


def register_bench(sub: argparse._SubParsersAction) -> None:
    """Add `labelling` to the `skurl bench` subcommands."""
    p = sub.add_parser("labelling", help="DCL labelling throughput on Ray collector actors vs in process")
    add_config_flags(p)
    p.add_argument("--workers", default="1,2", help="comma-separated Ray collector counts to measure")
    p.add_argument("--rounds", type=int, default=3, help="timed labellings of each (medians are printed)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run_labelling)


def _workers(text: str) -> list[int]:
    try:
        out = [int(w) for w in text.split(",") if w.strip()]
    except ValueError:
        out = []
    if not out or min(out) < 1:
        raise UserError(f"bench labelling: --workers {text!r}, expected comma-separated integers >= 1")
    return out


def run_labelling(args: argparse.Namespace) -> int:
    workers = _workers(args.workers)
    if args.rounds < 1:
        raise UserError(f"bench labelling: --rounds {args.rounds}, expected an integer >= 1")
    cfg = config_from_args(args, ["train.algo=dcl", "train.torch_threads=1", "sim.threads=1"], embedded=True)
    if cfg.policy.actions.kind == "cover" and cfg.policy.actions.z_center == "tuned":  # no tuning in a bench
        actions = dataclasses.replace(cfg.policy.actions, z_center="newsvendor")
        cfg = dataclasses.replace(cfg, policy=dataclasses.replace(cfg.policy, actions=actions))
    with tempfile.TemporaryDirectory(prefix="skurl-bench-labelling-") as tmp:
        out = measure(cfg, Path(tmp), workers, args.rounds)
    if args.json:
        print_json(out)
    else:
        _print(out)
    return 0


def measure(cfg: Config, tmp: Path, workers: list[int], rounds: int) -> dict[str, object]:
    """See the module docstring; every figure a median over `rounds`."""
    import ray

    from skurl.learn.labelling import LocalLabellers
    from skurl.modes.ray.cluster import start_ray
    from skurl.train.core import build_core

    core = build_core(cfg, tmp / "run", resume=False)
    job = _job(core)
    local = LocalLabellers(core.local_env, core.grid)
    started = start_ray(cfg.ray)
    clusters, labellers = _clusters(cfg, core, workers)
    try:
        timings: dict[str, list[dict[str, float]]] = {"local": [], **{str(w): [] for w in workers}}
        for who in [local, *(labellers[w] for w in workers)]:
            _time(who, job)  # warm: envs built, kernels compiled
        for _ in range(rounds):
            timings["local"].append(_time(local, job))
            for w in workers:
                timings[str(w)].append(_time(labellers[w], job))
        fit_s = _fit_seconds(core, local, job)
        bounds = {str(w): machine_bound(w) for w in workers}
    finally:
        for cluster in clusters:
            cluster.close()
        if started and ray.is_initialized():
            ray.shutdown()
    return {**_summary(cfg, job, timings, workers, fit_s), "machine_bound": bounds}


def machine_bound(processes: int) -> float:
    """`processes` copies of _PROBE at once against one alone: the most a spread over that
    many processes can gain on this machine (median of 3 tries)."""
    import subprocess
    import sys

    def run(n: int) -> float:
        procs = [subprocess.Popen([sys.executable, "-c", _PROBE], stdout=subprocess.PIPE, text=True)
                 for _ in range(n)]
        return max(float(p.communicate()[0]) for p in procs)

    ratios = []
    for _ in range(3):
        one = run(1)
        ratios.append(processes * one / run(processes))
    return float(np.median(ratios))


def _job(core: RunCore) -> LabelJob:
    import torch

    from skurl.columns.strata import strata_codes, strata_names
    from skurl.learn.dcl_parts import sample_plan
    from skurl.learn.labelling import LabelJob
    from skurl.policy.nets import ActorCritic
    from skurl.train.dcl_step import dcl_spec

    cfg = core.cfg
    torch.manual_seed(cfg.train.seed)
    model = ActorCritic(core.schema.dim, core.grid.n, cfg.policy.hidden)
    spec = dcl_spec(cfg, core.catalog)
    strata = strata_codes(core.catalog, strata_names(cfg.dcl.stratify))
    plan = sample_plan(np.asarray(core.catalog.sku_id, np.int64), cfg.sim.days, spec, seed=cfg.train.seed,
                       iteration=0, strata=strata)
    weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return LabelJob(0, 0, cfg.train.seed, 0, plan, spec, cfg.dcl.horizon == 0, weights, None, core.widths)


def _clusters(cfg: Config, core: RunCore, workers: list[int]) -> tuple[list[RayCluster], dict[int, Labellers]]:
    from skurl.modes.ray.cluster import RayCluster
    from skurl.modes.ray.labellers import RayLabellers
    from skurl.policy.nets import ActorCritic

    clusters: list[RayCluster] = []
    labellers: dict[int, Labellers] = {}
    for w in workers:
        ray_cfg = dataclasses.replace(cfg.ray, collectors=w, num_workers=w, cpus_per_worker=0.1,
                                      cpus_per_collector=0.1)
        cluster = RayCluster(dataclasses.replace(cfg, ray=ray_cfg), core,
                             ActorCritic(core.schema.dim, core.grid.n, cfg.policy.hidden))
        clusters.append(cluster)
        cluster.placement(0)
        labellers[w] = RayLabellers(cluster)
    return clusters, labellers


def _time(labellers: Labellers, job: LabelJob) -> dict[str, float]:
    start = time.perf_counter()
    parts = labellers.label(job)
    wall = time.perf_counter() - start
    figures = labellers.figures()
    return {"wall_s": wall, "rollout_sku_days": float(sum(p.sku_days for p in parts)),
            "idle_share": figures.get("dcl_label_collector_idle_share", 0.0),
            "busiest_s": figures.get("dcl_label_collector_seconds_max", wall)}


def _fit_seconds(core: RunCore, local: Labellers, job: LabelJob) -> float:
    """The learner's fit of dcl.fit_steps on one labelling's labels (serial at any worker count)."""
    import torch

    from skurl.learn.dcl_parts import merge_parts
    from skurl.learn.imitate import clone
    from skurl.policy.nets import ActorCritic

    cfg = core.cfg
    labs = merge_parts(local.label(job), np.asarray(core.catalog.sku_id, np.int64))
    model = ActorCritic.from_state(job.incumbent)
    start = time.perf_counter()
    clone(model, labs.demos, steps=cfg.dcl.fit_steps, smoothing=0.0, seed=1, normalize_obs=False,
          stats_decay=cfg.ppo.stats_decay, max_grad_norm=cfg.ppo.max_grad_norm, device=torch.device("cpu"))
    return time.perf_counter() - start


def _summary(cfg: Config, job: LabelJob, timings: dict[str, list[dict[str, float]]], workers: list[int],
             fit_s: float) -> dict[str, object]:
    def med(name: str, key: str) -> float:
        return float(np.median([t[key] for t in timings[name]]))

    rate = {name: med(name, "rollout_sku_days") / med(name, "wall_s") for name in timings}
    one = str(workers[0])
    per_worker_s = med(one, "busiest_s") * workers[0]  # one worker's labelling of the whole job
    overhead_s = max(med(one, "wall_s") - med(one, "busiest_s"), 0.0)  # wire, store, merge: per fan-out
    projected = {str(w): per_worker_s / w + overhead_s + fit_s for w in PROJECTED}
    return {"states": job.plan.states, "catalog": cfg.catalog.kind, "rounds": len(timings["local"]),
            "local_wall_s": med("local", "wall_s"), "local_rollout_sku_days_per_s": rate["local"],
            "workers": {str(w): {"wall_s": med(str(w), "wall_s"), "rollout_sku_days_per_s": rate[str(w)],
                                 "speedup_over_first": rate[str(w)] / rate[one],
                                 "collector_idle_share": med(str(w), "idle_share")} for w in workers},
            "fit_s": fit_s, "fan_out_overhead_s": overhead_s, "one_worker_label_s": per_worker_s,
            "projected_iteration_s": projected,
            "limit_s": overhead_s + fit_s}


def _print(out: dict[str, object]) -> None:
    print(f"bench labelling: {out['states']} states of a {out['catalog']} catalog, medians of {out['rounds']} rounds")
    local = out["local_rollout_sku_days_per_s"]
    assert isinstance(local, float)
    print(f"  in process: {out['local_wall_s']:.2f} s, {local / 1e6:.3f}M rollout SKU-days/s")
    workers = out["workers"]
    assert isinstance(workers, dict)
    for w, f in workers.items():
        print(f"  {w} Ray collector(s): {f['wall_s']:.2f} s, {f['rollout_sku_days_per_s'] / 1e6:.3f}M rollout "
              f"SKU-days/s, x{f['speedup_over_first']:.2f} over the first, collector idle share "
              f"{f['collector_idle_share']:.1%}")
    bounds = out["machine_bound"]
    assert isinstance(bounds, dict)
    print("  this machine's bound for W processes (a numpy probe): " +
          ", ".join(f"W={w} x{b:.2f}" for w, b in bounds.items()))
    projected = out["projected_iteration_s"]
    assert isinstance(projected, dict)
    print(f"  learner fit {out['fit_s']:.2f} s; fan-out overhead {out['fan_out_overhead_s']:.2f} s; projected "
          "labelling + fit per iteration: " + ", ".join(f"{w} workers {s:.2f} s" for w, s in projected.items())
          + f" (limit {out['limit_s']:.2f} s)")
