"""`skurl train` (--mode colocated): simulator, collectors and learner in one process.

The one loop (train/loop.py) with in-process collectors over the training shards' envs,
weights in memory (the sync barrier), and collect.staleness's collect-ahead around them
(collect/staleness.py). Like Sample Factory's serial runner: a mode is where the parts live.
"""

from __future__ import annotations

import time
from pathlib import Path

from skurl.collect.collectors import Collected, LocalCollectors, SampleIndex
from skurl.collect.near_policy import with_staleness
from skurl.config import Config
from skurl.learn.learner import Learner
from skurl.modes.observers import BusinessFigures
from skurl.sync.history import WeightHistory
from skurl.telemetry.metrics import business_from_totals, get_metrics
from skurl.train.core import RunCore
from skurl.train.mode import Wiring, collector_model, in_process_weights, plain_learner


class Colocated:
    """The colocated mode: in-process collectors over the training shards' envs, weights
    in memory, collect.staleness's collect-ahead around them."""

    name = "colocated"
    lead = True

    def learner(self, core: RunCore) -> Learner:
        return plain_learner(core)

    def build(self, core: RunCore, learner: Learner) -> Wiring:
        c = core.cfg.collect
        latest, model = in_process_weights(learner), collector_model(learner)
        collectors = with_staleness(c, core.cfg.train, latest, core.run_dir, lambda weights: RecordingCollectors(
            LocalCollectors(core.local_env, len(core.shards), model, core.grid, weights, core.timer, collect=c,
                            sample_env=core.sample_env),
            core.run_dir.name, core.cfg.sim.backorders), WeightHistory, learner.sample_index)
        return Wiring(collectors, latest, observers=[BusinessFigures(core.run_dir.name)])


def mode(cfg: Config, run_dir: Path) -> Colocated:
    """The ModeFor of --mode colocated (train/run.py)."""
    return Colocated()


class RecordingCollectors:
    """LocalCollectors that record what a collector process records (collector_* and the
    episode's business_* metrics), so a colocated /metrics shows the same families."""

    def __init__(self, inner: LocalCollectors, run_name: str, backorders: bool) -> None:
        self.inner, self.run_name, self.backorders = inner, run_name, backorders

    def collect(self, iteration: int, seed: int, version: int, sample: SampleIndex) -> Collected:
        start = time.perf_counter()
        out = self.inner.collect(iteration, seed, version, sample)
        seconds = time.perf_counter() - start
        rows = int(out.scalars.get("transitions", out.rollout.rewards.size))  # simulated, not only sampled
        m = get_metrics()
        m.collector_episodes_total.inc()
        m.collector_episode_duration_seconds.observe(seconds)
        m.collector_steps_per_second.set(rows / max(seconds, 1e-9))
        m.collector_buffer_size.set(rows)
        totals = getattr(self.inner.last_env, "totals", None)
        if callable(totals):
            sums = {k: float(v.sum()) for k, v in totals().items()}
            m.record_business(self.run_name, "collect", business_from_totals(sums, rows, self.backorders))
        return out

    def close(self) -> None:
        self.inner.close()
