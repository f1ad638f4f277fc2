"""The run's collectors under collect.staleness: the inner ones at 0 (the sync barrier),
FixedStaleness (collect/staleness.py) or BoundedStaleness (collect/bounded.py) around them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from skurl.collect.bounded import bounded
from skurl.collect.collectors import Collectors, KeepWeights, NewestWeights, WeightSource
from skurl.collect.staleness import HISTORY_DIR, FixedStaleness, SampleAt
from skurl.config import CollectConfig, TrainConfig


def with_staleness(collect: CollectConfig, train: TrainConfig, latest: NewestWeights, run_dir: Path,
                   local: Callable[[WeightSource], Collectors], keep: KeepWeights,
                   sample_at: SampleAt | None = None) -> Collectors:
    """The run's collectors: `local(latest)` at collect.staleness 0 (the sync barrier), else
    FixedStaleness over `local(history)` (`sample_at`: the learner's SKU sample of a given
    iteration, for collecting ahead under ppo.sample_skus), or BoundedStaleness
    (collect/bounded.py) under staleness_mode=bounded; `keep` makes the weight history
    (sync/history.py's WeightHistory)."""
    n = collect.staleness
    if n == 0:
        return local(latest)
    if collect.staleness_mode == "bounded":
        return bounded(collect, latest, local, keep)
    history = keep(n + 1, run_dir / HISTORY_DIR, n + train.keep_checkpoints * train.checkpoint_every)
    return FixedStaleness(local(history), latest, history, n, ahead=collect.ahead, iterations=train.iterations,
                          sample_at=sample_at)
