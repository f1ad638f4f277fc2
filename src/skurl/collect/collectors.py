"""The seam between the training loop and whoever collects: one iteration's rollout, from
collectors in this process, collector processes over gRPC or Ray actors alike. The loop
(train/loop.py, Trainer.iteration) calls nothing else, so every mode shares it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from skurl.buffer.rollout import Rollout
from skurl.collect.collector import Collector
from skurl.config import CollectConfig
from skurl.policy.actions import ActionGrid
from skurl.policy.nets import ActorCritic
from skurl.sim.api import Env
from skurl.telemetry.stages import StageTimer

SampleIndex = Callable[[int], "np.ndarray | None"]  # the learner's SKU sample of N SKUs (None: all)
# (shard, sample rows) -> an env of the units holding those rows and their positions in it,
# or None where that is the whole shard (train/core.py RunCore.sample_env)
SampleEnv = Callable[[int, np.ndarray], "tuple[Env, np.ndarray] | None"]


@dataclass
class Collected:
    """One iteration's rollout (catalog row order, or the training shard's) and the
    collection figures of its record (transitions/s, reward spread, faults)."""

    rollout: Rollout
    scalars: dict[str, Any] = field(default_factory=dict)


class WeightSource(Protocol):
    """Where collectors wait for weights (the learner's publisher, a weight history): part
    of sync/api.py's WeightSubscriber, restated because the cores import nothing of sync."""

    def wait_for(self, version: int, timeout: float | None = None) -> tuple[int, dict[str, torch.Tensor]]: ...


class NewestWeights(WeightSource, Protocol):
    """A WeightSource that also tells its newest weights (a WeightSubscriber)."""

    def latest(self) -> tuple[int, dict[str, torch.Tensor]] | None: ...

    def latest_version(self) -> int | None: ...


class KeptWeights(WeightSource, Protocol):
    """Weights by exact version (sync/history.py's WeightHistory): what staleness collects with."""

    def put(self, version: int, tensors: dict[str, torch.Tensor]) -> None: ...

    def clear_directory(self) -> None: ...


# (keep, directory, keep_back) -> a history holding the last `keep` versions in memory and
# mirroring them to `directory` (None: memory only) while a resume `keep_back` versions back
# may need them: sync/history.py's WeightHistory, which the modes pass in.
KeepWeights = Callable[[int, "Path | None", int], KeptWeights]


class Collectors(Protocol):
    def collect(self, iteration: int, seed: int, version: int, sample: SampleIndex) -> Collected:
        """Episode `iteration` of `seed` under policy `version`; `sample` says which SKUs'
        observations the learner reads (collectors may keep only those)."""
        ...

    def close(self) -> None: ...


def reward_spread(rewards: np.ndarray) -> dict[str, float]:
    """5th, 50th and 95th percentiles of the SKUs' mean reward per day (rewards [days, SKUs])."""
    per_sku = rewards.mean(axis=0, dtype=np.float64)
    p5, p50, p95 = np.percentile(per_sku, [5, 50, 95])
    return {"reward_p5": p5, "reward_p50": p50, "reward_p95": p95}


def sample_rewards(rollout: Rollout, index: np.ndarray | None) -> dict[str, float]:
    """reward_mean and reward_spread over SKU columns `index` of `rollout` (None: all of it):
    under ppo.sample_skus the figures of the trained sample, the same in every mode, however
    much each simulated around it (colocated: the sample's units; others: whole shards)."""
    rewards = rollout.rewards if index is None else rollout.rewards[:, index]
    mean = float(rewards.mean(dtype=np.float64)) if rewards.size else 0.0
    return {"reward_mean": mean, **reward_spread(rewards)}


class LocalCollectors:
    """A Collector in this process over training shard `iteration % shards` (round robin).
    It waits for the version on `weights` (the sync barrier) like a remote one would."""

    def __init__(self, env_of: Callable[[int], Env], shards: int, model: ActorCritic, grid: ActionGrid,
                 weights: WeightSource,
                 timer: StageTimer, *, collect: CollectConfig, sample_env: SampleEnv | None = None) -> None:
        self.env_of, self.shards, self.model, self.grid, self.weights = env_of, shards, model, grid, weights
        self.timer, self.settings, self.sample_env = timer, collect, sample_env
        self.last_env: Env | None = None  # the env of the latest collection (its totals are that episode's)

    def collect(self, iteration: int, seed: int, version: int, sample: SampleIndex) -> Collected:
        shard = iteration % self.shards
        env = self.env_of(shard)
        index = sample(env.num_skus)
        narrowed = None if index is None or self.sample_env is None else self.sample_env(shard, index)
        if narrowed is not None:  # only the sample's units: the learner reads nothing else
            env, index = narrowed
        collector = Collector.from_config(env, self.model, self.grid, self.settings, timer=self.timer)
        with self.timer.stage("sync"):
            held, tensors = self.weights.wait_for(version, timeout=60.0)
            collector.set_weights(held, tensors)
        obs_skus = None if index is None else collector.sku_ids[index]
        rollout = collector.collect(seed, iteration, held, obs_skus=obs_skus)
        assert rollout is not None
        self.last_env = env
        scalars = {**collector.stats.scalars(), **reward_spread(rollout.rewards)}
        if narrowed is not None and narrowed[1].size < env.num_skus:  # the sample's columns, as the learner takes them
            rollout = rollout.select_skus(narrowed[1])
        return Collected(rollout, scalars)

    def close(self) -> None:
        pass
