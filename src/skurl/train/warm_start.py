"""train.warm_start: tune the baseline on the first training shard, clone it into the policy
net (learn/imitate.py) and publish the clone as the next version, before PPO begins."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from skurl.catalog import Catalog
from skurl.telemetry.stages import StageTimer

if TYPE_CHECKING:
    from skurl.learn.learner import Learner
    from skurl.sim.env import VectorEnv
    from skurl.sync.api import WeightBackend
    from skurl.train.core import RunCore
    from skurl.train.evaluation import Evaluator


def warm_start(core: RunCore, learner: Learner, weights: WeightBackend, env: VectorEnv,
               evaluator: Evaluator | None) -> dict[str, Any]:
    """Scalars for the first iteration's record (each step's seconds and the clone's
    evaluation): the baseline recorded on `env`, cloned into `learner`, published."""
    from skurl.learn.imitate import clone, record
    from skurl.policy.baselines import make_policy

    cfg, t = core.cfg, core.cfg.train
    steps = StageTimer(prometheus=False)  # its parts, for the first record
    with core.timer.stage("warm_start"):
        with steps.stage("tune"):
            params, objective = teacher_params(core, env.catalog)
        with steps.stage("record"):
            teacher = make_policy(t.warm_start, env.catalog, cfg.sim, params)
            demos = record(env, teacher, core.grid, seed=t.seed, episodes=t.warm_start_episodes,
                           max_skus=t.warm_start_skus)
        with steps.stage("clone"):
            fit = clone(learner.model, demos, steps=t.warm_start_steps, smoothing=t.warm_start_smoothing,
                        seed=t.seed, normalize_obs=cfg.ppo.normalize_obs, stats_decay=cfg.ppo.stats_decay,
                        max_grad_norm=cfg.ppo.max_grad_norm, device=learner.device)
            learner.version += 1  # the clone is a policy of its own
            weights.publish(learner.version, learner.weights())
    out: dict[str, Any] = {**demos.scalars(), **fit, "warm_start_tuned_objective": objective,
                           "warm_start_seconds": sum(steps.totals().values())}
    if t.eval_every > 0 and evaluator is not None:
        with steps.stage("eval"):
            out.update({f"warm_start_{k}": v for k, v in evaluator.evaluate(-1).items()})
    out.update({f"warm_start_{name}_seconds": s for name, s in steps.totals().items()})
    return out


def teacher_params(core: RunCore, catalog: Catalog) -> tuple[dict[str, Any], float]:
    """The warm start's baseline, tuned for `catalog`; when the grid is centred on that
    same baseline's tuned factors, those (its offset 0 then is the teacher's order)."""
    from skurl.policy.baselines import default_z
    from skurl.policy.tuning import tune

    cfg = core.cfg
    center = core.grid.tuned
    if center is not None and cfg.train.warm_start == cfg.policy.actions.center_policy:
        if center.echelon:  # the levels offset 0 orders up to
            from skurl.policy.echelon_cover import center_levels

            return {"S": center_levels(catalog, center.lookup(catalog.sku_id, np.zeros(len(catalog))))}, \
                center.objective
        params = {"z": center.lookup(catalog.sku_id, default_z(catalog, cfg.sim))}
        if cfg.train.warm_start == "forecast-s-S":
            params["lot"] = center.lots(catalog.sku_id)
        return params, center.objective
    tuned = tune(cfg.train.warm_start, catalog, cfg.sim, eval_seed=cfg.eval.seed, days=cfg.eval.days,
                 warmup=cfg.eval.warmup, sku_days=cfg.eval.tune_sku_days, max_skus=cfg.eval.tune_max_skus,
                 network_tuning=cfg.eval.network_tuning)  # the baseline's horizon (grid_center)
    return tuned.params, tuned.objective
