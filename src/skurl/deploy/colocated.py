"""Co-located training: simulator, collector and learner in one process (DESIGN 6).

Wiring only, like Sample Factory's serial runner: each iteration the collector takes the
published weights (the sync barrier), collects one episode of the training SKUs, the
learner runs PPO on it and publishes the next version; every `train.eval_every`
iterations the greedy policy is scored on held-out seeds against the tuned baseline.
Stage timings (simulate / infer / learn / sync / eval), metrics.jsonl + TensorBoard,
checkpoints, eval.json and report.md land in the run directory.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch
import yaml

from skurl import atomic
from skurl.catalog import Catalog, load_catalog
from skurl.collect.collectors import Collectors, LocalCollectors
from skurl.collect.evaluate import EvalResult, eval_subset, evaluate, make_env
from skurl.collect.staleness import refuse_unbuilt, with_staleness
from skurl.config import Config, config_to_dict, load_config
from skurl.deploy.best import BestKeeper, catalog_digest, validation_score, validation_seed
from skurl.deploy.collect_report import time_shares
from skurl.learn.checkpoint import (
    model_state,
    no_checkpoint_error,
    refuse_existing,
    restore_latest,
    save_checkpoint,
)
from skurl.learn.learner import Learner
from skurl.policy.actions import ActionGrid
from skurl.policy.learned import CONFIG_FILE, LearnedPolicy, grid_for, run_config_file
from skurl.policy.nets import ActorCritic
from skurl.sim.layout import catalog_widths
from skurl.sync.inproc import InProcWeights
from skurl.telemetry.logger import RunLogger
from skurl.telemetry.metrics import get_metrics
from skurl.telemetry.progress import Progress
from skurl.telemetry.report import forget_evaluations_from, write_eval, write_report
from skurl.telemetry.stages import StageTimer

BASELINE = "forecast-base-stock"  # the planner's policy the trained one must beat (tuned)
BASELINE_FILE = "baseline.json"
MODE_FILE = "mode.json"  # the --mode a run was started in: --resume continues in it
TRAINED = "ppo"
MODES = ("colocated", "decoupled", "ray")


@dataclass
class TrainResult:
    run_dir: Path
    iterations: int
    eval: dict[str, Any] | None  # trained policy's last evaluation (EvalResult.to_json())
    baseline: dict[str, Any] | None


def set_threads(cfg: Config) -> int:
    threads = cfg.train.torch_threads or os.cpu_count() or 1
    torch.set_num_threads(threads)
    return threads


def training_shards(catalog: Catalog, collect_skus: int) -> list[np.ndarray]:
    """Row indices of the SKU sets collected in turn (one per iteration, round robin):
    the whole catalog, or group-closed shards of about `collect_skus` SKUs."""
    n = len(catalog)
    if collect_skus == 0 or collect_skus >= n:
        return [np.arange(n, dtype=np.int64)]
    from skurl.catalog.partition import partition

    shards = partition(catalog, -(-n // collect_skus), "equal")
    return [s for s in shards if s.size]


def recorded_mode(run_dir: str | Path) -> str | None:
    """The --mode `run_dir` was started in (None for a run that did not record it)."""
    found = _read_json(Path(run_dir) / MODE_FILE)
    mode = found.get("mode") if isinstance(found, dict) else None
    return mode if mode in MODES else None


class ColocatedRun:
    """The components of one run and the loop over iterations."""

    mode = "colocated"  # recorded in the run dir (MODE_FILE)

    def __init__(self, cfg: Config, run_dir: str | Path, *, resume: bool = False,
                 stream: IO[str] | None = None, baseline: bool = True) -> None:
        refuse_unbuilt(cfg.train, self.mode)
        self.cfg, self.run_dir, self.stream = cfg, Path(run_dir), stream
        self.threads = set_threads(cfg)
        self.timer = StageTimer()
        self.catalog = load_catalog(cfg.catalog)
        self.widths = catalog_widths(self.catalog)  # every shard and eval subset shows these
        self.shards = training_shards(self.catalog, cfg.train.collect_skus)
        self._envs: dict[int, Any] = {}
        self._collectors: Collectors | None = None
        self.first_scalars: dict[str, Any] = {}  # for the record of this process's first iteration
        self.grid = self._grid(resume)
        env0 = self._env(0)
        self.learner = self.make_learner(env0.schema.dim, self.grid.n)
        self.meta: dict[str, Any] = self.restore() if resume else {}
        self.weights = InProcWeights(TRAINED)
        self.weights.publish(self.learner.version, self.learner.weights())
        self.model = ActorCritic.from_state(self.learner.weights())
        self.eval_model = ActorCritic.from_state(self.learner.weights())  # built once: no RNG draws later
        self.eval_catalog = eval_subset(self.catalog, cfg.eval.skus)
        self.eval_env: Any = None
        self.want_baseline = baseline
        self.baseline: dict[str, Any] | None = None
        self.best = BestKeeper(self.run_dir, self.eval_catalog, self.learner.iteration) if cfg.train.keep_best else None
        self.last_eval: dict[str, Any] | None = None

    def make_learner(self, obs_dim: int, n_actions: int) -> Learner:
        """The run's learner (the DDP learner puts its own here)."""
        return Learner(self.cfg, obs_dim, n_actions)

    def restore(self) -> dict[str, Any]:
        """Load the latest checkpoint into the learner; its meta."""
        restored = restore_latest(self.learner, self.run_dir)
        if restored is None:
            raise no_checkpoint_error(self.run_dir, f"--resume {self.run_dir}")
        return restored[1]

    def _grid(self, resume: bool) -> ActionGrid:
        """The run's action grid; policy.actions.z_center=tuned: centred on the baseline's
        per-SKU factors, tuned on the training catalog at a fresh start (a resumed run reads
        back the ones it started with). The tuning's seconds go into the first record."""
        grid = grid_for(self.cfg)
        if not grid.needs_center:
            return grid
        from skurl.policy.grid_center import CENTER_FILE, ensure_center

        began = time.perf_counter()
        if not resume:  # a fresh start tunes anew: a leftover file may be another config's
            (self.run_dir / CENTER_FILE).unlink(missing_ok=True)
        center = ensure_center(self.cfg, self.run_dir, self.catalog)
        self.first_scalars["grid_center_seconds"] = time.perf_counter() - began
        return grid.with_center(center)

    def _env(self, shard: int) -> Any:
        if shard not in self._envs:
            self._envs[shard] = self._local_env(shard)
        return self._envs[shard]

    def _local_env(self, shard: int) -> Any:
        """A new in-process env of training shard `shard`."""
        rows = self.shards[shard]
        cat = self.catalog if rows.size == len(self.catalog) else self.catalog.subset(rows)
        return make_env(cat, self.cfg.sim, self.widths)

    def warm_start_env(self) -> Any:
        """The in-process env the warm start records its baseline on: the first training
        shard's (modes whose collectors simulate elsewhere build one for it)."""
        return self._env(0)

    def trains_policy(self, it: int) -> bool:
        """False for the iterations after a warm start that fit the critic to the clone only."""
        return not (self.warm and it < self.cfg.train.warm_start_critic)

    @property
    def collectors(self) -> Collectors:
        """This run's collectors (built on first use: a mode's parts may start late)."""
        if self._collectors is None:
            self._collectors = self.make_collectors()
        return self._collectors

    def make_collectors(self) -> Collectors:
        """In-process collectors over the training shards' envs (train.staleness: collect/staleness.py)."""
        t = self.cfg.train
        return with_staleness(t, self.weights, self.run_dir, lambda weights: LocalCollectors(
            self._env, len(self.shards), self.model, self.grid, weights, self.timer,
            chunk=t.chunk, infer_dtype=t.infer_dtype, record_values=t.collect_values), self.learner.sample_index)

    def run(self, stop_after: int | None = None) -> TrainResult:
        """Iterate from the restored iteration to train.iterations (or stop after
        `stop_after` iterations in total, as an interruption would)."""
        cfg, start = self.cfg, self.learner.iteration
        end = cfg.train.iterations if stop_after is None else min(stop_after, cfg.train.iterations)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        atomic.write_text(self.run_dir / CONFIG_FILE, yaml.safe_dump(config_to_dict(cfg), sort_keys=False))
        atomic.write_text(self.run_dir / MODE_FILE, json.dumps({"mode": self.mode}) + "\n")
        logger = RunLogger(self.run_dir)
        if start > 0 or logger.has_records():
            # Records past the checkpoint (or, on a fresh start, any: left by an attempt that
            # crashed before its first checkpoint) are redone; kept, they would be doubled.
            logger.truncate_after(start - 1)
        forget_evaluations_from(self.run_dir, start)
        began = time.perf_counter()
        try:
            if self.want_baseline:
                self.baseline = self._baseline()
            warm = self.warm_start() if start == 0 and self.warm and end > 0 else {}
            with Progress(cfg.train.iterations, initial=start, stream=self.stream) as progress:
                for it in range(start, end):
                    scalars = self.iteration(it)
                    if it == start:
                        scalars.update(warm)
                        scalars.update(self.first_scalars)
                    if self.evaluation_due(it, end):
                        scalars.update(self.evaluate(it))
                    scalars["wall_seconds"] = time.perf_counter() - began  # since this process's run() began
                    logger.log(it, scalars)
                    self.checkpoint(it)
                    progress.update(it, **self._progress_fields(scalars))
        finally:
            logger.close()
        if end == cfg.train.iterations:
            self._ship_best(end - 1)
            write_report(self.run_dir)
        return TrainResult(self.run_dir, end, self.last_eval, self.baseline)

    def _progress_fields(self, scalars: dict[str, Any]) -> dict[str, Any]:
        """What the bar shows: the objective vs the baseline (cost, or profit when
        sim.reward=profit, where a higher cost can be the price of more sales)."""
        keys = ("transitions_per_s", "reward_mean")
        keys += ("eval_cost", "baseline_cost") if self.cfg.sim.reward == "cost" else ("eval_profit", "baseline_profit")
        return {k: scalars.get(k) for k in keys}

    @property
    def warm(self) -> bool:
        return self.cfg.train.warm_start != "none"

    def warm_start(self) -> dict[str, Any]:
        """train.warm_start: tune the baseline on the first training shard, clone it into
        the policy net (learn/imitate.py) and publish the clone as the next version.
        Scalars for the first iteration's record (with each step's seconds and the
        clone's evaluation)."""
        from skurl.learn.imitate import clone, record
        from skurl.policy.baselines import make_policy

        cfg, t = self.cfg, self.cfg.train
        env = self.warm_start_env()
        steps = StageTimer(prometheus=False)  # its parts, for the first record
        with self.timer.stage("warm_start"):
            with steps.stage("tune"):
                params, objective = self._teacher_params(env.catalog)
            with steps.stage("record"):
                teacher = make_policy(t.warm_start, env.catalog, cfg.sim, params)
                demos = record(env, teacher, self.grid, seed=t.seed, episodes=t.warm_start_episodes,
                               max_skus=t.warm_start_skus)
            with steps.stage("clone"):
                fit = clone(self.learner.model, demos, steps=t.warm_start_steps, smoothing=t.warm_start_smoothing,
                            seed=t.seed, normalize_obs=cfg.ppo.normalize_obs, stats_decay=cfg.ppo.stats_decay,
                            max_grad_norm=cfg.ppo.max_grad_norm, device=self.learner.device)
                self.learner.version += 1  # the clone is a policy of its own
                self.weights.publish(self.learner.version, self.learner.weights())
        out: dict[str, Any] = {**demos.scalars(), **fit, "warm_start_tuned_objective": objective,
                               "warm_start_seconds": sum(steps.totals().values())}
        if t.eval_every > 0:
            with steps.stage("eval"):
                out.update({f"warm_start_{k}": v for k, v in self.evaluate(-1).items()})
        out.update({f"warm_start_{name}_seconds": s for name, s in steps.totals().items()})
        return out

    def _teacher_params(self, catalog: Catalog) -> tuple[dict[str, Any], float]:
        """The warm start's baseline, tuned for `catalog`; when the grid is centred on that
        same baseline's tuned factors, those (its offset 0 then is the teacher's order)."""
        from skurl.policy.baselines import default_z
        from skurl.policy.grid_center import TEACHER
        from skurl.policy.tuning import tune

        cfg = self.cfg
        if self.grid.tuned is not None and cfg.train.warm_start == TEACHER:
            z = self.grid.tuned.lookup(catalog.sku_id, default_z(catalog, cfg.sim))
            return {"z": z}, self.grid.tuned.objective
        tuned = tune(cfg.train.warm_start, catalog, cfg.sim, eval_seed=cfg.eval.seed, days=cfg.eval.days,
                     warmup=cfg.eval.warmup)  # the baseline's horizon (grid_center.tune_center)
        return tuned.params, tuned.objective

    def evaluation_due(self, it: int, end: int) -> bool:
        """Whether iteration `it` of a run ending before `end` ends with an evaluation
        (every train.eval_every, and the last)."""
        return self._due(it, self.cfg.train.eval_every, end)

    @staticmethod
    def _due(it: int, every: int, end: int) -> bool:
        return (every > 0 and (it + 1) % every == 0) or it + 1 == end

    def checkpoint(self, it: int) -> bool:
        """Save the learner's state after iteration `it` when train.checkpoint_every says so.
        run() calls it after the iteration's record (with its evaluation) is logged: a crash
        in between then costs the iteration, which the resumed run redoes bit for bit, and
        never its record (checkpointing first lost the record, the evaluation and its
        train.keep_best candidate of an iteration that crashed while being evaluated)."""
        if not self._due(it, self.cfg.train.checkpoint_every, self.cfg.train.iterations):
            return False
        save_checkpoint(self.run_dir, self.learner, keep=self.cfg.train.keep_checkpoints)
        return True

    def iteration(self, it: int) -> dict[str, Any]:
        """collect -> learn -> publish, in every mode (only the collectors and the weights'
        transport differ); the iteration's scalars."""
        cfg, timer = self.cfg, self.timer
        timer.reset()
        start = time.perf_counter()
        batch = self.collectors.collect(it, cfg.train.seed, self.learner.version, self.learner.sample_index)
        with timer.stage("learn"):
            learn_start = time.perf_counter()
            stats = self.learner.update(batch.rollout, train_policy=self.trains_policy(it))
            learned = time.perf_counter() - learn_start
        with timer.stage("sync"):
            self.weights.publish(self.learner.version, self.learner.weights())
        record_learner(stats, learned, self.learner.device)
        seconds = time.perf_counter() - start
        return {
            **stats, **batch.scalars,  # transitions: collected, not trained on
            "trained_transitions": stats["transitions"],
            "policy_version": self.learner.version,
            "iteration_seconds": seconds,
            **time_shares(batch.scalars, seconds),
            **timer.as_scalars(exclusive=True),
        }

    def evaluate(self, it: int) -> dict[str, Any]:
        """Score the greedy policy of the learner's latest weights on held-out seeds;
        write eval.json; scalars to log."""
        with self.timer.stage("eval"):
            # The weights after this iteration's update, the ones its label and checkpoint
            # name (self.model still holds the version the collectors ran with).
            self.eval_model.load_state_dict(self.learner.weights())
            policy = LearnedPolicy(self.eval_model, self.grid.bind(self.eval_catalog), name=TRAINED,  # fp32: argmax is rounding-sensitive
                                   info={"iteration": it + 1, "version": self.learner.version})
            result = self._score(policy)
        self.last_eval = _policy_result(result, self.eval_catalog)
        results = {TRAINED: self.last_eval}
        if self.baseline is not None:
            results[BASELINE] = self.baseline
        write_eval(self.run_dir, it, results, trained=TRAINED)
        out = {"eval_cost": result.avg_cost_per_sku_day, "eval_profit": result.avg_profit_per_sku_day,
               "eval_fill_rate": result.fill_rate, **self._offer_best(policy)}
        if self.baseline is not None:
            out["baseline_cost"] = self.baseline["avg_cost_per_sku_day"]
            out["baseline_profit"] = self.baseline["avg_profit_per_sku_day"]
        return out

    def _offer_best(self, policy: Any) -> dict[str, float]:
        """train.keep_best: score the evaluated policy on the validation seed and keep the
        learner's state if it is the best so far (deploy/best.py)."""
        if self.best is None:
            return {}
        seed = validation_seed(self.cfg.eval.seed)
        with self.timer.stage("eval"):
            score = validation_score(self._evaluate_on(policy, seed), self.cfg.sim.reward)
        self.best.offer(self.learner, score, seed)
        return {"validation_score": score, "best_iteration": float(self.best.iteration or 0)}

    def _ship_best(self, last: int) -> None:
        """train.keep_best: when the kept policy is an earlier one than the last, score it on
        the held-out seeds; it becomes eval.json's trained policy (the history stays)."""
        best = self.best
        if best is None or best.path is None or best.iteration == self.learner.iteration:
            return
        state, meta = model_state(best.path)
        self.eval_model.load_state_dict(state)
        info = {"iteration": meta["iteration"], "version": meta["version"], "selected": "best",
                "validation_score": best.score, "validation_seed": meta["validation_seed"]}
        policy = LearnedPolicy(self.eval_model, self.grid.bind(self.eval_catalog), name=TRAINED, info=info)
        self.last_eval = _policy_result(self._score(policy), self.eval_catalog)
        results = {TRAINED: self.last_eval, **({BASELINE: self.baseline} if self.baseline is not None else {})}
        write_eval(self.run_dir, last, results, trained=TRAINED, history=False)

    def _score(self, policy: Any) -> EvalResult:
        """`policy` on the held-out seeds."""
        return self._evaluate_on(policy, self.cfg.eval.seed)

    def _evaluate_on(self, policy: Any, seed: int) -> EvalResult:
        """`policy` on the evaluation SKUs from `seed` (one env, built on first use)."""
        cfg = self.cfg
        if self.eval_env is None:
            sim = dataclasses.replace(cfg.sim, days=cfg.eval.warmup + cfg.eval.days)
            self.eval_env = make_env(self.eval_catalog, sim, self.widths)
        return evaluate(self.eval_catalog, cfg.sim, policy, days=cfg.eval.days, warmup=cfg.eval.warmup,
                        seed=seed, env=self.eval_env)

    def _baseline(self) -> dict[str, Any]:
        """The tuned baseline's evaluation, computed once per run dir and cached with what it
        depends on (evaluation SKUs, sim and eval settings): a cache from other settings (a
        resume with --set, a fresh run in a crashed run's dir) or a torn file is redone."""
        path = self.run_dir / BASELINE_FILE
        key = self._baseline_key()
        cached = _read_json(path)
        if isinstance(cached, dict) and cached.get("key") == key and isinstance(cached.get("result"), dict):
            return cached["result"]
        from skurl.policy.baselines import make_policy
        from skurl.policy.tuning import tune

        cfg = self.cfg
        with self.timer.stage("baseline"):
            tuned = tune(BASELINE, self.eval_catalog, cfg.sim, eval_seed=cfg.eval.seed,
                         days=cfg.eval.days, warmup=cfg.eval.warmup)
            policy = make_policy(BASELINE, self.eval_catalog, cfg.sim, tuned.params)
            result = _policy_result(self._score(policy), self.eval_catalog)
        atomic.write_text(path, json.dumps({"key": key, "result": result}, indent=1) + "\n")
        return result

    def _baseline_key(self) -> str:
        settings = json.dumps([BASELINE, dataclasses.asdict(self.cfg.sim), dataclasses.asdict(self.cfg.eval)],
                              sort_keys=True)
        return hashlib.sha256((catalog_digest(self.eval_catalog) + settings).encode()).hexdigest()


