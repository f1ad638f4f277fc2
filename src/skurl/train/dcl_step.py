"""train.algo=dcl: one iteration of Deep Controlled Learning in the loop (learn/dcl.py).

The iteration labels sampled states of the current greedy policy by common-random-number
rollouts, fits the policy net to the labels, and keeps the fit only if it passes a paired
check against the policy it came from (after dcl.corrections relabellings of its own states;
learn/dcl_check.py). The value net is left alone (nothing reads it). It labels
iteration k's training shard (k mod the shards, the round robin PPO collects in; one shard,
the whole catalog, by default) through the mode's Labellers (learn/labelling.py): wherever
the shard's SKUs live, each holder labels the planned states among its own, and the parts
merge into what one env over the shard gives (learn/dcl_parts.py). Everything is a function
of (seed, iteration), so every mode and partition, and a resumed run, give the same bits.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

import numpy as np

from skurl.columns.strata import strata_codes, strata_names
from skurl.learn.dcl import DclSpec, Labelled
from skurl.learn.dcl_check import PairedGain, merge_checks
from skurl.learn.dcl_parts import merge_parts, sample_plan
from skurl.learn.ddp import rank_and_world
from skurl.learn.imitate import Demonstrations, clone
from skurl.learn.labelling import (
    CheckJob,
    LabelJob,
    Labellers,
    LocalLabellers,
    Tensors,
    row_horizons,
)
from skurl.telemetry.metrics import get_metrics

if TYPE_CHECKING:
    from skurl.catalog import Catalog
    from skurl.config import Config
    from skurl.learn.learner import Learner
    from skurl.sync.api import WeightBackend
    from skurl.train.core import RunCore

log = logging.getLogger("skurl.train")


def dcl_spec(cfg: Config, catalog: Catalog) -> DclSpec:
    """The labelling's settings for the training env's `catalog` (dcl.horizon=0 resolved to
    the longest SKU's; row_horizons gives each SKU its own)."""
    same = {f.name: getattr(cfg.dcl, f.name) for f in dataclasses.fields(DclSpec)}  # every field is a dcl.* key
    return DclSpec(**{**same, "horizon": cfg.dcl.horizon or int(np.max(row_horizons(catalog), initial=8))})


class DclStep:
    """The Trainer's iteration under train.algo=dcl (Trainer.iteration calls it)."""

    def __init__(self, core: RunCore, learner: Learner, weights: WeightBackend, *, warm: bool,
                 labellers: Labellers | None = None) -> None:
        self.core, self.learner, self.weights, self.warm = core, learner, weights, warm
        # the mode's labellers (its collectors), else this process on the shards' envs
        self.labellers = labellers or LocalLabellers(core.local_env, core.grid)
        self.cfg = core.cfg
        # the horizon from the whole catalog: one setting for every shard
        self.spec = dcl_spec(core.cfg, core.catalog)

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
        shard = it % len(core.shards)
        ids = self.shard_ids(shard)
        plan = sample_plan(ids, cfg.sim.days, self.spec, seed=cfg.train.seed, iteration=it,
                           strata=strata_codes(core.shard_catalog(shard), strata_names(cfg.dcl.stratify)))
        labs: list[Labelled] = []
        checks: list[PairedGain | None] = []
        sampler = None  # the first labelling: the incumbent's own states
        while True:
            job = LabelJob(it, len(labs), cfg.train.seed, shard, plan, self.spec, cfg.dcl.horizon == 0,
                           before, sampler, core.widths)
            with core.timer.stage("collect"):  # the labelling: a policy's episode and the rollouts
                labs.append(merge_parts(self.labellers.label(job), ids))
            if len(labs) > 1:
                learner.model.load_state_dict(before)
            fit, candidate, check = self._fit_and_check(it, shard, before, labs)
            checks.append(check)
            if check is not None:
                log.info("dcl iteration %d, candidate %d: reward per SKU-day %+.4g +- %.2g against the "
                         "policy it came from", it, len(labs), check.gain, check.se)
            if check is None or not check.worse(cfg.dcl.check_z) or len(labs) > cfg.dcl.corrections:
                return labs, fit, checks
            sampler = candidate

    def shard_ids(self, shard: int) -> np.ndarray:
        """The SKUs (int64) of training shard `shard`, in its row order."""
        return np.asarray(self.core.catalog.sku_id, np.int64)[self.core.shards[shard]]

    def _scalars(self, labs: list[Labelled], fit: dict[str, float],
                 checks: list[PairedGain | None]) -> dict[str, Any]:
        states = sum(int(x.demos.labels.shape[0]) for x in labs)
        sku_days = sum(x.sku_days for x in labs)
        row_days = sum(x.row_days for x in labs)  # with the groups and networks cloned along
        timer = self.core.timer
        per_s = 1.0 / max(timer.totals(exclusive=True).get("collect", 0.0), 1e-9)  # of the labelling
        last = checks[-1]
        get_metrics().dcl_rollout_sku_days_per_second.set(sku_days * per_s)
        get_metrics().dcl_rollout_row_days_per_second.set(row_days * per_s)
        return {
            "transitions": states, "trained_transitions": states, "dcl_horizon": self.spec.horizon,
            "dcl_label_changed": labs[0].changed, "dcl_q_gap": labs[0].q_gap,
            "dcl_fit_accuracy": fit["warm_start_accuracy"], "dcl_fit_nll": fit["warm_start_nll"],
            "dcl_fit_entropy": fit["warm_start_entropy"], "dcl_rollout_sku_days": sku_days,
            "rollout_sku_days_per_s": sku_days * per_s, "dcl_rollout_row_days": row_days,
            "rollout_row_days_per_s": row_days * per_s, "dcl_corrections": len(labs) - 1,
            **({} if last is None else {"dcl_check_gain": last.gain, "dcl_check_se": last.se}),
            **({} if len(checks) == 1 or checks[0] is None else {"dcl_first_check_gain": checks[0].gain}),
            **timer.as_scalars(exclusive=True), **self.labellers.figures(),
        }

    def _fit_and_check(self, it: int, shard: int, before: Tensors, labs: list[Labelled]
                       ) -> tuple[dict[str, float], Tensors | None, PairedGain | None]:
        """Fit the learner's policy net (holding the incumbent's weights `before`) to every
        label of `labs`; the fit's figures, the fitted candidate's weights and its paired check
        against the incumbent on training shard `shard` (both None with dcl.check_episodes 0:
        nothing checks or corrects it)."""
        learner, cfg = self.learner, self.cfg
        with self.core.timer.stage("learn"):
            # The warm start fitted the observation moments; without one, the first labels do.
            moments = cfg.ppo.normalize_obs and it == 0 and not self.warm
            # DDP: every rank holds every label; the normalizer's moments are its own (the same on
            # every rank), the fit's gradients summed over the ranks (clone's ranks)
            with local_statistics(learner):
                fit = clone(learner.model, merged(labs), steps=cfg.dcl.fit_steps, smoothing=0.0,
                            seed=cfg.train.seed + 1 + it, normalize_obs=moments, stats_decay=cfg.ppo.stats_decay,
                            max_grad_norm=cfg.ppo.max_grad_norm, device=learner.device, ranks=rank_and_world())
        if cfg.dcl.check_episodes == 0:
            return fit, None, None
        candidate = learner.weights()
        job = CheckJob(it, cfg.train.seed, shard, cfg.dcl.check_episodes, self.spec.warmup, before, candidate,
                       self.core.widths)
        with self.core.timer.stage("check"):
            check = merge_checks(self.labellers.check(job), self.shard_ids(shard))
        return fit, candidate, check


def local_statistics(learner: Learner) -> AbstractContextManager[None]:
    """The DDP learner's own observation moments (not all-reduced); nothing elsewhere."""
    from skurl.learn.ddp import DDPLearner

    return learner.local_statistics() if isinstance(learner, DDPLearner) else nullcontext()


def merged(labs: list[Labelled]) -> Demonstrations:
    """One set of demonstrations out of several labellings' (soft targets kept where all have them)."""
    if len(labs) == 1:
        return labs[0].demos
    demos = [x.demos for x in labs]
    targets = None if any(d.targets is None for d in demos) else np.concatenate([d.targets for d in demos])
    return Demonstrations(np.concatenate([d.obs for d in demos]), np.concatenate([d.labels for d in demos]),
                          float("nan"), float("nan"), targets)
