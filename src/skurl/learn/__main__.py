"""`python -m skurl.learn`: the decoupled PPO learner, one process per rank under torchrun.

    torchrun --nproc_per_node 2 -m skurl.learn --config run.yaml --rollouts s3://bucket/run --run-dir runs/x
    python -m skurl.learn --nproc 2 --rollouts runs/rollouts --run-dir runs/x   # starts torchrun itself

Each iteration: rank 0 asks the collectors of deploy.collector_addresses (when listed) to
collect it; every rank waits until deploy.collectors shards of the iteration are in the rollout
store; every rank reads only the shards that overlap its SKU columns (ppo.sample_skus > 0
reads them all: the sample is drawn over the global batch); one DDP update (learn/ddp.py);
rank 0 publishes the weights (sync.backend=redis) and writes checkpoints. A run dir that
already holds checkpoints is resumed, so a restarted Job continues where it stopped.
Backend: NCCL when the learner device is a GPU, gloo on CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from skurl.buffer.rollout import Columns, Rollout
from skurl.commands.common import add_config_flags, config_from_args
from skurl.config import Config
from skurl.errors import UserError
from skurl.learn.checkpoint import restore_latest, save_checkpoint
from skurl.learn.ddp import DDPLearner, RankSlice, rank_slice
from skurl.learn.learner import resolve_device
from skurl.store import RolloutStore, ShardManifest, open_store


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m skurl.learn", description=__doc__.splitlines()[0])
    add_config_flags(p)
    p.add_argument("--rollouts", metavar="URL", help="rollout store: a directory or s3://bucket/prefix (sets store.url)")
    p.add_argument("--run-dir", required=True, help="checkpoints and metrics go here (resumed when it holds checkpoints)")
    p.add_argument("--iterations", type=int, help="total training iterations (sets train.iterations)")
    p.add_argument("--nproc", type=int, default=1, help="ranks on this machine; > 1 re-runs this command under torchrun")
    p.add_argument("--wait-s", type=float, default=3600.0, help="longest wait for an iteration's shards, seconds")
    p.add_argument("--poll-s", type=float, default=0.5, help="interval between rollout store listings, seconds")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
        if args.nproc > 1 and "LOCAL_RANK" not in os.environ:
            return _torchrun(args.nproc, argv)
        run(args)
        return 0
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _torchrun(nproc: int, argv: list[str]) -> int:
    rest = [a for i, a in enumerate(argv) if a != "--nproc" and (i == 0 or argv[i - 1] != "--nproc")]
    rest = [a for a in rest if not a.startswith("--nproc=")]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           "-m", "skurl.learn", *rest]
    return subprocess.run(cmd, check=False).returncode


def init_distributed(cfg: Config) -> torch.device:
    """Join torchrun's process group (env://) when there is one; the rank's device."""
    device = resolve_device(cfg.train.device)
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return device
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device.type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, timeout=timedelta(seconds=max(cfg.sync.timeout_s, 600.0)))
    return device


def run(args: argparse.Namespace) -> dict[str, Any]:
    extra = [f"store.url={args.rollouts}"] if args.rollouts else []
    if args.iterations is not None:
        extra.append(f"train.iterations={args.iterations}")
    cfg = config_from_args(args, extra)
    if cfg.train.warm_start != "none":  # it needs the co-located/decoupled/Ray loop's env and evaluation
        raise UserError(f"train.warm_start={cfg.train.warm_start}: the torchrun learner does not clone a "
                        "baseline; expected train.warm_start=none here (skurl train --mode "
                        "colocated|decoupled|ray does)")
    if cfg.train.keep_best:  # it picks among the loop's evaluations, which this learner does not run
        raise UserError("train.keep_best=true: the torchrun learner does not evaluate policies; expected "
                        "train.keep_best=false here (skurl train --mode colocated|decoupled|ray does)")
    if cfg.train.torch_threads:
        torch.set_num_threads(cfg.train.torch_threads)
    device = init_distributed(cfg)
    learner = DDPLearner(cfg, _obs_dim(cfg), _n_actions(cfg), device)
    try:
        return _loop(cfg, args, learner)
    finally:
        learner.close()
        if dist.is_initialized():
            dist.destroy_process_group()


def _loop(cfg: Config, args: argparse.Namespace, learner: DDPLearner) -> dict[str, Any]:
    lead = learner.rank == 0
    if lead:  # first: it moves damaged checkpoints aside, which the other ranks then skip
        restore_latest(learner, args.run_dir)
    if dist.is_initialized():
        dist.barrier()
    if not lead:
        restore_latest(learner, args.run_dir)
    store = open_store(cfg.store)
    publisher = _publisher(cfg) if lead else None
    if publisher is not None:
        publisher.publish(learner.version, learner.weights())
    last: dict[str, Any] = {}
    for it in range(learner.iteration, cfg.train.iterations):
        if lead and cfg.deploy.collector_addresses:
            drive_collectors(cfg, it, learner.version)
        manifests = wait_for_shards(store, it, cfg.deploy.collectors, args.wait_s, args.poll_s)
        start = time.perf_counter()
        if cfg.ppo.sample_skus:
            stats = learner.update(read_columns(store, manifests, None))
        else:
            sl = rank_slice(_total_skus(manifests), learner.rank, learner.world)
            stats = learner.update_slice(read_columns(store, manifests, sl), sl)
        if publisher is not None:
            publisher.publish(learner.version, learner.weights())
        if lead and (learner.iteration % cfg.train.checkpoint_every == 0 or learner.iteration == cfg.train.iterations):
            save_checkpoint(args.run_dir, learner, keep=cfg.train.keep_checkpoints)
        last = {"iteration": it, "version": learner.version, "world": learner.world,
                "learn_seconds": time.perf_counter() - start, **stats}
        if lead:
            print(json.dumps(last), flush=True)
    if lead:
        print(json.dumps({"run_dir": str(args.run_dir), "iterations": learner.iteration,
                          "version": learner.version, "world": learner.world}), flush=True)
    return last


def _obs_dim(cfg: Config) -> int:
    """Feature width of the catalog's observations (sim/layout.py), known before any data:
    version 0 must be published before collectors can collect iteration 0."""
    from skurl.catalog import load_catalog
    from skurl.sim.layout import layout_for

    return layout_for(load_catalog(cfg.catalog), cfg.sim.review_days).schema.dim


def _n_actions(cfg: Config) -> int:
    from skurl.policy.learned import grid_for

    return grid_for(cfg).n


def _publisher(cfg: Config) -> Any:
    if cfg.sync.backend != "redis":
        print(f"skurl.learn: sync.backend={cfg.sync.backend} publishes nothing across processes; "
              "weights are in the checkpoints", file=sys.stderr)
        return None
    from skurl.sync.redis_sync import RedisWeightPublisher

    return RedisWeightPublisher.from_config(cfg.sync, cfg.store)


def drive_collectors(cfg: Config, iteration: int, version: int) -> None:
    """Ask every collector of deploy.collector_addresses (`skurl collector`) for its share of
    `iteration` once it holds `version`; they write their shards to the rollout store."""
    from concurrent.futures import ThreadPoolExecutor

    from skurl.rpc.collector_client import CollectorClient

    def one(address: str) -> None:
        client = CollectorClient(address, cfg.rpc, connect_timeout_s=cfg.deploy.start_timeout_s)
        try:
            client.collect(iteration, cfg.train.seed, iteration, min_version=version, wait_s=cfg.sync.timeout_s)
        finally:
            client.close()

    addresses = list(cfg.deploy.collector_addresses)
    with ThreadPoolExecutor(len(addresses)) as pool:
        for future in [pool.submit(one, a) for a in addresses]:
            future.result()


def wait_for_shards(store: RolloutStore, iteration: int, expected: int, timeout_s: float,
                    poll_s: float) -> list[ShardManifest]:
    """The iteration's manifests once `expected` are listed, in SKU order (sku_start)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = store.list_shards(iteration)
        if len(found) >= expected:
            return sorted(found, key=lambda m: (m.sku_start, m.collector_id))
        if time.monotonic() > deadline:
            raise UserError(f"rollout store {store.url}: iteration {iteration} has {len(found)} shards "
                            f"after {timeout_s:g} s, expected deploy.collectors = {expected}")
        time.sleep(poll_s)


