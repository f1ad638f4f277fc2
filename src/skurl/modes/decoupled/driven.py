"""Decoupled mode's collectors and weights, built together for the loop (train/mode.py):
GrpcCollectors publish under wire versions on the sync backend. Under collect.staleness the
loop's publisher stays in process and the collectors publish each iteration's behaviour
version, from the weight history, to the wire (collect/staleness.py), so a collector holds
exactly that version when it collects."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from skurl.buffer.assemble import ShardAssembly
from skurl.collect.breaker import max_lag_of
from skurl.collect.collectors import Collectors, NewestWeights, WeightSource
from skurl.collect.near_policy import with_staleness
from skurl.modes.decoupled.grpc_collectors import GrpcCollectors
from skurl.modes.decoupled.lag_watch import CollectorLagWatch
from skurl.modes.decoupled.shard_stream import CONSUMER, StreamShares, open_stream, uses_stream
from skurl.sync.history import WeightHistory
from skurl.sync.wire import WIRE_FILE, WirePublisher, WireVersions
from skurl.train.mode import Observer, in_process_weights

if TYPE_CHECKING:
    from skurl.collect.bounded import BoundedStaleness
    from skurl.learn.learner import Learner
    from skurl.store.api import RolloutStore
    from skurl.store.shard_queue_redis import RedisShardQueue
    from skurl.sync.api import WeightBackend
    from skurl.train.core import RunCore


def driven_collectors(core: RunCore, learner: Learner, addresses: Sequence[str], backend: WeightBackend,
                      store: RolloutStore, *, assembly: ShardAssembly | None = None) -> GrpcCollectors:
    """GrpcCollectors over `addresses` for the run of `core` and `learner`, their weights on
    `backend` under wire versions, starting above what any collector or the backend holds."""
    from skurl.modes.decoupled.remote_grid import publish_center
    cfg = core.cfg
    assembly = assembly or ShardAssembly(core.catalog.sku_id, cfg.sim.days, learner.model.obs_dim)
    grpc_collectors = GrpcCollectors(
        cfg, addresses, store, WirePublisher(backend, WireVersions(core.run_dir / WIRE_FILE)),
        learner.weights, assembly, core.timer, resumed=core.resumed, run_name=core.run_dir.name,
        grid_center=publish_center(store, core.grid.tuned))  # the collectors' cover grid
    grpc_collectors.weights.wire.raise_floor(grpc_collectors.version_floor(backend))
    return grpc_collectors


class StoreCleanup(Observer):
    """After each checkpoint, drop the stored shards a resume no longer needs."""

    def __init__(self, store: RolloutStore, learner: Learner) -> None:
        self.store, self.learner = store, learner

    def on_checkpoint(self, it: int) -> None:
        self.store.delete_before(self.learner.iteration)


class Driven:
    """The collectors of `addresses` driven by this process, and the weights they take."""

    def __init__(self, addresses: Sequence[str], backend: WeightBackend, store: RolloutStore) -> None:
        self.addresses, self.backend, self.store = addresses, backend, store
        self.grpc: GrpcCollectors | None = None
        self.stream: RedisShardQueue | None = None  # the run's shard stream (bounded staleness, weights through Redis)
        self.observers: list[Observer] = []

    def build(self, core: RunCore, learner: Learner) -> tuple[Collectors, WeightBackend]:
        """The loop's collectors and weight publisher; `observers` then holds what follows the loop."""
        grpc_collectors = self.grpc = driven_collectors(core, learner, self.addresses, self.backend, self.store)
        self.observers = [StoreCleanup(self.store, learner)]
        c = core.cfg.collect
        if c.staleness == 0:
            return grpc_collectors, grpc_collectors.weights
        latest = in_process_weights(learner)

        def from_history(history: WeightSource) -> GrpcCollectors:
            grpc_collectors.weights_of = lambda: history.wait_for(grpc_collectors.version, timeout=60.0)[1]
            return grpc_collectors

        collectors = with_staleness(c, core.cfg.train, cast(NewestWeights, latest), core.run_dir, from_history, WeightHistory,
                                    learner.sample_index)
        if c.staleness_mode == "bounded":  # collectors use the newest weights: watch their lag
            watched = cast("BoundedStaleness", collectors)  # what with_staleness builds when bounded
            grpc_collectors.watch = CollectorLagWatch(max_lag_of(c), watched.learner_version, watched.ahead,
                                                      grpc_collectors.weights.wire.map.get)
        if uses_stream(core.cfg):  # shards announced on the run's Redis Stream
            self.stream = open_stream(core.cfg, core.run_dir.name, CONSUMER)
            shares = StreamShares(self.stream, grpc_collectors, core.run_dir, learner.iteration, resumed=core.resumed)
            self.observers.append(shares)
            return shares.attach(cast("BoundedStaleness", collectors)), latest
        return collectors, latest

    def close(self) -> None:
        if self.grpc is not None:
            self.grpc.close()
        if self.stream is not None:
            self.stream.close()
