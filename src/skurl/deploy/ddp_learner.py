"""`python -m skurl.deploy.ddp_learner`: the DDP learner, one process per rank under torchrun.

    torchrun --nproc_per_node 2 -m skurl.deploy.ddp_learner --config run.yaml --run-dir runs/x
    python -m skurl.deploy.ddp_learner --nproc 2 --run-dir runs/x   # starts torchrun itself

Every rank runs the one training iteration (ColocatedRun.iteration) with a DDPLearner and
the RankFeed collectors (deploy/ddp_feed.py). Only rank 0 drives the collectors of
deploy.collector_addresses, publishes the weights, evaluates, keeps the best policy, writes
checkpoints, metrics.jsonl and the report and serves /metrics; the others follow its
decisions through tensor broadcasts. A run dir that holds checkpoints is resumed.
Backend: NCCL when the learner device is a GPU, gloo on CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import IO, Any

import torch
import torch.distributed as dist

from skurl.buffer.assemble import ShardAssembly
from skurl.config import Config
from skurl.config_flags import add_config_flags, config_from_args
from skurl.deploy.colocated import ColocatedRun, TrainResult
from skurl.deploy.ddp_feed import (
    DrivenShards,
    RankFeed,
    RecordingStore,
    ShardReader,
    StoredShards,
    broadcast_ints,
    broadcast_state,
)
from skurl.errors import ConfigError, UserError
from skurl.learn.checkpoint import latest_checkpoint
from skurl.learn.ddp import DDPLearner
from skurl.learn.learner import resolve_device
from skurl.policy.actions import ActionGrid
from skurl.policy.learned import grid_for
from skurl.sim.layout import layout_for
from skurl.store import open_store

ENTRY = "skurl.deploy.ddp_learner"


class DDPRun(ColocatedRun):
    """The run of one rank: ColocatedRun's loop with a DDPLearner and a RankFeed."""

    mode = "decoupled"  # its collectors are decoupled ones; --resume continues there

    def __init__(self, cfg: Config, run_dir: str | Path, device: torch.device, *, weights: Any = None,
                 resume: bool = False, stream: IO[str] | None = None, baseline: bool = True,
                 wait_s: float = 3600.0, poll_s: float = 0.5) -> None:
        self.device = device
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        self.lead = self.rank == 0
        super().__init__(cfg, run_dir, resume=resume, stream=stream, baseline=baseline and self.lead)
        if not self.lead:
            self.best = None  # rank 0 keeps it
        self.store = open_store(cfg.store)
        assembly = ShardAssembly(self.catalog.sku_id, cfg.sim.days, self.learner.model.obs_dim)
        reader = ShardReader(self.store, assembly, wait_s=wait_s, poll_s=poll_s)
        self._collectors = RankFeed(self._lead_shards(reader, weights, resume) if self.lead else None,
                                    reader, device)

    def _lead_shards(self, reader: ShardReader, backend: Any, resume: bool) -> StoredShards | DrivenShards:
        """Rank 0's collection: the driven collectors, or the shards others write."""
        cfg = self.cfg
        if backend is not None:
            from skurl.deploy.decoupled_run import WirePublisher
            from skurl.sync.wire_versions import WIRE_FILE, WireVersions

            self.weights = WirePublisher(backend, WireVersions(self.run_dir / WIRE_FILE))
        if not cfg.deploy.collector_addresses:
            if backend is not None:  # others' collectors take these weights from the backend
                held = backend.published_version()
                self.weights.wire.raise_floor(0 if held is None else held + 1)
                self.weights.publish(self.learner.version, self.learner.weights())
            return StoredShards(reader, cfg.deploy.collectors)
        from skurl.deploy.decoupled_run import GrpcCollectors
        from skurl.deploy.remote_grid import publish_center

        recording = RecordingStore(self.store)
        grpc = GrpcCollectors(cfg, cfg.deploy.collector_addresses, recording, self.weights, self.learner.weights,
                              reader.assembly, self.timer, resumed=resume, run_name=self.run_dir.name,
                              grid_center=publish_center(self.store, self.grid.tuned))
        self.weights.wire.raise_floor(grpc.version_floor(backend))
        return DrivenShards(grpc, recording)

    def make_learner(self, obs_dim: int, n_actions: int) -> DDPLearner:
        return DDPLearner(self.cfg, obs_dim, n_actions, self.device)

    def restore(self) -> dict[str, Any]:
        """Rank 0 first: it moves damaged checkpoints aside, which the others then skip."""
        meta = super().restore() if self.lead else {}
        if dist.is_initialized():
            dist.barrier()
        return meta if self.lead else super().restore()

    def _grid(self, resume: bool) -> ActionGrid:
        # Only rank 0 tunes a grid centre (the collectors and the evaluation use it); the
        # others need the grid's size only.
        return super()._grid(resume) if self.lead else grid_for(self.cfg)

    def _env(self, shard: int) -> Any:
        from skurl.deploy.decoupled_run import _SchemaOnly

        return _SchemaOnly(layout_for(self.catalog, self.cfg.sim.review_days).schema)

    def warm_start_env(self) -> Any:
        return self._local_env(0)

    def warm_start(self) -> dict[str, Any]:
        """Rank 0 clones the baseline (its statistics its own); every rank takes its weights."""
        assert isinstance(self.learner, DDPLearner)
        out: dict[str, Any] = {}
        if self.lead:
            with self.learner.local_statistics():
                out = super().warm_start()
        broadcast_state(self.learner.model.state_dict())
        self.learner.version = broadcast_ints([self.learner.version], self.device)[0]
        return out

    def checkpoint(self, it: int) -> bool:
        if not self.lead or not super().checkpoint(it):
            return False
        self.store.delete_before(self.learner.iteration)  # a restart needs no older shards
        return True

    def run(self, stop_after: int | None = None) -> TrainResult:
        """Rank 0: ColocatedRun.run; the others: the same iterations, writing nothing."""
        if self.lead:
            return super().run(stop_after)
        start, total = self.learner.iteration, self.cfg.train.iterations
        end = total if stop_after is None else min(stop_after, total)
        if start == 0 and self.warm and end > 0:
            self.warm_start()
        for it in range(start, end):
            self.iteration(it)
        return TrainResult(self.run_dir, end, None, None)

    def close(self) -> None:
        self.collectors.close()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"python -m {ENTRY}", description=__doc__.splitlines()[0])
    add_config_flags(p)
    p.add_argument("--rollouts", metavar="URL", help="rollout store: a directory or s3://bucket/prefix (sets store.url)")
    p.add_argument("--run-dir", required=True, help="checkpoints and metrics go here (resumed when it holds checkpoints)")
    p.add_argument("--iterations", type=int, help="total training iterations (sets train.iterations)")
    p.add_argument("--nproc", type=int, default=1, help="ranks on this machine; > 1 re-runs this command under torchrun")
    p.add_argument("--wait-s", type=float, default=3600.0, help="longest wait for an iteration's shards, seconds")
    p.add_argument("--poll-s", type=float, default=0.5, help="interval between rollout store listings, seconds")
    p.add_argument("--metrics-port", type=int, help="rank 0's Prometheus /metrics port "
                   "(default deploy.metrics_base_port; 0 = any free port)")
    p.add_argument("--host", default="127.0.0.1", help="interface of /metrics and of a hosted weights service")
    p.add_argument("--no-baseline", action="store_true", help="skip the tuned baseline")
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
           "-m", ENTRY, *rest]
    return subprocess.run(cmd, check=False).returncode


