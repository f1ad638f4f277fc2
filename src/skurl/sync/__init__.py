"""Every weight backend, behind sync/api.py's WeightBackend and WeightSubscriber: inproc.py,
redis.py (+ redis_subscriber.py), grpc.py, ray.py, wire.py (wire versions over any of
them) and history.py (weights by exact version). `open_backend` and `open_subscriber` pick
the network backend of sync.backend for the learner and for a collector."""

from __future__ import annotations

from typing import TYPE_CHECKING

from skurl.errors import ConfigError

if TYPE_CHECKING:
    from skurl.config import Config
    from skurl.sync.api import Tensors, WeightSubscriber
    from skurl.sync.grpc import HostedGrpcWeights
    from skurl.sync.redis import RedisWeightPublisher


def open_backend(cfg: Config, host: str = "127.0.0.1") -> RedisWeightPublisher | HostedGrpcWeights:
    """The learner's side of sync.backend: Redis, or a WeightSyncService hosted on `host`
    (deploy.weights_port); an unreachable Redis is one line naming sync.redis_url."""
    if cfg.sync.backend == "redis":
        from skurl.sync.redis import RedisWeightPublisher

        return RedisWeightPublisher.from_config(cfg.sync, cfg.store)
    if cfg.sync.backend == "grpc":
        from skurl.sync.grpc import HostedGrpcWeights

        return HostedGrpcWeights(cfg.rpc, cfg.sync.key, host, cfg.deploy.weights_port)
    raise ConfigError(f"sync.backend = {cfg.sync.backend!r}: in-process weights cannot reach other "
                      "processes; expected redis or grpc")


def open_subscriber(cfg: Config, like: Tensors) -> WeightSubscriber:
    """A collector's side of sync.backend (redis | grpc at deploy.weights_address); `like`
    (the model's state_dict) makes weights of other names, shapes or dtypes refused."""
    if cfg.sync.backend == "redis":
        from skurl.sync.redis_subscriber import RedisWeightSubscriber

        return RedisWeightSubscriber.from_config(cfg.sync, cfg.store, like=like)
    if not cfg.deploy.weights_address:
        raise ConfigError("deploy.weights_address is empty: with sync.backend=grpc a collector "
                          "needs the learner's WeightSyncService as host:port")
    from skurl.sync.grpc import GrpcWeightSubscriber

    return GrpcWeightSubscriber(cfg.deploy.weights_address, cfg.rpc, cfg.sync.key,
                                connect_timeout_s=cfg.deploy.start_timeout_s, like=like)
