"""train.algo=dcl: one iteration of Deep Controlled Learning in the loop (learn/dcl.py).

The iteration labels sampled states of the current greedy policy by common-random-number
rollouts and fits the policy net to the labels; the value net is left alone (nothing reads
it). It runs in the learner's process, on iteration k's training shard (k mod the shards, the
round robin PPO collects in; one shard, the whole catalog, by default): the rollouts clone
simulator rows, which only an in-process env holds. So every mode gives the same result, and the mode's collectors stay idle; spreading the
labelling over collectors is not built. Everything is a function of (seed, iteration), so a
resumed run redoes an iteration bit for bit.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np
import torch.distributed as dist

from skurl.config_dcl import auto_horizon
from skurl.errors import UserError
from skurl.learn.dcl import DclSpec, label_states
from skurl.learn.imitate import clone
from skurl.policy.actions import bind_to_env
from skurl.policy.learned import LearnedPolicy
from skurl.policy.nets import ActorCritic
from skurl.policy.rollout_q import learned_rollout
from skurl.telemetry.metrics import get_metrics


def dcl_spec(cfg: Any, catalog: Any) -> DclSpec:
    """The labelling's settings for the training env's `catalog` (dcl.horizon=0 resolved)."""
    same = {f.name: getattr(cfg.dcl, f.name) for f in dataclasses.fields(DclSpec)}  # every field is a dcl.* key
    lead = int(np.max(catalog.lead_time + catalog.delay_max, initial=1))
    return DclSpec(**{**same, "horizon": cfg.dcl.horizon or auto_horizon(lead)})


class DclStep:
    """The Trainer's iteration under train.algo=dcl (Trainer.iteration calls it)."""

    def __init__(self, trainer: Any) -> None:
        if dist.is_initialized() and dist.get_world_size() > 1:
            raise UserError("train.algo=dcl: the DDP learner is not built for it (its labelling runs in one "
                            "process); expected one learner process or train.algo=ppo")
        self.trainer = trainer
        # the horizon from the whole catalog: one setting for every shard
        self.spec = dcl_spec(trainer.cfg, trainer.core.catalog)

    def env_for(self, it: int) -> Any:
        """Iteration `it`'s training shard's in-process env (train.collect_skus' round robin)."""
        core = self.trainer.core
        return core.local_env(it % len(core.shards))

    def __call__(self, it: int) -> dict[str, Any]:
        trainer = self.trainer
        core, learner, cfg = trainer.core, trainer.learner, trainer.cfg
        timer = core.timer
        timer.reset()
        start = time.perf_counter()
        env = self.env_for(it)
        grid = bind_to_env(core.grid, env)
        with timer.stage("collect"):  # the labelling: the policy's episode and the rollouts
            policy = LearnedPolicy(ActorCritic.from_state(learner.weights()), grid)
            lab = label_states(env, policy, learned_rollout(policy), core.grid, self.spec,
                               seed=cfg.train.seed, iteration=it)
            labelled = time.perf_counter() - start
        with timer.stage("learn"):
            # The warm start fitted the observation moments; without one, the first labels do.
            moments = cfg.ppo.normalize_obs and it == 0 and not trainer.warm
            fit = clone(learner.model, lab.demos, steps=cfg.dcl.fit_steps, smoothing=0.0, seed=cfg.train.seed + 1 + it,
                        normalize_obs=moments, stats_decay=cfg.ppo.stats_decay,
                        max_grad_norm=cfg.ppo.max_grad_norm, device=learner.device)
            learner.iteration += 1
            learner.version += 1
        with timer.stage("sync"):
            trainer.weights.publish(learner.version, learner.weights())
        get_metrics().record_update({}, learner.version)
        seconds = time.perf_counter() - start
        states = int(lab.demos.labels.shape[0])
        return {
            "transitions": states, "trained_transitions": states, "policy_version": learner.version,
            "iteration_seconds": seconds, "dcl_horizon": self.spec.horizon,
            "dcl_label_changed": lab.changed, "dcl_q_gap": lab.q_gap,
            "dcl_fit_accuracy": fit["warm_start_accuracy"], "dcl_fit_nll": fit["warm_start_nll"],
            "dcl_fit_entropy": fit["warm_start_entropy"], "dcl_rollout_sku_days": lab.sku_days,
            "rollout_sku_days_per_s": lab.sku_days / max(labelled, 1e-9),
            **timer.as_scalars(exclusive=True),
        }
