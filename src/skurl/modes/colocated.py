"""`skurl train` (--mode colocated): simulator, collectors and learner in one process.

The one loop (train/loop.py) with in-process collectors over the training shards' envs,
weights in memory (the sync barrier), and train.staleness's collect-ahead around them
(collect/staleness.py). Like Sample Factory's serial runner: a mode is where the parts live.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import IO, Any, cast

from skurl.collect.collectors import Collected, Collectors, LocalCollectors, SampleIndex
from skurl.collect.near_policy import with_staleness
from skurl.config import Config, load_config
from skurl.learn.checkpoint import refuse_existing
from skurl.policy.learned import run_config_file
from skurl.sync.inproc import InProcWeights
from skurl.telemetry.metrics import business_from_totals, get_metrics
from skurl.train.evaluation import TRAINED
from skurl.train.loop import Parts, Trainer, TrainResult


def local_collectors(trainer: Trainer) -> Collectors:
    """Collectors in this process over the training shards' envs."""
    core, t = trainer.core, trainer.cfg.train
    latest = cast(InProcWeights, trainer.weights)  # Parts.weights' default: in_process_weights
    return with_staleness(t, latest, trainer.run_dir, lambda weights: RecordingCollectors(
        LocalCollectors(core.local_env, len(core.shards), trainer.model, core.grid, weights, core.timer, train=t),
        trainer.run_dir.name, trainer.cfg.sim.backorders), trainer.learner.sample_index)


class RecordingCollectors:
    """LocalCollectors that record what a collector process records (collector_* and the
    episode's business_* metrics), so a colocated /metrics shows the same families."""

    def __init__(self, inner: LocalCollectors, run_name: str, backorders: bool) -> None:
        self.inner, self.run_name, self.backorders = inner, run_name, backorders

    def collect(self, iteration: int, seed: int, version: int, sample: SampleIndex) -> Collected:
        start = time.perf_counter()
        out = self.inner.collect(iteration, seed, version, sample)
        seconds = time.perf_counter() - start
        rows = int(out.rollout.rewards.size)
        m = get_metrics()
        m.collector_episodes_total.inc()
        m.collector_episode_duration_seconds.observe(seconds)
        m.collector_steps_per_second.set(rows / max(seconds, 1e-9))
        m.collector_buffer_size.set(rows)
        totals = getattr(self.inner.env_of(iteration % self.inner.shards), "totals", None)
        if callable(totals):
            sums = {k: float(v.sum()) for k, v in totals().items()}
            m.record_business(self.run_name, "collect", business_from_totals(sums, rows, self.backorders))
        return out

    def close(self) -> None:
        self.inner.close()


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
