"""An Env over a shard that lives elsewhere and can be lost (a gRPC sim server, a Ray
worker): the one record-and-replay wrapper for every transport.

It records the episode's (seed, episode) and every day's orders. When a call fails
because the shard is gone, the transport rebuilds it from that log (reconnect or
restart, reset, step the same orders from day 0) and the call is made once more. Every
random draw is a pure function of (seed, episode, SKU, day, stream), so the rebuilt
state is exactly the lost one: no transition is lost or repeated.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import numpy as np

from skurl.sim.api import Obs, ObsSchema, StepResult

T = TypeVar("T")


@dataclass
class EpisodeLog:
    """What a rebuild needs: the episode's key (None before the first reset) and the
    orders of each day stepped since."""

    episode: tuple[int, int] | None = None
    orders: list[np.ndarray] = field(default_factory=list)


class ShardTransport(Protocol):
    """One transport's calls to the shard, and how it brings a lost shard back."""

    @property
    def schema(self) -> ObsSchema: ...

    @property
    def num_skus(self) -> int: ...

    @property
    def sku_ids(self) -> np.ndarray: ...

    def reset(self, seed: int, episode: int) -> Obs: ...

    def step(self, orders: np.ndarray) -> StepResult: ...

    def info(self) -> dict[str, Any]: ...

    def lost(self, exc: BaseException) -> bool:
        """True when `exc` means the shard is gone (and rebuild() can bring it back)."""
        ...

    def rebuild(self, log: EpisodeLog, cause: BaseException) -> None:
        """A shard at the state `log` leads to, or raise (one line naming the shard)."""
        ...

    def close(self) -> None: ...


class ReplayingEnv:
    """The Env protocol over a ShardTransport that survives losing the shard;
    `recoveries` counts the rebuilds."""

    def __init__(self, transport: ShardTransport) -> None:
        self.transport = transport
        self.log = EpisodeLog()
        self.recoveries = 0

    def __getattr__(self, name: str) -> Any:  # shard, metric_sums...: the transport's
        if name == "transport":  # not set yet (during __init__): no recursion
            raise AttributeError(name)
        return getattr(self.transport, name)

    @property
    def num_skus(self) -> int:
        return self.transport.num_skus

    @property
    def sku_ids(self) -> np.ndarray:
        return self.transport.sku_ids

    @property
    def schema(self) -> ObsSchema:
        return self.transport.schema

    def reset(self, seed: int, episode: int = 0) -> Obs:
        self.log = EpisodeLog((int(seed), int(episode)))
        return self._attempt(lambda t: t.reset(int(seed), int(episode)))

    def step(self, orders: np.ndarray) -> StepResult:
        arr = np.array(orders, copy=True)  # kept for a replay; the caller may reuse its buffer
        result = self._attempt(lambda t: t.step(arr))
        self.log.orders.append(arr)
        return result

    def info(self) -> dict[str, Any]:
        return self._attempt(lambda t: t.info())

    def close(self) -> None:
        self.transport.close()

    def _attempt(self, call: Callable[[ShardTransport], T]) -> T:
        """`call`; after a loss, once more on the rebuilt shard."""
        try:
            return call(self.transport)
        except Exception as exc:
            if not self.transport.lost(exc):
                raise
            self.transport.rebuild(self.log, exc)
            self.recoveries += 1
        return call(self.transport)
