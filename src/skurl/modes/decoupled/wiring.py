"""`skurl train --mode decoupled`: sim servers, collectors and the learner as processes.

Wiring only, like Sample Factory's parallel runner: start the sim servers and collectors
on this machine (modes/decoupled/supervisor.py), connect the weight sync backend
(modes/decoupled/learner_weights.py) and the rollout store (store.url; by default RUN_DIR/rollouts),
and run the one loop (train/loop.py) with GrpcCollectors (modes/decoupled/grpc_collectors.py) in
this process. For several machines start the roles alone: skurl serve-sim / collector / learner.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

from skurl.collect.collectors import Collectors
from skurl.config import Config, load_config
from skurl.config.secrets import redact_url
from skurl.errors import ConfigError
from skurl.learn.checkpoint import refuse_existing
from skurl.modes.decoupled.grpc_collectors import Driven, WireBackend
from skurl.modes.decoupled.learner_weights import open_weights
from skurl.modes.decoupled.roles import check_decoupled
from skurl.modes.decoupled.supervisor import LocalCluster, RestartsCounted, with_run_store
from skurl.policy.learned import run_config_file
from skurl.store import open_store
from skurl.telemetry.metrics import get_metrics
from skurl.train.evaluation import TRAINED
from skurl.train.loop import Parts, Trainer, TrainResult

if TYPE_CHECKING:
    from skurl.modes.decoupled.learner_weights import HostedWeights, RedisWeights

log = logging.getLogger("skurl.modes")
Wrap = Callable[[Collectors, Trainer], Collectors]  # (the run's collectors, the trainer) -> a wrapper (tests inject faults)


def learner_trainer(cfg: Config, run_dir: str | Path, addresses: list[str], backend: WireBackend, *,
                    resume: bool = False, stream: IO[str] | None = None, baseline: bool = True) -> Trainer:
    """The loop over running collectors; a checkpoint drops the shards a resume no longer
    needs, and each evaluation's business figures go to Prometheus."""
    check_decoupled(cfg)
    store = open_store(cfg.store)
    driven = Driven(addresses, backend, store)
    trainer = Trainer(cfg, run_dir, Parts("decoupled", driven.collectors, weights=driven.weights, close=driven.close),
                      resume=resume, stream=stream, baseline=baseline)
    trainer.on_checkpoint.append(lambda it: store.delete_before(trainer.learner.iteration))
    evaluator = trainer.evaluator
    assert evaluator is not None
    evaluator.on_evaluated.append(
        lambda it, out: get_metrics().record_business(trainer.run_dir.name, TRAINED, cast("dict[str, Any]", evaluator.last)))  # set before hooks
    return trainer


def run_with_collectors(cfg: Config, run_dir: str | Path, collectors: list[str], *,
                        weights: RedisWeights | HostedWeights | None = None, resume: bool = False,
                        stream: IO[str] | None = None,
                        stop_after: int | None = None, baseline: bool = True,
                        metrics_port: int | None = None, wrap: Wrap | None = None,
                        host: str = "127.0.0.1") -> TrainResult:
    """The learner over running collectors (`skurl learner`, and the launcher below);
    `host` is the interface of a hosted WeightSyncService and of /metrics; `wrap` puts a
    wrapper around the run's collectors (fault injection in tests: kill, corrupt, count)."""
    from skurl.telemetry.metrics import serve_metrics

    run_dir = Path(run_dir)
    own_weights = weights is None
    weights = open_weights(cfg, host) if weights is None else weights
    port = cfg.deploy.metrics_base_port if metrics_port is None else metrics_port
    metrics = serve_metrics(port, addr=host)
    try:
        trainer = learner_trainer(cfg, run_dir, collectors, weights, resume=resume, stream=stream,
                                  baseline=baseline)
        trainer.metrics_url = metrics.url
        if wrap is not None:
            trainer.parts.wraps.append(lambda inner: wrap(inner, trainer))
        log.info("learner metrics on %s; weights on %s", metrics.url,
                 weights.address or redact_url(cfg.sync.redis_url))
        return trainer.run(stop_after)
    finally:
        metrics.close()
        if own_weights:
            weights.close()


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
    return run_with_collectors(cfg, run_dir, list(cfg.deploy.collector_addresses),
                               resume=resume, stream=stream, baseline=baseline,
                               metrics_port=metrics_port, host=host)


def _launch(cfg: Config, run_dir: Path, *, resume: bool, stream: IO[str] | None,
            stop_after: int | None, baseline: bool, wrap: Wrap | None) -> TrainResult:
    check_decoupled(cfg)
    cfg = with_run_store(cfg, run_dir)
    weights = open_weights(cfg)  # an unreachable Redis is one line here, before any process
    cluster = LocalCluster(cfg, run_dir, weights.address)
    try:
        cluster.start()
        cluster.write_description()
        def counted(inner: Collectors, trainer: Trainer) -> Collectors:
            return RestartsCounted(wrap(inner, trainer) if wrap else inner, cluster, weights)

        return run_with_collectors(cfg, run_dir, cluster.collector_addresses, weights=weights, resume=resume,
                                   stream=stream, stop_after=stop_after, baseline=baseline, wrap=counted)
    finally:
        cluster.stop()
        weights.close()


def train(cfg: Config, run_dir: str | Path, *, stream: IO[str] | None = None,
          stop_after: int | None = None, baseline: bool = True,
          wrap: Wrap | None = None) -> TrainResult:
    """A new decoupled run in `run_dir` (refuses a directory that already holds checkpoints)."""
    refuse_existing(run_dir)
    return _launch(cfg, Path(run_dir), resume=False, stream=stream, stop_after=stop_after,
                   baseline=baseline, wrap=wrap)


def resume(run_dir: str | Path, overrides: list[str] | None = None, *,
           stream: IO[str] | None = None, stop_after: int | None = None, baseline: bool = True,
           wrap: Wrap | None = None) -> TrainResult:
    """Continue the decoupled run in `run_dir` from its latest checkpoint, reading back the
    interrupted iteration's stored shards."""
    cfg_file = run_config_file(run_dir, "--resume")
    cfg = load_config(cfg_file, overrides)
    return _launch(cfg, Path(run_dir), resume=True, stream=stream, stop_after=stop_after,
                   baseline=baseline, wrap=wrap)
