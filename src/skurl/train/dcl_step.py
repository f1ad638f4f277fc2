"""train.algo=dcl: one iteration of Deep Controlled Learning in the loop (learn/dcl.py).

The iteration labels sampled states of the current greedy policy by common-random-number
rollouts, fits the policy net to the labels, and keeps the fit only if it passes a paired
check against the policy it came from (after dcl.corrections relabellings of its own states;
learn/dcl_check.py). The value net is left alone (nothing reads it). It runs in the
learner's process, on iteration k's training shard (k mod the shards, the round robin PPO
collects in; one shard, the whole catalog, by default): the rollouts clone simulator rows,
which only an in-process env holds. So every mode gives the same result, and the mode's
collectors stay idle; spreading the labelling over collectors is not built. Everything is a
function of (seed, iteration), so a resumed run redoes an iteration bit for bit.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import torch.distributed as dist

from skurl.columns.strata import strata_codes, strata_names
from skurl.config.dcl import auto_horizon
from skurl.errors import UserError
from skurl.learn.dcl import DclSpec, Labelled, label_states
from skurl.learn.dcl_check import PairedGain, paired_gain
from skurl.learn.imitate import Demonstrations, clone
from skurl.policy.actions import bind_to_env
from skurl.policy.learned import LearnedPolicy
from skurl.policy.nets import ActorCritic
from skurl.policy.rollout_q import learned_rollout
from skurl.telemetry.metrics import get_metrics

if TYPE_CHECKING:
    from skurl.catalog import Catalog
    from skurl.config import Config
    from skurl.learn.learner import Learner
    from skurl.sim.env import VectorEnv
    from skurl.sync.api import WeightBackend
    from skurl.train.core import RunCore

log = logging.getLogger("skurl.train")


def dcl_spec(cfg: Config, catalog: Catalog) -> DclSpec:
    """The labelling's settings for the training env's `catalog` (dcl.horizon=0 resolved to
    the longest SKU's; row_horizons gives each SKU its own)."""
    same = {f.name: getattr(cfg.dcl, f.name) for f in dataclasses.fields(DclSpec)}  # every field is a dcl.* key
    return DclSpec(**{**same, "horizon": cfg.dcl.horizon or int(np.max(row_horizons(catalog), initial=8))})


def row_horizons(catalog: Catalog) -> np.ndarray:
    """dcl.horizon=0's rollout days per SKU of `catalog` (int64 [N]): from its own lead time
    and supplier delay, so a long-lead SKU does not lengthen every other SKU's rollouts."""
    return auto_horizon(np.asarray(catalog.lead_time, np.int64) + np.asarray(catalog.delay_max, np.int64))


class DclStep:
    """The Trainer's iteration under train.algo=dcl (Trainer.iteration calls it)."""

    def __init__(self, core: RunCore, learner: Learner, weights: WeightBackend, *, warm: bool) -> None:
        if dist.is_initialized() and dist.get_world_size() > 1:
            raise UserError("train.algo=dcl: the DDP learner is not built for it (its labelling runs in one "
                            "process); expected one learner process or train.algo=ppo")
        self.core, self.learner, self.weights, self.warm = core, learner, weights, warm
        self.cfg = core.cfg
        # the horizon from the whole catalog: one setting for every shard
        self.spec = dcl_spec(core.cfg, core.catalog)

    def env_for(self, it: int) -> VectorEnv:
        """Iteration `it`'s training shard's in-process env (collect.skus' round robin)."""
        core = self.core
        return core.local_env(it % len(core.shards))

    def __call__(self, it: int) -> dict[str, Any]:
        learner, timer = self.learner, self.core.timer
        timer.reset()
        start = time.perf_counter()
        before = learner.weights()
        labs, fit, checks = self._improve(it, before)
        accepted = checks[-1] is None or not checks[-1].worse(self.cfg.dcl.check_z)
        if not accepted:
            learner.model.load_state_dict(before)
        learner.iteration += 1
        learner.version += 1
        with timer.stage("sync"):
            self.weights.publish(learner.version, learner.weights())
        get_metrics().record_update({}, learner.version)
        return {"policy_version": learner.version, "iteration_seconds": time.perf_counter() - start,
                "dcl_accepted": float(accepted), **self._scalars(labs, fit, checks)}

    def _improve(self, it: int, before: dict[str, Any]) -> tuple[list[Labelled], dict[str, float],
                                                                  list[PairedGain | None]]:
        """Label, fit and check; while the candidate is worse (and dcl.corrections allow),
        label the states *it* visits too (Q of the incumbent, as before) and refit the
        incumbent on every label so far (learn/dcl_check.py). The labellings, the last fit's
        figures and every check."""
        core, learner, cfg = self.core, self.learner, self.cfg
        env = self.env_for(it)
        grid = bind_to_env(core.grid, env)
        incumbent = LearnedPolicy(ActorCritic.from_state(before), grid)
        horizons = self.horizons(env)
        strata = strata_codes(env.catalog, strata_names(cfg.dcl.stratify))
        labs: list[Labelled] = []
        checks: list[PairedGain | None] = []
        sampler = None  # the first labelling: the incumbent's own states
        while True:
            with core.timer.stage("collect"):  # the labelling: a policy's episode and the rollouts
                labs.append(label_states(env, incumbent, learned_rollout(incumbent), core.grid, self.spec,
                                         seed=cfg.train.seed, iteration=it, sampler=sampler, part=len(labs),
                                         horizons=horizons, strata=strata))
            if len(labs) > 1:
                learner.model.load_state_dict(before)
            fit, candidate, check = self._fit_and_check(it, env, incumbent, labs)
            checks.append(check)
            if check is not None:
                log.info("dcl iteration %d, candidate %d: reward per SKU-day %+.4g +- %.2g against the "
                         "policy it came from", it, len(labs), check.gain, check.se)
            if check is None or not check.worse(cfg.dcl.check_z) or len(labs) > cfg.dcl.corrections:
                return labs, fit, checks
            sampler = candidate

    def _scalars(self, labs: list[Labelled], fit: dict[str, float],
                 checks: list[PairedGain | None]) -> dict[str, Any]:
        states = sum(int(x.demos.labels.shape[0]) for x in labs)
        sku_days = sum(x.sku_days for x in labs)
        timer = self.core.timer
        labelling = timer.totals(exclusive=True).get("collect", 0.0)
        last = checks[-1]
        return {
            "transitions": states, "trained_transitions": states, "dcl_horizon": self.spec.horizon,
            "dcl_label_changed": labs[0].changed, "dcl_q_gap": labs[0].q_gap,
            "dcl_fit_accuracy": fit["warm_start_accuracy"], "dcl_fit_nll": fit["warm_start_nll"],
            "dcl_fit_entropy": fit["warm_start_entropy"], "dcl_rollout_sku_days": sku_days,
            "rollout_sku_days_per_s": sku_days / max(labelling, 1e-9), "dcl_corrections": len(labs) - 1,
            **({} if last is None else {"dcl_check_gain": last.gain, "dcl_check_se": last.se}),
            **({} if len(checks) == 1 or checks[0] is None else {"dcl_first_check_gain": checks[0].gain}),
            **timer.as_scalars(exclusive=True),
        }

    def horizons(self, env: VectorEnv) -> np.ndarray | None:
        """Per-row rollout days of `env`'s SKUs under dcl.horizon=0; None: dcl.horizon for all."""
        return row_horizons(env.catalog) if self.cfg.dcl.horizon == 0 else None

    def _fit_and_check(self, it: int, env: VectorEnv, incumbent: LearnedPolicy, labs: list[Labelled]
                       ) -> tuple[dict[str, float], LearnedPolicy | None, PairedGain | None]:
        """Fit the learner's policy net (holding the incumbent's weights) to every label of
        `labs`; the fit's figures, the fitted candidate and its paired check against the
        incumbent (both None with dcl.check_episodes 0: nothing checks or corrects it)."""
        learner, cfg = self.learner, self.cfg
        with self.core.timer.stage("learn"):
            # The warm start fitted the observation moments; without one, the first labels do.
            moments = cfg.ppo.normalize_obs and it == 0 and not self.warm
            fit = clone(learner.model, merged(labs), steps=cfg.dcl.fit_steps, smoothing=0.0,
                        seed=cfg.train.seed + 1 + it, normalize_obs=moments, stats_decay=cfg.ppo.stats_decay,
                        max_grad_norm=cfg.ppo.max_grad_norm, device=learner.device)
        if cfg.dcl.check_episodes == 0:
            return fit, None, None
        candidate = LearnedPolicy(ActorCritic.from_state(learner.weights()), incumbent.grid)
        with self.core.timer.stage("check"):
            check = paired_gain(env, incumbent, candidate, seed=cfg.train.seed,
                                iteration=it, episodes=cfg.dcl.check_episodes, skip=self.spec.warmup)
        return fit, candidate, check


def merged(labs: list[Labelled]) -> Demonstrations:
    """One set of demonstrations out of several labellings' (soft targets kept where all have them)."""
    if len(labs) == 1:
        return labs[0].demos
    demos = [x.demos for x in labs]
    targets = None if any(d.targets is None for d in demos) else np.concatenate([d.targets for d in demos])
    return Demonstrations(np.concatenate([d.obs for d in demos]), np.concatenate([d.labels for d in demos]),
                          float("nan"), float("nan"), targets)
