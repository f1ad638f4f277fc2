"""`skurl train --mode decoupled`: sim servers, collectors and the learner as processes.

Wiring only, like Sample Factory's parallel runner: open the weight sync backend
(sync/__init__.py's open_backend), start the sim servers and collectors on this machine
(modes/decoupled/supervisor.py) unless they run already, serve /metrics, and drive the
collectors (modes/decoupled/driven.py) from the one loop (train/loop.py). For several
machines start the roles alone: skurl serve-sim / collector / learner.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import IO, TYPE_CHECKING

from skurl.collect.collectors import Collectors
from skurl.config import Config
from skurl.config.secrets import redact_url
from skurl.errors import ConfigError
from skurl.learn.learner import Learner
from skurl.modes.decoupled.driven import Driven
from skurl.modes.decoupled.roles import check_decoupled
from skurl.modes.decoupled.supervisor import LocalCluster, RestartsCounted, with_run_store
from skurl.modes.observers import BusinessFigures
from skurl.store import open_store
from skurl.sync import open_backend
from skurl.sync.grpc import HostedGrpcWeights
from skurl.train.core import RunCore
from skurl.train.loop import Trainer, TrainResult
from skurl.train.mode import Wiring, plain_learner
from skurl.train.run import RunWrap, run_trainer

if TYPE_CHECKING:
    from skurl.sync.redis import RedisWeightPublisher

log = logging.getLogger("skurl.modes")


class Decoupled:
    """The learner's mode over the collectors of `addresses`, or (None) over sim servers and
    collectors it starts on this machine; `host` is the interface of /metrics and of a
    hosted WeightSyncService; `weights`: a backend opened by the caller (None: opened at
    build and closed with the run)."""

    name = "decoupled"
    lead = True

    def __init__(self, cfg: Config, run_dir: Path, addresses: list[str] | None = None, *,
                 host: str = "127.0.0.1", metrics_port: int | None = None,
                 weights: RedisWeightPublisher | HostedGrpcWeights | None = None) -> None:
        check_decoupled(cfg)  # one line, before the run's core is built
        self.cfg = cfg if addresses is not None else with_run_store(cfg, run_dir)
        self.addresses, self.host, self.weights = addresses, host, weights
        if weights is None and cfg.sync.backend == "redis":
            open_backend(self.cfg, host).close()  # an unreachable Redis is one line here, before any work
        self.metrics_port = cfg.deploy.metrics_base_port if metrics_port is None else metrics_port

    def learner(self, core: RunCore) -> Learner:
        return plain_learner(core)

    def build(self, core: RunCore, learner: Learner) -> Wiring:
        from skurl.telemetry.metrics import serve_metrics

        started = ExitStack()
        try:
            weights = self.weights
            if weights is None:
                weights = open_backend(self.cfg, self.host)
                started.callback(weights.close)
            cluster, addresses = None, self.addresses
            hosted = weights.address if isinstance(weights, HostedGrpcWeights) else None  # collectors follow it
            if addresses is None:
                cluster = LocalCluster(self.cfg, core.run_dir, hosted)
                started.callback(cluster.stop)
                cluster.start()
                cluster.write_description()
                addresses = cluster.collector_addresses
            metrics = serve_metrics(self.metrics_port, addr=self.host)
            started.callback(metrics.close)
            driven = Driven(addresses, weights, open_store(self.cfg.store))
            started.callback(driven.close)
            collectors, publisher = driven.build(core, learner)
            counted: list[Callable[[Collectors], Collectors]] = [] if cluster is None else [
                partial(RestartsCounted, cluster=cluster, weights=weights)]
            log.info("learner metrics on %s; weights on %s", metrics.url,
                     hosted or redact_url(self.cfg.sync.redis_url))
            labellers = None
            if self.cfg.train.algo == "dcl":  # DCL labels on the collectors (modes/decoupled/labellers.py)
                from skurl.modes.decoupled.labellers import GrpcLabellers

                assert driven.grpc is not None  # driven.build made it
                labellers = GrpcLabellers(driven.grpc)
                started.callback(labellers.close)
            return Wiring(collectors, publisher, close=started.close, metrics_url=metrics.url, around=counted,
                          observers=[*driven.observers, BusinessFigures(core.run_dir.name)], labellers=labellers)
        except BaseException:
            started.close()
            raise


def launched(cfg: Config, run_dir: Path) -> Decoupled:
    """The ModeFor of --mode decoupled (train/run.py): it starts its own sim servers and collectors."""
    return Decoupled(cfg, run_dir)


def run_with_collectors(cfg: Config, run_dir: str | Path, collectors: list[str], *,
                        weights: RedisWeightPublisher | HostedGrpcWeights | None = None, resume: bool = False,
                        stream: IO[str] | None = None, stop_after: int | None = None, baseline: bool = True,
                        metrics_port: int | None = None, wrap: RunWrap | None = None,
                        host: str = "127.0.0.1") -> TrainResult:
    """The learner over running collectors (`skurl learner`; tests that start the roles
    themselves); `wrap` puts a wrapper around the run's collectors (fault injection)."""
    mode = Decoupled(cfg, Path(run_dir), collectors, host=host, metrics_port=metrics_port, weights=weights)
    return run_trainer(Trainer(cfg, run_dir, mode, resume=resume, stream=stream, baseline=baseline), stop_after, wrap)


def run_learner(cfg: Config, run_dir: str | Path, *, resume: bool = False,
                stream: IO[str] | None = None, baseline: bool = True,
                metrics_port: int | None = None, host: str = "127.0.0.1") -> TrainResult:
    """`skurl learner`: the loop over the collectors of deploy.collector_addresses."""
    if not cfg.deploy.collector_addresses:
        raise ConfigError("deploy.collector_addresses is empty: `skurl learner` drives running "
                          "collectors (skurl collector); list their host:port")
    if cfg.sync.backend == "grpc" and cfg.deploy.weights_port == 0:
        raise ConfigError("deploy.weights_port = 0: with sync.backend=grpc, collectors started "
                          "alone find the learner's weights service only on a fixed port")
    return run_with_collectors(cfg, run_dir, list(cfg.deploy.collector_addresses), resume=resume, stream=stream,
                               baseline=baseline, metrics_port=metrics_port, host=host)
