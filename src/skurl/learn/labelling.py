"""The seam between DCL's learner step and whoever labels: jobs, the Labellers protocol, and
the learner's own in-process labeller.

A `LabelJob` says everything a holder of SKUs needs to label its share of an iteration's
states (learn/dcl_parts.py): the plan, the weights of pi_k and of the sampler, the spec. A
`CheckJob` does the same for the paired check. Each mode answers with parts from wherever
its SKUs live: the learner's env (`LocalLabellers`, colocated), Ray's collector actors, the
decoupled collectors. `label_on` and `check_on` are what every one of them runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypedDict

import numpy as np
import torch

from skurl.catalog import Catalog
from skurl.config import SimConfig
from skurl.config.dcl import auto_horizon
from skurl.learn.dcl import DclSpec
from skurl.learn.dcl_check import CheckPart, check_part
from skurl.learn.dcl_parts import LabelPart, SamplePlan, label_part
from skurl.policy.actions import ActionGrid, bind_to_env
from skurl.policy.learned import LearnedPolicy
from skurl.policy.nets import ActorCritic
from skurl.policy.rollout_q import learned_rollout
from skurl.sim.env import VectorEnv

Tensors = dict[str, torch.Tensor]


@dataclass(frozen=True)
class LabelJob:
    """One labelling of training shard `shard` in iteration `iteration` (`part` > 0: a
    correction's, whose states `sampler` visits; None: pi_k's own)."""

    iteration: int
    part: int
    seed: int
    shard: int
    plan: SamplePlan
    spec: DclSpec
    row_horizons: bool  # dcl.horizon=0: each SKU rolls out for its own horizon (row_horizons)
    incumbent: Tensors  # pi_k
    sampler: Tensors | None = None
    widths: tuple[int, int] = (0, 0)  # the run's feature widths (a holder of a subset shows the whole's)


@dataclass(frozen=True)
class CheckJob:
    """The paired check of `candidate` against `incumbent` on training shard `shard`."""

    iteration: int
    seed: int
    shard: int
    episodes: int
    skip: int
    incumbent: Tensors
    candidate: Tensors
    widths: tuple[int, int] = (0, 0)


class PartReply(TypedDict, total=False):
    """A collector's answer to a job where no proto types it (Ray): one of manifest (a label
    part's shard in the rollout store) or arrays (LabelPart.arrays, or a check's sku_ids and
    gains), with the seconds it spent and its rollout SKU-days."""

    seconds: float
    sku_days: int
    manifest: bytes
    arrays: dict[str, np.ndarray]


class Labellers(Protocol):
    """Whoever holds the training shards' SKUs: every part of a job, covering each planned
    SKU once (a part per holder; their order does not matter)."""

    def label(self, job: LabelJob) -> list[LabelPart]: ...

    def check(self, job: CheckJob) -> list[CheckPart]: ...

    def figures(self) -> dict[str, float]:
        """The labelling's figures since the last call (per-collector seconds, idle share,
        label shards stored and refused), for the iteration's record; {} where none."""
        ...

    def close(self) -> None: ...


def row_horizons(catalog: Catalog) -> np.ndarray:
    """dcl.horizon=0's rollout days per SKU of `catalog` (int64 [N]): from its own lead time
    and supplier delay, so a long-lead SKU does not lengthen every other SKU's rollouts."""
    return auto_horizon(np.asarray(catalog.lead_time, np.int64) + np.asarray(catalog.delay_max, np.int64))


def greedy(weights: Tensors, grid: ActionGrid) -> LearnedPolicy:
    return LearnedPolicy(ActorCritic.from_state(weights), grid)


def label_on(env: VectorEnv, grid: ActionGrid, job: LabelJob) -> LabelPart:
    """`job`'s part on env's SKUs (`grid`: the run's action grid, bound here to env)."""
    bound = bind_to_env(grid, env)
    incumbent = greedy(job.incumbent, bound)
    sampler = None if job.sampler is None else greedy(job.sampler, bound)
    return label_part(env, job.plan, incumbent, learned_rollout(incumbent), grid, job.spec, seed=job.seed,
                      iteration=job.iteration, sampler=sampler, part=job.part,
                      horizons=row_horizons(env.catalog) if job.row_horizons else None)


def check_on(env: VectorEnv, grid: ActionGrid, job: CheckJob) -> CheckPart:
    """`job`'s paired check on env's SKUs."""
    bound = bind_to_env(grid, env)
    return check_part(env, greedy(job.incumbent, bound), greedy(job.candidate, bound), seed=job.seed,
                      iteration=job.iteration, episodes=job.episodes, skip=job.skip)


class Labeller:
    """A holder of SKUs (a collector) answering jobs on an in-process env of its own catalog
    rows (any order: parts are keyed by sku_id), one env per feature width."""

    def __init__(self, catalog: Catalog, sim: SimConfig, grid: ActionGrid) -> None:
        self.catalog, self.sim, self.grid = catalog, sim, grid
        self._envs: dict[tuple[int, int], VectorEnv] = {}

    def env(self, widths: tuple[int, int]) -> VectorEnv:
        if widths not in self._envs:
            self._envs[widths] = VectorEnv(self.catalog, self.sim, widths)
        return self._envs[widths]

    def answer(self, job: LabelJob | CheckJob) -> LabelPart | CheckPart:
        env = self.env(job.widths)
        return label_on(env, self.grid, job) if isinstance(job, LabelJob) else check_on(env, self.grid, job)


class LocalLabellers:
    """Labelling in this process, on one in-process env per training shard (`env_of`)."""

    def __init__(self, env_of: Callable[[int], VectorEnv], grid: ActionGrid) -> None:
        self.env_of, self.grid = env_of, grid

    def label(self, job: LabelJob) -> list[LabelPart]:
        return [label_on(self.env_of(job.shard), self.grid, job)]

    def check(self, job: CheckJob) -> list[CheckPart]:
        return [check_on(self.env_of(job.shard), self.grid, job)]

    def figures(self) -> dict[str, float]:
        return {}

    def close(self) -> None:
        return None
