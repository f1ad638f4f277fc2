"""Start or resume a run in any mode: the one place that does it (argparse stays in
commands/). A mode comes from a `ModeFor(cfg, run_dir)` factory (modes/__init__.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import IO

from skurl.collect.collectors import Collectors
from skurl.config import Config, load_config
from skurl.learn.checkpoint import refuse_existing
from skurl.policy.learned import run_config_file
from skurl.train.loop import Trainer, TrainResult
from skurl.train.mode import Mode

ModeFor = Callable[[Config, Path], Mode]  # (the run's config, its directory) -> its mode
RunWrap = Callable[[Collectors, Trainer], Collectors]  # a wrapper around a run's collectors (tests inject faults)


def start(mode_for: ModeFor, cfg: Config, run_dir: str | Path, *, stream: IO[str] | None = None,
          stop_after: int | None = None, baseline: bool = True, wrap: RunWrap | None = None) -> TrainResult:
    """A new run in `run_dir` (refuses a directory that already holds checkpoints)."""
    refuse_existing(run_dir)
    trainer = Trainer(cfg, run_dir, mode_for(cfg, Path(run_dir)), stream=stream, baseline=baseline)
    return run_trainer(trainer, stop_after, wrap)


def resume(mode_for: ModeFor, run_dir: str | Path, overrides: list[str] | None = None, *,
           stream: IO[str] | None = None, stop_after: int | None = None, baseline: bool = True,
           wrap: RunWrap | None = None) -> TrainResult:
    """Continue the run in `run_dir` from its latest checkpoint, with its own config (plus
    `overrides`, e.g. train.iterations=N to extend it)."""
    cfg = load_config(run_config_file(run_dir, "--resume"), overrides)
    trainer = Trainer(cfg, run_dir, mode_for(cfg, Path(run_dir)), resume=True, stream=stream, baseline=baseline)
    return run_trainer(trainer, stop_after, wrap)


def run_trainer(trainer: Trainer, stop_after: int | None = None, wrap: RunWrap | None = None) -> TrainResult:
    """Run `trainer` (to train.iterations, or `stop_after` in total), `wrap` around its collectors."""
    if wrap is not None:
        trainer.wrap(lambda inner: wrap(inner, trainer))
    return trainer.run(stop_after)
