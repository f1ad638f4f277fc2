"""DCL's labelling cut into parts that any set of SKU shards can label: a plan, parts, a merge.

The learner fixes a `SamplePlan` on the iteration's training shard (which SKUs are labelled
on which day: a function of the shard's SKUs, the seed and the iteration only). Each holder
of some of those SKUs (the learner's own env, a collector, a Ray actor) runs the sampling
episode on its rows and labels the planned states among them (`label_part`). `merge_parts`
orders the union by (day, the SKU's row in the training shard), which is the order one env
over the whole shard produces, so the fit sees the same array whatever the partition:
simulator streams, rollout futures and policy noise are all keyed per SKU. The paired check
(learn/dcl_check.py) is cut the same way (`check_part`, `merge_checks` there).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from skurl.learn.dcl import (
    PART_STRIDE,
    ROLLOUT_EPISODE0,
    ROLLOUT_STRIDE,
    SAMPLE_EPISODE0,
    DclSpec,
    Labelled,
    RolloutDays,
    label_rows,
    sample_rows,
    sampled_days,
)
from skurl.learn.dcl_check import shard_rows
from skurl.learn.imitate import Demonstrations
from skurl.policy.actions import ActionGrid, bind_to_env
from skurl.policy.learned import LearnedPolicy
from skurl.policy.rollout_q import RolloutPolicy, RolloutSpec
from skurl.sim.env import VectorEnv


@dataclass(frozen=True)
class SamplePlan:
    """The states one labelling takes: on days[d], the SKUs sku_ids[d] (int64, in the training
    shard's row order), of an episode of `episode_days` days."""

    days: tuple[int, ...]
    sku_ids: tuple[np.ndarray, ...]
    episode_days: int

    @property
    def states(self) -> int:
        return sum(int(s.size) for s in self.sku_ids)


def sample_plan(sku_ids: np.ndarray, episode_days: int, spec: DclSpec, *, seed: int, iteration: int,
                strata: np.ndarray | None = None) -> SamplePlan:
    """The plan for a training shard of SKUs `sku_ids` (row order), `strata` (dense codes per
    row, or None): spec.states states spread over the sampled days (sampled_days, sample_rows)."""
    n = int(sku_ids.size)
    rows_per_day = min(n, math.ceil(spec.states / spec.spread))
    days, taken, left = [], [], spec.states
    for day in sampled_days(episode_days, spec, rows_per_day):
        if left == 0:
            break
        rows = sample_rows(n, min(rows_per_day, left), seed, iteration, day, strata)
        days.append(day)
        taken.append(np.asarray(sku_ids, np.int64)[rows])
        left -= rows.size
    return SamplePlan(tuple(days), tuple(taken), episode_days)


@dataclass
class LabelPart:
    """The labelled states of one holder of SKUs (arrays over its M states)."""

    sku_ids: np.ndarray  # int64 [M]
    days: np.ndarray  # int64 [M]: the sampled day of each state
    obs: np.ndarray  # float32 [M, D]
    labels: np.ndarray  # int64 [M]
    targets: np.ndarray | None  # float32 [M, A] (dcl.temperature > 0), else None
    gaps: np.ndarray  # float64 [M]: paired Q gain of the label over pi_k's own action
    changed: np.ndarray  # bool [M]: the label differs from pi_k's action
    sku_days: int  # rollout SKU-days spent
    row_days: int  # clone row-days stepped (learn/dcl.RolloutDays)

    def arrays(self) -> dict[str, np.ndarray]:
        """The part as named arrays (a rollout-store shard, a Ray reply)."""
        out = {"sku_ids": self.sku_ids, "days": self.days, "obs": self.obs, "labels": self.labels,
               "gaps": self.gaps, "changed": self.changed,
               "sku_days": np.asarray([self.sku_days], np.int64), "row_days": np.asarray([self.row_days], np.int64)}
        return out if self.targets is None else {**out, "targets": self.targets}

    @classmethod
    def from_arrays(cls, a: dict[str, np.ndarray]) -> LabelPart:
        # A part stored before row_days was counted reads as its SKU-days (a run resumed across versions).
        row_days = a["row_days"][0] if "row_days" in a else a["sku_days"][0]
        return cls(a["sku_ids"], a["days"], a["obs"], a["labels"], a.get("targets"), a["gaps"],
                   a["changed"].astype(bool), int(a["sku_days"][0]), int(row_days))


def label_part(env: VectorEnv, plan: SamplePlan, policy: LearnedPolicy, rollout: RolloutPolicy,
               grid: ActionGrid, spec: DclSpec, *, seed: int, iteration: int,
               sampler: LearnedPolicy | None = None, part: int = 0,
               horizons: np.ndarray | None = None) -> LabelPart:
    """Label the planned states among env's SKUs: run `sampler` (default `policy`, pi_k) for
    the plan's episode and, on each planned day, estimate Q of the candidates around pi_k's
    action by `rollout` (learn/dcl.py, label_rows). `part` > 0 numbers an iteration's further
    labellings (a fresh episode of another sampler). `horizons` (int [N], per env row)
    replaces spec.horizon row by row."""
    grid = bind_to_env(grid, env)
    sampler = policy if sampler is None else sampler
    own_ids = np.asarray(env.catalog.sku_id, np.int64)
    by_id = np.argsort(own_ids, kind="stable")
    out: dict[str, list] = {k: [] for k in ("ids", "days", "obs", "labels", "targets", "gaps", "changed")}
    spent = RolloutDays(0, 0)
    planned = dict(zip(plan.days, plan.sku_ids, strict=True))
    last = max(plan.days, default=-1)
    obs = env.reset(seed, SAMPLE_EPISODE0 + iteration + part * PART_STRIDE)
    for day in range(plan.episode_days):
        if day > last:
            break
        actions = np.asarray(sampler.action_indices(obs), np.int64)
        rows = _own_rows(planned.get(day), own_ids, by_id)
        if rows.size:
            own = actions if sampler is policy else np.asarray(policy.action_indices(obs), np.int64)
            base = ROLLOUT_EPISODE0 + (iteration * plan.episode_days + day) * ROLLOUT_STRIDE
            rspec = RolloutSpec(spec.horizon, spec.budget, episode_base=base, seed=seed)
            labels, targets, gaps, _, days = label_rows(env, rows, own[rows], grid, rollout, spec, rspec,
                                                         None if horizons is None else horizons[rows])
            spent = RolloutDays(spent.sku_days + days.sku_days, spent.row_days + days.row_days)
            for key, value in (("ids", own_ids[rows]), ("days", np.full(rows.size, day, np.int64)),
                               ("obs", np.asarray(obs.features[rows], np.float32)), ("labels", labels),
                               ("targets", targets), ("gaps", gaps), ("changed", labels != own[rows])):
                out[key].append(value)
        if day == last:
            break
        units, _ = grid.orders_for(actions, obs.raw)
        result = env.step(units)
        obs = result.obs
        if result.done:
            break
    return _part_of(out, spent, int(obs.features.shape[1]), grid.n, spec.temperature > 0)


def _own_rows(wanted: np.ndarray | None, own_ids: np.ndarray, by_id: np.ndarray) -> np.ndarray:
    """Env rows (int64, ascending) of the SKUs of `wanted` that this env holds."""
    if wanted is None or wanted.size == 0 or own_ids.size == 0:
        return np.zeros(0, np.int64)
    at = np.minimum(np.searchsorted(own_ids, wanted, sorter=by_id), own_ids.size - 1)
    hit = own_ids[by_id[at]] == wanted
    return np.sort(by_id[at[hit]]).astype(np.int64)


def _part_of(out: dict[str, list], spent: RolloutDays, obs_dim: int, actions: int, soft: bool) -> LabelPart:
    def cat(key: str, dtype: type, shape: tuple[int, ...] = ()) -> np.ndarray:
        return np.concatenate(out[key]).astype(dtype, copy=False) if out[key] else np.zeros((0, *shape), dtype)

    targets = cat("targets", np.float32, (actions,)) if soft else None
    return LabelPart(cat("ids", np.int64), cat("days", np.int64), cat("obs", np.float32, (obs_dim,)),
                     cat("labels", np.int64), targets, cat("gaps", np.float64), cat("changed", np.bool_),
                     spent.sku_days, spent.row_days)


def merge_parts(parts: list[LabelPart], shard_ids: np.ndarray) -> Labelled:
    """One labelling out of its parts, in (day, training-shard row) order; `shard_ids` are the
    training shard's SKUs in row order. Every planned state must be in exactly one part."""
    ids = np.concatenate([p.sku_ids for p in parts])
    if ids.size == 0:
        raise ValueError("dcl: no state was labelled (the episode ended before a sampled day?)")
    rows = shard_rows(shard_ids, ids)
    days = np.concatenate([p.days for p in parts])
    order = np.lexsort((rows, days))
    if np.any((np.diff(days[order]) == 0) & (np.diff(rows[order]) == 0)):
        raise ValueError("dcl: a state was labelled by two parts (do the SKU shards overlap?)")
    soft = all(p.targets is not None for p in parts)
    targets = np.concatenate([p.targets for p in parts if p.targets is not None])[order] if soft else None
    labels = np.concatenate([p.labels for p in parts])[order]
    demos = Demonstrations(np.concatenate([p.obs for p in parts])[order], labels, float("nan"), float("nan"),
                           targets)
    changed = int(np.concatenate([p.changed for p in parts]).sum())
    gaps = np.concatenate([p.gaps for p in parts])[order]
    return Labelled(demos, float(gaps.mean()), changed / labels.shape[0], sum(p.sku_days for p in parts),
                    rows[order], sum(p.row_days for p in parts))


def label_states(env: VectorEnv, policy: LearnedPolicy, rollout: RolloutPolicy, grid: ActionGrid, spec: DclSpec, *,
                 seed: int, iteration: int, sampler: LearnedPolicy | None = None, part: int = 0,
                 horizons: np.ndarray | None = None, strata: np.ndarray | None = None) -> Labelled:
    """One labelling of env's SKUs by one holder: plan, label_part, merge. `strata` (int [N]
    dense codes per env row) spreads each sampled day's rows over the strata (sample_rows)."""
    ids = np.asarray(env.catalog.sku_id, np.int64)
    plan = sample_plan(ids, int(env.info()["days"]), spec, seed=seed, iteration=iteration, strata=strata)
    return merge_parts([label_part(env, plan, policy, rollout, grid, spec, seed=seed, iteration=iteration,
                                   sampler=sampler, part=part, horizons=horizons)], ids)
