"""`skurl bench recommend`: the daily batch job's time per stage and its peak memory.

    skurl bench recommend --skus 1000000 [--day 3] [--threads K] [--json]

Prepared first (not timed): the configured catalog (the embedded defaults' cover grid centred
on each SKU's newsvendor factor: tuning a million SKUs is not what is measured), a
snapshot of the simulator on day --day, and the ONNX export of a policy with the configured
network (untrained weights: inference costs the same). Timed, in a fresh process so its peak
RSS is the job's alone, after loading the model and catalog and a 64-SKU warm-up (numba's
cache, onnxruntime's first run): read + validate the snapshot, build the features and
decoding inputs, ONNX inference in batches, write the orders.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from skurl.commands.common import add_config_flags, config_from_args, print_json
from skurl.errors import UserError

GRID = ("policy.actions.kind=cover", "policy.actions.z_center=newsvendor", "policy.actions.n=21",
        "policy.actions.z_min=-1.5", "policy.actions.z_max=1.5")


def register_bench(cmds: argparse._SubParsersAction) -> None:
    p = cmds.add_parser("recommend", help="skurl recommend per stage (read, features, inference, write) and peak RSS")
    add_config_flags(p)
    p.add_argument("--skus", type=int, default=1_000_000, help="SKUs in the snapshot (catalog from the config)")
    p.add_argument("--day", type=int, default=3, help="day of the simulated snapshot")
    p.add_argument("--threads", type=int, default=0, help="onnxruntime threads (0 = its default)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run_bench)


def _prepare(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    import numpy as np
    import yaml

    from skurl.catalog import load_catalog
    from skurl.catalog.io import write_catalog
    from skurl.config import config_to_dict
    from skurl.policy.learned import grid_for
    from skurl.policy.nets import ActorCritic
    from skurl.serve.export import build_run_model, write_onnx
    from skurl.serve.snapshot import from_env, write_snapshot
    from skurl.sim import VectorEnv
    from skurl.sim.testing import order_up_to

    cfg = config_from_args(args, [*GRID, f"catalog.skus={args.skus}", f"sim.days={max(args.day, 1)}"])
    catalog = load_catalog(cfg.catalog, args.skus)
    env = VectorEnv(catalog, cfg.sim)
    obs = env.reset(seed=0)
    orders, lead = np.zeros(len(catalog)), catalog.lead_time.astype(np.float64)
    for _ in range(args.day):
        raw = obs.raw
        order_up_to(raw.on_hand, raw.pipeline, raw.backlog, raw.forecast, lead, orders)
        obs = env.step(orders).obs
    snap = from_env(env)
    write_snapshot(snap, tmp / "state.parquet")
    write_snapshot(snap.take(np.arange(min(64, len(snap)))), tmp / "warm.parquet")
    write_catalog(catalog, tmp / "catalog.parquet")
    grid = grid_for(cfg)
    model = ActorCritic(env.layout.dim, grid.n, cfg.policy.hidden)
    text = yaml.safe_dump(config_to_dict(cfg), sort_keys=False)
    write_onnx(build_run_model(model, grid, env.layout, text, "bench", "0", "none"), None, tmp / "model.onnx")
    return {"obs_dim": env.layout.dim, "hidden": list(cfg.policy.hidden), "actions": grid.n}


def child(tmp: str, threads: int) -> None:
    """The timed job (run in its own process): prints its stage times as JSON."""
    from skurl.catalog.io import read_catalog
    from skurl.serve.models import OnnxModel
    from skurl.serve.recommend import Timings, recommend, write_orders

    base = Path(tmp)
    t0 = time.perf_counter()
    model = OnnxModel(base / "model.onnx", threads)
    t1 = time.perf_counter()
    catalog = read_catalog(base / "catalog.parquet")
    recommend(model, base / "warm.parquet", catalog)  # first calls: numba's cache, onnxruntime's arenas
    t2 = time.perf_counter()
    timings = Timings()
    orders = recommend(model, base / "state.parquet", catalog, timings=timings)
    t3 = time.perf_counter()
    write_orders(orders, base / "orders.parquet")
    timings.add("write", t3)
    stages = {"load_model": t1 - t0, "read_catalog_and_warm_up": t2 - t1, **timings.stages}
    print(json.dumps({"stages_s": stages, "cpu_s": timings.cpu, "skus": int(orders.sku_id.shape[0]),
                      "units": float(orders.order_units.sum())}))


def run_bench(args: argparse.Namespace) -> int:
    if args.skus < 1 or args.day < 0 or args.threads < 0:
        raise UserError(f"bench recommend: --skus {args.skus} >= 1, --day {args.day} >= 0 and "
                        f"--threads {args.threads} >= 0 expected")
    with tempfile.TemporaryDirectory(prefix="skurl-bench-recommend-") as tmp:
        t0 = time.perf_counter()
        prep = _prepare(args, Path(tmp))
        prep_s = time.perf_counter() - t0
        load_before = os.getloadavg()[0]
        code = (f"from skurl.commands.bench_recommend import child; child({tmp!r}, {int(args.threads)})")
        t0 = time.perf_counter()
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
        wall = time.perf_counter() - t0
        if res.returncode != 0:
            raise UserError(f"bench recommend: the timed job failed: {res.stderr.strip().splitlines()[-1:]}")
        job = json.loads(res.stdout.strip().splitlines()[-1])
    stages = job["stages_s"]
    job_stages = ("read", "features", "inference", "write")
    out = {"skus": job["skus"], **prep, "prepare_s": prep_s, "stages_s": stages, "cpu_s": job["cpu_s"],
           "job_s": sum(stages[k] for k in job_stages), "job_cpu_s": sum(job["cpu_s"][k] for k in job_stages),
           "process_wall_s": wall, "peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0,
           "load_average": max(load_before, os.getloadavg()[0]), "cpus": os.cpu_count()}
    if args.json:
        print_json(out)
    else:
        parts = ", ".join(f"{k} {v:.2f} s" for k, v in stages.items())
        cpus = ", ".join(f"{k} {v:.2f}" for k, v in job["cpu_s"].items())
        print(f"bench recommend: {out['skus']} SKUs, obs_dim {out['obs_dim']}, net {out['hidden']}, "
              f"{out['actions']} actions: read+features+inference+write {out['job_s']:.2f} s ({parts}); "
              f"{out['job_cpu_s']:.2f} CPU-s ({cpus}); "
              f"process {wall:.2f} s wall incl. imports; peak RSS {out['peak_rss_mb']:.0f} MB "
              f"(load average {out['load_average']:.1f}, {out['cpus']} CPUs)")
    return 0
