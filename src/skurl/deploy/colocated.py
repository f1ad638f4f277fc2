"""`skurl train` (--mode colocated): simulator, collectors and learner in one process.

The one loop (train/loop.py) with in-process collectors over the training shards' envs,
weights in memory (the sync barrier), and train.staleness's collect-ahead around them
(collect/staleness.py). Like Sample Factory's serial runner: a mode is where the parts live.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any, cast

from skurl.collect.collectors import Collectors, LocalCollectors
from skurl.collect.near_policy import with_staleness
from skurl.config import Config, load_config
from skurl.learn.checkpoint import refuse_existing
from skurl.policy.learned import run_config_file
from skurl.sync.inproc import InProcWeights
from skurl.telemetry.metrics import get_metrics
from skurl.train.evaluation import TRAINED
from skurl.train.loop import Parts, Trainer, TrainResult


def local_collectors(trainer: Trainer) -> Collectors:
    """Collectors in this process over the training shards' envs."""
    core, t = trainer.core, trainer.cfg.train
    latest = cast(InProcWeights, trainer.weights)  # Parts.weights' default: in_process_weights
    return with_staleness(t, latest, trainer.run_dir, lambda weights: LocalCollectors(
        core.local_env, len(core.shards), trainer.model, core.grid, weights, core.timer,
        chunk=t.chunk, infer_dtype=t.infer_dtype, record_values=t.collect_values), trainer.learner.sample_index)


def parts() -> Parts:
    return Parts("colocated", local_collectors)


def trainer(cfg: Config, run_dir: str | Path, *, resume: bool = False, stream: IO[str] | None = None,
            baseline: bool = True) -> Trainer:
    """The colocated Trainer; each evaluation's business figures go to Prometheus (as the
    decoupled learner's do)."""
    t = Trainer(cfg, run_dir, parts(), resume=resume, stream=stream, baseline=baseline)
    evaluator = t.evaluator
    if evaluator is not None:
        evaluator.on_evaluated.append(
            lambda it, out: get_metrics().record_business(t.run_dir.name, TRAINED,
                                                         cast("dict[str, Any]", evaluator.last)))  # set before hooks
    return t


def train(cfg: Config, run_dir: str | Path, *, stream: IO[str] | None = None,
          stop_after: int | None = None, baseline: bool = True) -> TrainResult:
    """A new run in `run_dir` (refuses a directory that already holds checkpoints)."""
    refuse_existing(run_dir)
    return trainer(cfg, run_dir, stream=stream, baseline=baseline).run(stop_after)


def resume(run_dir: str | Path, overrides: list[str] | None = None, *, stream: IO[str] | None = None,
           stop_after: int | None = None, baseline: bool = True) -> TrainResult:
    """Continue the run in `run_dir` from its latest checkpoint, with its own config
    (plus `overrides`, e.g. train.iterations=N to extend it)."""
    cfg = load_config(run_config_file(run_dir, "--resume"), overrides)
    return trainer(cfg, run_dir, resume=True, stream=stream, baseline=baseline).run(stop_after)
