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


def reward_spread(rollout: Rollout) -> dict[str, float]:
    """5th, 50th and 95th percentiles of the SKUs' mean reward per day."""
    per_sku = rollout.rewards.mean(axis=0, dtype=np.float64)
    p5, p50, p95 = np.percentile(per_sku, [5, 50, 95])
    return {"reward_p5": p5, "reward_p50": p50, "reward_p95": p95}


class LocalCollectors:
    """A Collector in this process over training shard `iteration % shards` (round robin).
    It waits for the version on `weights` (the sync barrier) like a remote one would."""

    def __init__(self, env_of: Callable[[int], Env], shards: int, model: ActorCritic, grid: ActionGrid,
                 weights: WeightSource,
                 timer: StageTimer, *, collect: CollectConfig) -> None:
        self.env_of, self.shards, self.model, self.grid, self.weights = env_of, shards, model, grid, weights
        self.timer, self.settings = timer, collect

    def collect(self, iteration: int, seed: int, version: int, sample: SampleIndex) -> Collected:
        collector = Collector.from_config(self.env_of(iteration % self.shards), self.model, self.grid,
                                          self.settings, timer=self.timer)
        with self.timer.stage("sync"):
            held, tensors = self.weights.wait_for(version, timeout=60.0)
            collector.set_weights(held, tensors)
        index = sample(collector.env.num_skus)
        obs_skus = None if index is None else collector.sku_ids[index]
        rollout = collector.collect(seed, iteration, held, obs_skus=obs_skus)
        assert rollout is not None
        return Collected(rollout, {**collector.stats.scalars(), **reward_spread(rollout)})

    def close(self) -> None:
        pass
