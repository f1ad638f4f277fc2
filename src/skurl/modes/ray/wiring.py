"""`skurl train --mode ray`: the one loop in the driver, its simulators and collectors Ray actors.

Wiring only: the loop (train/loop.py: learner, evaluation, checkpoints, logs and report in
the driver) with the collectors of a RayCluster (modes/ray/cluster.py) and weights in a Ray
weight slot. With ray.collectors = 1 the collector runs the whole SKU set in catalog order,
so the same config and seed give bit-identical weights to --mode colocated
(docs/architecture.md, Modes). A restarted learner (--resume) trains on the interrupted
iteration's shards when they are in the rollout store (ray.rollouts=store).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from skurl.config import Config
from skurl.learn.learner import Learner
from skurl.modes.ray.cluster import RayCluster
from skurl.train.core import RunCore
from skurl.train.mode import Wiring, collector_model, plain_learner


class RayMode:
    """The Ray mode: a RayCluster (Ray started or joined at build, closed with the run)."""

    name = "ray"
    lead = True

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.cluster: RayCluster | None = None  # built in phase 2 (tests reach its actors)

    def learner(self, core: RunCore) -> Learner:
        return plain_learner(core)

    def build(self, core: RunCore, learner: Learner) -> Wiring:
        resumed_from = learner.iteration if core.resumed else None  # fixed at the start
        cluster = self.cluster = RayCluster(self.cfg, core, collector_model(learner), resumed_from)
        try:
            collectors, weights = cluster.wire(learner)
        except BaseException:
            cluster.close()
            raise
        labellers = None
        if self.cfg.train.algo == "dcl":  # DCL labels on the collector actors (modes/ray/labellers.py)
            from skurl.modes.ray.labellers import RayLabellers

            labellers = RayLabellers(cluster)
        return Wiring(collectors, weights, close=cluster.close, labellers=labellers)


def mode(cfg: Config, run_dir: Path) -> RayMode:
    """The ModeFor of --mode ray (train/run.py)."""
    return RayMode(cfg)


def with_address(cfg: Config, address: str | None) -> Config:
    """`cfg` joining the Ray cluster at `address` (None or empty: as configured)."""
    return cfg if not address else dataclasses.replace(cfg, ray=dataclasses.replace(cfg.ray, address=address))
