"""`python -m skurl.modes.ddp.learner`: the DDP learner, one process per rank under torchrun.

    torchrun --nproc_per_node 2 -m skurl.modes.ddp.learner --config run.yaml --run-dir runs/x
    python -m skurl.modes.ddp.learner --nproc 2 --run-dir runs/x   # starts torchrun itself

Every rank runs the one loop (train/loop.py) with a DDPLearner and the RankFeed collectors
(modes/ddp/parts.py). Only rank 0 drives the collectors of
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
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from skurl.config import Config
from skurl.config.flags import add_config_flags, config_from_args
from skurl.errors import ConfigError, UserError
from skurl.learn.checkpoint import latest_checkpoint
from skurl.learn.ddp import DDPLearner
from skurl.modes.ddp.parts import RankMode, check_ddp, init_distributed
from skurl.train.loop import Trainer, TrainResult

if TYPE_CHECKING:
    from skurl.sync.grpc import HostedGrpcWeights
    from skurl.sync.redis import RedisWeightPublisher

ENTRY = "skurl.modes.ddp.learner"


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
            check_ddp(_config(args))  # one line and exit 2 here, not K ranks' tracebacks under torchrun
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


def _config(args: argparse.Namespace) -> Config:
    extra = [f"store.url={args.rollouts}"] if args.rollouts else []
    if args.iterations is not None:
        extra.append(f"train.iterations={args.iterations}")
    return config_from_args(args, extra)


def run(args: argparse.Namespace) -> TrainResult:
    cfg = _config(args)
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
            rank = RankMode(cfg, device, weights, wait_s=args.wait_s, poll_s=args.poll_s)
            ddp = Trainer(cfg, args.run_dir, rank, resume=resume, baseline=not args.no_baseline)
            try:
                result = ddp.run()
            finally:
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


def _weights(cfg: Config, host: str) -> RedisWeightPublisher | HostedGrpcWeights | None:
    """Rank 0's weights backend (decoupled's), or None under sync.backend=inproc without
    collectors to drive (the weights are then in the checkpoints only)."""
    if cfg.sync.backend == "inproc":
        if cfg.deploy.collector_addresses:
            raise ConfigError("sync.backend = 'inproc': in-process weights cannot reach the "
                              "collectors; expected redis or grpc")
        print(f"{ENTRY}: sync.backend=inproc publishes nothing across processes; weights are in "
              "the checkpoints", file=sys.stderr)
        return None
    from skurl.modes.decoupled.roles import check_decoupled
    from skurl.sync import open_backend

    check_decoupled(cfg)
    return open_backend(cfg, host)


if __name__ == "__main__":
    sys.exit(main())
