"""Evaluation around the loop: the greedy policy of the learner's latest weights on
held-out seeds against the tuned baseline (cached per run dir), train.keep_best on a
validation seed, and the kept best policy shipped as the run's result."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import TYPE_CHECKING, Any

from skurl import atomic
from skurl.catalog import Catalog
from skurl.collect.evaluate import EvalResult, eval_subset, evaluate, make_env
from skurl.config import Config
from skurl.json_ready import read_json_or_none
from skurl.learn.checkpoint import model_state
from skurl.policy.learned import LearnedPolicy
from skurl.policy.nets import ActorCritic
from skurl.telemetry.report import write_eval
from skurl.train.best import (
    BestKeeper,
    catalog_digest,
    objective,
    validation_score,
    validation_seed,
)
from skurl.train.core import TRAINED, RunCore

if TYPE_CHECKING:
    from skurl.learn.learner import Learner
    from skurl.sim.env import VectorEnv
    from skurl.train.mode import Observer

BASELINE = "forecast-base-stock"  # the planner's policy (register's backtest; catalog change)
BASELINE_FILE = "baseline.json"

class Evaluator:
    """Scores the learner's policies; `observer` (train/mode.py) lets steps around the loop
    (catalog change, business metrics) read the results without subclassing."""

    def __init__(self, core: RunCore, learner: Learner, *, baseline: bool, observer: Observer | None = None) -> None:
        cfg = core.cfg
        self.cfg, self.core, self.learner, self.run_dir = cfg, core, learner, core.run_dir
        self.model = ActorCritic.from_state(learner.weights())  # built once: no RNG draws later
        self.catalog = eval_subset(core.catalog, cfg.eval.skus)
        self.env: VectorEnv | None = None
        self.want_baseline = baseline
        self.baselines: dict[str, dict[str, Any]] = {}  # eval.baselines, tuned: name -> result
        self.baseline: dict[str, Any] | None = None  # the best of them by the run's objective
        self.best = BestKeeper(self.run_dir, self.catalog, learner.iteration) if cfg.train.keep_best else None
        self.last: dict[str, Any] | None = None
        self.observer = observer

    def evaluate(self, it: int) -> dict[str, Any]:
        """The greedy policy of the learner's latest weights on held-out seeds; writes
        eval.json; the scalars to log."""
        with self.core.timer.stage("eval"):
            self.model.load_state_dict(self.learner.weights())
            policy = LearnedPolicy(self.model, self.core.grid.bind(self.catalog), name=TRAINED,  # fp32: argmax is rounding-sensitive
                                   info={"iteration": it + 1, "version": self.learner.version})
            result = self._score(policy)
        self.last = policy_result(result, self.catalog)
        write_eval(self.run_dir, it, self._results(), trained=TRAINED)
        out = {"eval_cost": result.avg_cost_per_sku_day, "eval_profit": result.avg_profit_per_sku_day,
               "eval_fill_rate": result.fill_rate, **self._offer_best(policy)}
        if self.baseline is not None:
            out["baseline_cost"] = self.baseline["avg_cost_per_sku_day"]
            out["baseline_profit"] = self.baseline["avg_profit_per_sku_day"]
        if self.observer is not None:
            self.observer.on_evaluated(it, out, self.last)
        return out

    def _results(self) -> dict[str, Any]:
        return {TRAINED: self.last, **self.baselines}

    def _offer_best(self, policy: LearnedPolicy) -> dict[str, float]:
        """train.keep_best: score the policy on the validation seed; keep the learner's
        state if it is the best so far (train/best.py)."""
        if self.best is None:
            return {}
        seed = validation_seed(self.cfg.eval.seed)
        with self.core.timer.stage("eval"):
            score = validation_score(self._evaluate_on(policy, seed), self.cfg.sim.reward)
        self.best.offer(self.learner, score, seed)
        return {"validation_score": score, "best_iteration": float(self.best.iteration or 0)}

    def ship_best(self, last: int) -> None:
        """When the kept policy is an earlier one than the last, score it on the held-out
        seeds; it becomes eval.json's trained policy (the history stays)."""
        best = self.best
        if best is None or best.path is None or best.iteration == self.learner.iteration:
            return
        state, meta = model_state(best.path)
        self.model.load_state_dict(state)
        info = {"iteration": meta["iteration"], "version": meta["version"], "selected": "best",
                "validation_score": best.score, "validation_seed": meta["validation_seed"]}
        policy = LearnedPolicy(self.model, self.core.grid.bind(self.catalog), name=TRAINED, info=info)
        self.last = policy_result(self._score(policy), self.catalog)
        write_eval(self.run_dir, last, self._results(), trained=TRAINED, history=False)

    def _score(self, policy: LearnedPolicy) -> EvalResult:
        result = self._evaluate_on(policy, self.cfg.eval.seed)
        if self.observer is not None:
            self.observer.on_scored(policy.name, result)
        return result

    def _evaluate_on(self, policy: LearnedPolicy, seed: int) -> EvalResult:
        """`policy` on the evaluation SKUs from `seed` (one env, built on first use)."""
        cfg = self.cfg
        if self.env is None:
            sim = dataclasses.replace(cfg.sim, days=cfg.eval.warmup + cfg.eval.days)
            self.env = make_env(self.catalog, sim, self.core.widths)
        return evaluate(self.catalog, cfg.sim, policy, days=cfg.eval.days, warmup=cfg.eval.warmup,
                        seed=seed, env=self.env)

    def ensure_baseline(self) -> None:
        """Each of eval.baselines tuned and evaluated, once per run dir, cached with what it
        depends on (evaluation SKUs, sim and eval settings): a cache from other settings (a
        resume with --set, a fresh run in a crashed run's dir) or a torn file is redone; a
        baseline added to the list on resume is tuned alone. `baseline` is the best one."""
        if not self.want_baseline or not self.cfg.eval.baselines:
            return
        path = self.run_dir / BASELINE_FILE
        key = baseline_key(self.catalog, self.cfg)
        cached = read_json_or_none(path)
        results = cached.get("results") if isinstance(cached, dict) and cached.get("key") == key else None
        results = {k: v for k, v in results.items() if isinstance(v, dict)} if isinstance(results, dict) else {}
        from skurl.policy.baselines import applies

        names = [name for name in self.cfg.eval.baselines if applies(name, self.catalog)]
        if not names:
            return
        for name in names:
            if name not in results:
                results[name] = self._tuned(name)
                atomic.write_text(path, json.dumps({"key": key, "results": results}, indent=1) + "\n")
        self.baselines = {name: results[name] for name in names}
        reward = self.cfg.sim.reward
        self.baseline = max(self.baselines.values(),
                            key=lambda r: objective(r["avg_profit_per_sku_day"], r["avg_cost_per_sku_day"], reward))

    def _tuned(self, name: str) -> dict[str, Any]:
        """Baseline `name` tuned per SKU on tuning seeds, then scored on the held-out ones."""
        from skurl.policy.baselines import make_policy
        from skurl.policy.tuning import tune

        cfg = self.cfg
        with self.core.timer.stage("baseline"):
            tuned = tune(name, self.catalog, cfg.sim, eval_seed=cfg.eval.seed,
                         days=cfg.eval.days, warmup=cfg.eval.warmup, sku_days=cfg.eval.tune_sku_days, max_skus=cfg.eval.tune_max_skus,
                         network_tuning=cfg.eval.network_tuning)
            policy = make_policy(name, self.catalog, cfg.sim, tuned.params)
            return policy_result(self._score(policy), self.catalog)


def baseline_key(catalog: Catalog, cfg: Config) -> str:
    evaluation = {k: v for k, v in dataclasses.asdict(cfg.eval).items() if k != "baselines"}  # cached per name
    settings = json.dumps([dataclasses.asdict(cfg.sim), evaluation], sort_keys=True)
    return hashlib.sha256((catalog_digest(catalog) + settings).encode()).hexdigest()


def policy_result(result: EvalResult, catalog: Catalog) -> dict[str, Any]:
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
