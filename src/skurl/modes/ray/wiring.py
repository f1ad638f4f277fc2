"""`skurl train --mode ray`: the one loop in the driver, its simulators and collectors Ray actors.

Wiring only: the loop (train/loop.py: learner, evaluation, checkpoints, logs and report in
the driver) with the collectors of a RayCluster (modes/ray/cluster.py) and weights in a Ray
weight slot. With ray.collectors = 1 the collector runs the whole SKU set in catalog order,
so the same config and seed give bit-identical weights to --mode colocated (docs/architecture.md, Modes). A
restarted learner (--resume) trains on the interrupted iteration's shards when they are in
the rollout store (ray.rollouts=store).

`skurl train --mode ray [--address ADDR]` (commands/train_cmd.py) calls `run(cfg, args)`.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path
from typing import IO

from skurl.config import Config, load_config
from skurl.errors import UserError
from skurl.learn.checkpoint import refuse_existing
from skurl.modes.ray.cluster import RayCluster
from skurl.policy.learned import run_config_file
from skurl.train.loop import Parts, Trainer, TrainResult


def parts(cfg: Config) -> Parts:
    """Ray mode's parts: the cluster's collectors and weight slot (started here)."""
    cluster = RayCluster(cfg)
    return Parts("ray", cluster.collectors, weights=cluster.weights, close=cluster.close)


def trainer(cfg: Config, run_dir: str | Path, *, resume: bool = False, stream: IO[str] | None = None,
            baseline: bool = True) -> Trainer:
    """The loop over a new RayCluster (closed with the run, or when building it fails)."""
    return Trainer(cfg, run_dir, parts(cfg), resume=resume, stream=stream, baseline=baseline)


def with_address(cfg: Config, address: str | None) -> Config:
    return cfg if not address else dataclasses.replace(cfg, ray=dataclasses.replace(cfg.ray, address=address))


def train(cfg: Config, run_dir: str | Path, *, stream: IO[str] | None = None,
          stop_after: int | None = None, baseline: bool = True) -> TrainResult:
    """A new --mode ray run in `run_dir` (refuses one that already holds checkpoints)."""
    refuse_existing(run_dir)
    return trainer(cfg, run_dir, stream=stream, baseline=baseline).run(stop_after)


def resume(run_dir: str | Path, overrides: list[str] | None = None, *, address: str | None = None,
           stream: IO[str] | None = None, stop_after: int | None = None, baseline: bool = True) -> TrainResult:
    """Continue a run from its latest checkpoint with its own config (+ overrides)."""
    cfg_file = run_config_file(run_dir, "--resume")
    cfg = with_address(load_config(cfg_file, overrides), address)
    return trainer(cfg, run_dir, resume=True, stream=stream, baseline=baseline).run(stop_after)


def run(cfg: Config | None, args: argparse.Namespace) -> TrainResult:
    """`skurl train --mode ray`: `cfg` from --config/--set (None with --resume RUN_DIR)."""
    address = getattr(args, "address", None)
    baseline = not getattr(args, "no_baseline", False)
    if getattr(args, "resume", None):
        if getattr(args, "config", None) or getattr(args, "run_dir", None):
            raise UserError("skurl train: --resume RUN_DIR takes the run's own config and directory; "
                            "drop --config/--run-dir (use --set to change keys)")
        extra = [f"train.iterations={args.iterations}"] if getattr(args, "iterations", None) is not None else []
        return resume(args.resume, list(getattr(args, "overrides", [])) + extra, address=address, baseline=baseline)
    if cfg is None:
        raise UserError("skurl train --mode ray: no config given")
    run_dir = Path(getattr(args, "run_dir", None) or f"runs/{time.strftime('%Y%m%d-%H%M%S')}")
    return train(with_address(cfg, address), run_dir, baseline=baseline)