def init_distributed(cfg: Config, wait_s: float) -> torch.device:
    """Join torchrun's process group (env://) when there is one; the rank's device. The
    timeout covers rank 0's longest step alone (baseline, warm start, an evaluation)."""
    device = resolve_device(cfg.train.device)
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return device
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device.type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, timeout=timedelta(seconds=max(cfg.sync.timeout_s, wait_s, 1800.0)))
    return device


def check_ddp(cfg: Config) -> None:
    """What the DDP learner cannot do: one line naming the key."""
    if cfg.train.collect_skus:
        raise ConfigError(f"train.collect_skus = {cfg.train.collect_skus}: the DDP learner trains on "
                          "every SKU of the collectors' shards; expected 0 (use ppo.sample_skus)")
    if cfg.deploy.collector_addresses:
        from skurl.deploy.roles import check_decoupled

        check_decoupled(cfg)


def run(args: argparse.Namespace) -> TrainResult:
    extra = [f"store.url={args.rollouts}"] if args.rollouts else []
    if args.iterations is not None:
        extra.append(f"train.iterations={args.iterations}")
    cfg = config_from_args(args, extra)
    check_ddp(cfg)
    device = init_distributed(cfg, args.wait_s)
    try:
        return _run_rank(cfg, args, device)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _run_rank(cfg: Config, args: argparse.Namespace, device: torch.device) -> TrainResult:
    from skurl.telemetry.metrics import process_role, serve_metrics

    lead = not dist.is_initialized() or dist.get_rank() == 0
    resume = latest_checkpoint(args.run_dir) is not None
    weights = _weights(cfg, args.host) if lead else None
    port = cfg.deploy.metrics_base_port if args.metrics_port is None else args.metrics_port
    metrics = serve_metrics(port, addr=args.host) if lead else None
    try:
        with process_role("learner"):
            ddp = DDPRun(cfg, args.run_dir, device, weights=weights, resume=resume,
                         baseline=not args.no_baseline, wait_s=args.wait_s, poll_s=args.poll_s)
            try:
                result = ddp.run()
            finally:
                ddp.close()
                assert isinstance(ddp.learner, DDPLearner)
                ddp.learner.close()
    finally:
        if metrics is not None:
            metrics.close()
        if weights is not None:
            weights.close()
    if lead:
        print(json.dumps({"run_dir": str(args.run_dir), "iterations": ddp.learner.iteration,
                          "version": ddp.learner.version, "world": ddp.learner.world,
                          "metrics": metrics.url if metrics is not None else None}), flush=True)
    return result


def _weights(cfg: Config, host: str) -> Any:
    """Rank 0's weights backend (decoupled's), or None under sync.backend=inproc without
    collectors to drive (the weights are then in the checkpoints only)."""
    if cfg.sync.backend == "inproc":
        if cfg.deploy.collector_addresses:
            raise ConfigError("sync.backend = 'inproc': in-process weights cannot reach the "
                              "collectors; expected redis or grpc")
        print(f"{ENTRY}: sync.backend=inproc publishes nothing across processes; weights are in "
              "the checkpoints", file=sys.stderr)
        return None
    from skurl.deploy.decoupled import open_weights

    return open_weights(cfg, host)


if __name__ == "__main__":
    sys.exit(main())