def record_learner(stats: dict[str, float], seconds: float, device: Any) -> None:
    """The update's time and memory (Learner.update records its losses and version)."""
    m = get_metrics()
    m.learner_training_step_duration_seconds.observe(seconds)
    m.record_gpu_memory(device)


def _read_json(path: Path) -> Any:
    """The JSON in `path`, or None when absent or unreadable."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _policy_result(result: EvalResult, catalog: Catalog) -> dict[str, Any]:
    """EvalResult as eval.json's PolicyResult, with per-segment costs."""
    from skurl.catalog.synthetic import segments

    out = result.to_json()
    seg = {}
    for name, mask in segments(catalog).items():
        if mask.any():
            seg[name] = {"skus": int(mask.sum()),
                         "avg_cost_per_sku_day": float(result.per_sku_cost[mask].mean()),
                         "avg_inventory_cost_per_sku_day": float(result.per_sku_inventory_cost[mask].mean()),
                         "avg_profit_per_sku_day": float(result.per_sku_profit[mask].mean())}
    out["segments"] = seg
    return out


def train(cfg: Config, run_dir: str | Path, *, stream: IO[str] | None = None,
          stop_after: int | None = None, baseline: bool = True) -> TrainResult:
    """A new run in `run_dir` (refuses a directory that already holds checkpoints)."""
    refuse_existing(run_dir)
    return ColocatedRun(cfg, run_dir, stream=stream, baseline=baseline).run(stop_after)


def resume(run_dir: str | Path, overrides: list[str] | None = None, *, stream: IO[str] | None = None,
           stop_after: int | None = None, baseline: bool = True) -> TrainResult:
    """Continue the run in `run_dir` from its latest checkpoint, with its own config
    (plus `overrides`, e.g. train.iterations=N to extend it)."""
    cfg_file = run_config_file(run_dir, "--resume")
    cfg = load_config(cfg_file, overrides)
    return ColocatedRun(cfg, run_dir, resume=True, stream=stream, baseline=baseline).run(stop_after)
