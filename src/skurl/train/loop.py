"""The one training loop: announce a version, collect, learn, publish; evaluation,
keep-best, warm start and checkpoints around it. Every mode runs it: a mode is a choice
of parts built through the Mode protocol (train/mode.py: where the collectors run, how
weights reach them, which learner), not a
subclass (docs/architecture.md, Modes; docs/modes.md)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import yaml

from skurl import atomic
from skurl.collect.collectors import Collectors, sample_rewards
from skurl.collect.staleness import refuse_unbuilt
from skurl.config import Config, config_to_dict
from skurl.json_ready import read_json_or_none
from skurl.learn.checkpoint import save_checkpoint
from skurl.policy.learned import CONFIG_FILE
from skurl.sync.api import WeightBackend
from skurl.telemetry.logger import RunLogger
from skurl.telemetry.metrics import get_metrics
from skurl.telemetry.progress import Progress
from skurl.telemetry.report import forget_evaluations_from, write_report
from skurl.train.core import build_core, save_env_spec, seed_global_rngs, set_threads
from skurl.train.dcl_step import DclStep
from skurl.train.evaluation import Evaluator
from skurl.train.mode import Mode, Observer, Observers
from skurl.train.warm_start import warm_start

if TYPE_CHECKING:
    import torch


MODE_FILE = "mode.json"  # the --mode a run was started in: --resume continues in it
MODES = ("colocated", "decoupled", "ray", "ddp")
Wrap = Callable[[Collectors], Collectors]  # a wrapper around the collectors (figures, fault injection)


@dataclass
class TrainResult:
    run_dir: Path
    iterations: int
    eval: dict[str, Any] | None  # trained policy's last evaluation (EvalResult.to_json())
    baseline: dict[str, Any] | None


def recorded_mode(run_dir: str | Path) -> str | None:
    """The --mode `run_dir` was started in (None for a run that did not record it)."""
    found = read_json_or_none(Path(run_dir) / MODE_FILE)
    mode = found.get("mode") if isinstance(found, dict) else None
    return mode if mode in MODES else None


class Trainer:
    """The components of one run and the loop over its iterations. The mode builds its
    parts in two phases (train/mode.py); `observe` and `wrap` add steps around them."""

    def __init__(self, cfg: Config, run_dir: str | Path, mode: Mode, *, resume: bool = False,
                 stream: IO[str] | None = None, baseline: bool = True,
                 at_least: tuple[int, int] = (0, 0)) -> None:
        self.cfg, self.mode, self.stream, self.resumed = cfg, mode, stream, resume
        self._collectors: Collectors | None = None
        self.wraps: list[Wrap] = []  # around the collectors, innermost first (catalog change, tests)
        self.observers = Observers()
        refuse_unbuilt(cfg.collect, mode.name)
        self.threads = set_threads(cfg)
        seed_global_rngs(cfg.train.seed)  # a resume then restores the checkpoint's states
        self.core = build_core(cfg, Path(run_dir), resume=resume, tune_center=mode.lead, at_least=at_least)
        self.learner = mode.learner(self.core)
        self.wiring = mode.build(self.core, self.learner)
        try:
            self.observers.observers.extend(self.wiring.observers)
            self.evaluator = (Evaluator(self.core, self.learner, baseline=baseline, observer=self.observers)
                              if mode.lead else None)
            # train.algo: how an iteration improves the policy (the rest of the loop is shared)
            self.step: Callable[[int], dict[str, Any]] = (
                DclStep(self.core, self.learner, self.wiring.weights, warm=self.warm,
                        labellers=self.wiring.labellers)
                if cfg.train.algo == "dcl" else self.ppo_step)
        except BaseException:
            self.wiring.close()  # a mode's processes or actors started for this run
            raise

    @property
    def weights(self) -> WeightBackend:
        return self.wiring.weights

    @weights.setter
    def weights(self, weights: WeightBackend) -> None:
        """Put a wrapper around the publisher (tests wait or count there)."""
        self.wiring.weights = weights

    @property
    def metrics_url(self) -> str | None:
        """This process's /metrics, where the mode serves one."""
        return self.wiring.metrics_url

    def observe(self, observer: Observer) -> None:
        self.observers.add(observer)

    def wrap(self, wrap: Wrap) -> None:
        """Put `wrap` around the collectors (before the first iteration)."""
        assert self._collectors is None, "wrappers go around the collectors before they are used"
        self.wraps.append(wrap)

    @property
    def run_dir(self) -> Path:
        return self.core.run_dir

    @property
    def collectors(self) -> Collectors:
        """Built on first use (a mode's parts may start late), with the wrappers around."""
        if self._collectors is None:
            collectors = self.wiring.collectors
            for wrap in [*self.wraps, *self.wiring.around]:
                collectors = wrap(collectors)
            self._collectors = collectors
        return self._collectors

    @property
    def warm(self) -> bool:
        return self.cfg.train.warm_start != "none"

    def trains_policy(self, it: int) -> bool:
        """False for the iterations after a warm start that fit the critic to the clone only."""
        return not (self.warm and it < self.cfg.train.warm_start_critic)

    def run(self, stop_after: int | None = None) -> TrainResult:
        """Iterate from the restored iteration to train.iterations (or stop after
        `stop_after` iterations in total, as an interruption would)."""
        try:
            return self._lead(stop_after) if self.mode.lead else self._follow(stop_after)
        finally:
            self.close()

    def close(self) -> None:
        try:
            (self._collectors or self.wiring.collectors).close()
        finally:
            self.wiring.close()

    def _end(self, stop_after: int | None) -> int:
        total = self.cfg.train.iterations
        return total if stop_after is None else min(stop_after, total)

    def _warm_start(self, start: int, end: int) -> dict[str, Any]:
        if start == 0 and self.warm and end > 0:
            env = self.wiring.warm_start_env or self.core.local_env(0)
            return self.wiring.around_warm_start(lambda: warm_start(self.core, self.learner, self.weights, env,
                                                                    self.evaluator))
        return {}

    def _follow(self, stop_after: int | None) -> TrainResult:
        """A follower's run: the same iterations, writing nothing."""
        start, end = self.learner.iteration, self._end(stop_after)
        self._warm_start(start, end)
        for it in range(start, end):
            self.iteration(it)
        return TrainResult(self.run_dir, end, None, None)

    def _lead(self, stop_after: int | None) -> TrainResult:
        cfg, start, end = self.cfg, self.learner.iteration, self._end(stop_after)
        evaluator = self.evaluator
        assert evaluator is not None
        self._write_run_files()
        logger = RunLogger(self.run_dir)
        if start > 0 or logger.has_records():
            # Records past the checkpoint (or, on a fresh start, any: left by an attempt that
            # crashed before its first checkpoint) are redone; kept, they would be doubled.
            logger.truncate_after(start - 1)
        forget_evaluations_from(self.run_dir, start)
        began = time.perf_counter()
        try:
            evaluator.ensure_baseline()
            warm = self._warm_start(start, end)
            with Progress(cfg.train.iterations, initial=start, stream=self.stream) as progress:
                for it in range(start, end):
                    scalars = self.iteration(it)
                    if it == start:
                        scalars.update(warm)
                        scalars.update(self.core.first_scalars)
                    if self.evaluation_due(it, end):
                        scalars.update(evaluator.evaluate(it))
                    scalars["wall_seconds"] = time.perf_counter() - began  # since this process's run() began
                    logger.log(it, scalars)
                    self.checkpoint(it)
                    progress.update(it, **self._progress_fields(scalars))
        finally:
            logger.close()
        if end == cfg.train.iterations:
            evaluator.ship_best(end - 1)
            write_report(self.run_dir)
        return TrainResult(self.run_dir, end, evaluator.last, evaluator.baseline)

    def _write_run_files(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        atomic.write_text(self.run_dir / CONFIG_FILE, yaml.safe_dump(config_to_dict(self.cfg), sort_keys=False))
        atomic.write_text(self.run_dir / MODE_FILE, json.dumps({"mode": self.mode.name}) + "\n")
        save_env_spec(self.run_dir, self.core.widths, self.core.catalog.has_network)

    def _progress_fields(self, scalars: dict[str, Any]) -> dict[str, Any]:
        """What the bar shows: the objective vs the baseline (cost, or profit when
        sim.reward=profit, where a higher cost can be the price of more sales)."""
        keys: tuple[str, ...] = ("transitions_per_s", "reward_mean")
        keys += ("eval_cost", "baseline_cost") if self.cfg.sim.reward == "cost" else ("eval_profit", "baseline_profit")
        return {k: scalars.get(k) for k in keys}

    def evaluation_due(self, it: int, end: int) -> bool:
        """Every train.eval_every iterations, the last, and where a step asks for one."""
        return _due(it, self.cfg.train.eval_every, end) or self.observers.evaluation_due(it)

    def checkpoint(self, it: int) -> bool:
        """Save the learner's state after iteration `it` when train.checkpoint_every says so.
        Called after the iteration's record (with its evaluation) is logged: a crash in
        between costs the iteration, which the resumed run redoes bit for bit, never its
        record (checkpointing first lost the record of an iteration that crashed while
        being evaluated)."""
        if not _due(it, self.cfg.train.checkpoint_every, self.cfg.train.iterations):
            return False
        self.observers.before_checkpoint(self.learner.iteration)
        save_checkpoint(self.run_dir, self.learner, keep=self.cfg.train.keep_checkpoints)
        self.observers.on_checkpoint(it)
        return True

    def iteration(self, it: int) -> dict[str, Any]:
        """One iteration of train.algo; its scalars."""
        return self.step(it)

    def ppo_step(self, it: int) -> dict[str, Any]:
        """collect -> learn -> publish, in every mode; the iteration's scalars."""
        cfg, timer = self.cfg, self.core.timer
        timer.reset()
        start = time.perf_counter()
        batch = self.collectors.collect(it, cfg.train.seed, self.learner.version, self.learner.sample_index)
        if cfg.ppo.sample_skus:
            batch.scalars.update(sample_rewards(batch.rollout, self.learner.sample_index(batch.rollout.num_skus)))
        with timer.stage("learn"):
            learn_start = time.perf_counter()
            stats = self.learner.update(batch.rollout, train_policy=self.trains_policy(it))
            learned = time.perf_counter() - learn_start
        with timer.stage("sync"):
            self.weights.publish(self.learner.version, self.learner.weights())
        record_learner(learned, self.learner.device)
        seconds = time.perf_counter() - start
        return {
            **stats, **batch.scalars,  # transitions: collected, not trained on
            "trained_transitions": stats["transitions"],
            "policy_version": self.learner.version,
            "iteration_seconds": seconds,
            **time_shares(batch.scalars, seconds),
            **timer.as_scalars(exclusive=True),
        }


def _due(it: int, every: int, end: int) -> bool:
    return (every > 0 and (it + 1) % every == 0) or it + 1 == end


def record_learner(seconds: float, device: torch.device) -> None:
    """The update's time and memory (Learner.update records its losses and version)."""
    m = get_metrics()
    m.learner_training_step_duration_seconds.observe(seconds)
    m.record_gpu_memory(device)


def time_shares(scalars: dict[str, Any], seconds: float) -> dict[str, float]:
    """Shares of an iteration that took `seconds`: waiting at the barrier, and collectors
    idle (not busy answering the learner), where the collection reported those times."""
    out = {}
    if "barrier_wait_s" in scalars:
        out["barrier_share"] = float(scalars["barrier_wait_s"]) / max(seconds, 1e-9)
    if "collector_busy_s" in scalars:
        out["collector_idle_share"] = max(1.0 - float(scalars["collector_busy_s"]) / max(seconds, 1e-9), 0.0)
    return out