def _shard_skus(m: ShardManifest) -> int:
    for spec in m.arrays:
        if spec.name == Columns.REWARDS:
            return int(spec.shape[1])
    raise UserError(f"rollout shard {m.name}: no '{Columns.REWARDS}' array (not a rollout shard)")


def _total_skus(manifests: list[ShardManifest]) -> int:
    return sum(_shard_skus(m) for m in manifests)


def read_columns(store: RolloutStore, manifests: list[ShardManifest], sl: RankSlice | None) -> Rollout:
    """The SKU columns `sl` of the iteration's global rollout (shards side by side in
    SKU order), reading only the shards that overlap them; None reads every column."""
    versions = {m.policy_version for m in manifests}
    if len(versions) != 1:
        raise UserError(f"rollout shards of iteration {manifests[0].iteration} hold policy versions "
                        f"{sorted(versions)}, expected one")
    parts, offset = [], 0
    for m in manifests:
        n = _shard_skus(m)
        lo, hi = (offset, offset + n) if sl is None else (max(sl.start, offset), min(sl.stop, offset + n))
        if lo < hi:
            arrays = store.get_shard(m)
            part = Rollout(**{k: arrays[k] for k in Rollout.__dataclass_fields__ if k in arrays},
                           policy_version=m.policy_version, seed=int(m.meta.get("seed", 0)),
                           episode=int(m.meta.get("episode", m.iteration)))
            parts.append(part if (lo, hi) == (offset, offset + n) else part.select_skus(np.arange(lo - offset, hi - offset)))
        offset += n
    return parts[0] if len(parts) == 1 else Rollout.concat_skus(parts)


if __name__ == "__main__":
    sys.exit(main())
