"""The learner's side of the weight sync backends in decoupled mode: Redis (sync.backend=redis)
or a WeightSyncService hosted in the learner's process (sync.backend=grpc)."""

from __future__ import annotations

from typing import Any

from skurl.config import Config
from skurl.modes.decoupled.roles import check_decoupled


class RedisWeights:
    """The learner's side of sync.backend=redis."""

    def __init__(self, cfg: Config) -> None:
        from skurl.sync.redis_sync import RedisWeightPublisher

        self._pub = RedisWeightPublisher.from_config(cfg.sync, cfg.store)  # one line if unreachable
        self.address: str | None = None

    def publish(self, version: int, tensors: dict[str, Any]) -> None:
        self._pub.publish(version, tensors)

    def server_restarts(self) -> int:
        return self._pub.server_restarts()

    def published_version(self) -> int | None:
        return self._pub.published_version()

    def close(self) -> None:
        self._pub.close()


class HostedWeights:
    """sync.backend=grpc: a WeightSyncService in the learner's process; publishing puts
    the encoded weights straight into it, collectors follow its Subscribe stream."""

    def __init__(self, cfg: Config, host: str = "127.0.0.1") -> None:
        from skurl.rpc.weights_server import WeightSyncServer

        self._server = WeightSyncServer(cfg.rpc, host, cfg.deploy.weights_port)
        self._key = cfg.sync.key
        self._expecting = False
        self.address: str | None = self._server.address

    def publish(self, version: int, tensors: dict[str, Any]) -> None:
        from skurl.rpc.weights_client import to_message
        from skurl.sync.codec import encode_checked, spec_of

        if not self._expecting:  # SetWeights from anyone else must fit the learner's model
            self._server.servicer.expect(self._key, spec_of(tensors))
            self._expecting = True
        self._server.servicer.put(to_message(encode_checked(tensors, version, self._key)))

    def published_version(self) -> int | None:
        held = self._server.servicer.held(self._key)
        return None if held is None else int(held.version)

    def close(self) -> None:
        self._server.stop()


def open_weights(cfg: Config, host: str = "127.0.0.1") -> RedisWeights | HostedWeights:
    check_decoupled(cfg)
    return RedisWeights(cfg) if cfg.sync.backend == "redis" else HostedWeights(cfg, host)
