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
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from skurl.buffer.assemble import ShardAssembly, sample_mask
from skurl.buffer.rollout import Rollout
from skurl.config import Config
from skurl.config_flags import add_config_flags, config_from_args
from skurl.errors import UserError
from skurl.learn.checkpoint import restore_latest, save_checkpoint
from skurl.learn.ddp import DDPLearner, rank_slice
from skurl.learn.learner import resolve_device
from skurl.store import RolloutStore, ShardManifest, open_store
from skurl.sync.wire_versions import WIRE_FILE, WireVersions


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
    feed = ShardFeed(cfg, args, learner)
    last: dict[str, Any] = {}
    try:
        feed.publish()
        for it in range(learner.iteration, cfg.train.iterations):
            rollout = feed.rollout(it)
            start = time.perf_counter()
            if cfg.ppo.sample_skus:
                stats = learner.update(rollout)
            else:
                sl = rank_slice(rollout.num_skus, learner.rank, learner.world)
                stats = learner.update_slice(rollout.select_skus(np.arange(sl.start, sl.stop)), sl)
            feed.publish()
            if lead and (learner.iteration % cfg.train.checkpoint_every == 0
                         or learner.iteration == cfg.train.iterations):
                save_checkpoint(args.run_dir, learner, keep=cfg.train.keep_checkpoints)
                feed.store.delete_before(learner.iteration)  # a restart needs no older shards
            last = {"iteration": it, "version": learner.version, "world": learner.world,
                    "learn_seconds": time.perf_counter() - start, **stats}
            if lead:
                print(json.dumps(last), flush=True)
    finally:
        feed.close()
    if lead:
        print(json.dumps({"run_dir": str(args.run_dir), "iterations": learner.iteration,
                          "version": learner.version, "world": learner.world}), flush=True)
    return last


class ShardFeed:
    """Where each iteration's rollout comes from: rank 0 publishes the weights (as a wire
    version every collector takes as newer, sync/wire_versions.py) and asks the collectors
    of deploy.collector_addresses for their shares; every rank then reads the iteration's
    shards from the store and assembles the catalog's rollout (buffer/assemble.py: packed
    obs decoded, SKUs in catalog order), as `--mode decoupled` does."""

    def __init__(self, cfg: Config, args: argparse.Namespace, learner: DDPLearner) -> None:
        from skurl.catalog import load_catalog

        self.cfg, self.args, self.learner = cfg, args, learner
        self.lead = learner.rank == 0
        self.store = open_store(cfg.store)
        self.sku_ids = load_catalog(cfg.catalog).sku_id
        self.assembly = ShardAssembly(self.sku_ids, cfg.sim.days, learner.model.obs_dim)
        self.publisher = _publisher(cfg) if self.lead else None
        floor = 0
        if self.publisher is not None:
            held = self.publisher.published_version()
            floor = 0 if held is None else held + 1
        self.wire = WireVersions(Path(args.run_dir) / WIRE_FILE, floor=floor)
        self.published: tuple[int, int] | None = None  # (learner version, wire version)

    def publish(self) -> None:
        """Rank 0: the learner's weights under a new wire version (once per version)."""
        if not self.lead or (self.published and self.published[0] == self.learner.version):
            return
        wire = self.wire.new(self.learner.version) if self.publisher is not None else self.learner.version
        if self.publisher is not None:
            self.publisher.publish(wire, self.learner.weights())
        self.published = (self.learner.version, wire)

    def rollout(self, it: int) -> Rollout:
        """Iteration `it`'s rollout in catalog row order, the same on every rank."""
        cfg, learner = self.cfg, self.learner
        driven = bool(cfg.deploy.collector_addresses)
        wire = self.published[1] if self.published else -1
        n = len(self.sku_ids)
        chosen = self.assembly.chosen = sample_mask(n, learner.sample_index(n))
        if self.lead and driven:
            drive_collectors(cfg, it, wire, None if chosen is None else self.sku_ids[chosen])
        wire = _broadcast_int(wire, learner.device)  # the version the shards must hold
        manifests = wait_for_shards(self.store, it, cfg.deploy.collectors, self.args.wait_s,
                                    self.args.poll_s, version=wire if driven else None)
        versions = {m.policy_version for m in manifests}
        if len(versions) != 1:
            raise UserError(f"rollout shards of iteration {it} hold policy versions {sorted(versions)}, "
                            "expected one")
        held = versions.pop()
        parts = [self._unpacked(m, it) for m in manifests]
        version = learner.version if held == wire else held
        return self.assembly.assemble(parts, version=version, seed=cfg.train.seed, episode=it)

    def _unpacked(self, manifest: ShardManifest, it: int) -> dict[str, np.ndarray]:
        arrays = self.assembly.unpack(self.store.get_shard(manifest))
        problem = arrays if isinstance(arrays, str) else self.assembly.problem(arrays)
        meta = manifest.meta
        if not problem and "seed" in meta and (meta.get("seed"), meta.get("episode", it)) != (self.cfg.train.seed, it):
            problem = (f"is episode {meta.get('episode')} of seed {meta.get('seed')}, expected {it} "
                       f"of train.seed={self.cfg.train.seed}")
        if problem:
            raise UserError(f"rollout shard {manifest.name} {problem}; not trained on")
        assert isinstance(arrays, dict)
        return arrays

    def close(self) -> None:
        if self.publisher is not None:
            self.publisher.close()


def _broadcast_int(value: int, device: torch.device) -> int:
    """Rank 0's `value` on every rank (a tensor collective: nothing is pickled)."""
    if not dist.is_initialized():
        return value
    t = torch.tensor([value], dtype=torch.int64, device=device)
    dist.broadcast(t, src=0)
    return int(t.item())


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


def drive_collectors(cfg: Config, iteration: int, version: int, obs_sku_ids: np.ndarray | None = None) -> None:
    """Ask every collector of deploy.collector_addresses (`skurl collector`) for its share of
    `iteration` once it holds `version`; they write their shards to the rollout store
    (keeping the observations of `obs_sku_ids` only, the learner's sample, when given)."""
    from concurrent.futures import ThreadPoolExecutor

    from skurl.rpc.collector_client import CollectorClient

    def one(address: str) -> None:
        client = CollectorClient(address, cfg.rpc, connect_timeout_s=cfg.deploy.start_timeout_s)
        try:
            client.collect(iteration, cfg.train.seed, iteration, min_version=version,
                           wait_s=cfg.sync.timeout_s, obs_sku_ids=obs_sku_ids)
        finally:
            client.close()

    addresses = list(cfg.deploy.collector_addresses)
    with ThreadPoolExecutor(len(addresses)) as pool:
        for future in [pool.submit(one, a) for a in addresses]:
            future.result()


def wait_for_shards(store: RolloutStore, iteration: int, expected: int, timeout_s: float,
                    poll_s: float, version: int | None = None) -> list[ShardManifest]:
    """The iteration's manifests once `expected` are listed (of wire `version` only, when
    given: an earlier attempt's shards do not count), in SKU order (sku_start)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = [m for m in store.list_shards(iteration) if version is None or m.policy_version == version]
        if len(found) >= expected:
            return sorted(found, key=lambda m: (m.sku_start, m.collector_id))
        if time.monotonic() > deadline:
            raise UserError(f"rollout store {store.url}: iteration {iteration} has {len(found)} shards "
                            f"after {timeout_s:g} s, expected deploy.collectors = {expected}")
        time.sleep(poll_s)


if __name__ == "__main__":
    sys.exit(main())
