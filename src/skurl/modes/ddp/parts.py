"""The DDP learner's parts for the one loop (train/loop.py): a DDPLearner, and RankFeed
collectors (modes/ddp/feed.py). Rank 0 leads: it drives the collectors of
deploy.collector_addresses (or reads the shards others' collectors write), publishes the
weights, evaluates, keeps the best policy and writes the run dir; the other ranks follow
its decisions through tensor broadcasts and write nothing."""

from __future__ import annotations

import os
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from skurl.buffer.assemble import ShardAssembly
from skurl.config import Config
from skurl.errors import ConfigError
from skurl.learn.ddp import DDPLearner
from skurl.learn.learner import resolve_device
from skurl.modes.ddp.feed import (
    DrivenShards,
    RankFeed,
    RecordingStore,
    ShardReader,
    StoredShards,
    broadcast_ints,
    broadcast_state,
)
from skurl.modes.decoupled.driven import StoreCleanup
from skurl.store import open_store
from skurl.train.mode import (
    Observer,
    Scalars,
    WarmStep,
    Wiring,
    in_process_weights,
    restore_checkpoint,
)

if TYPE_CHECKING:
    from skurl.learn.learner import Learner
    from skurl.modes.ddp.labellers import RankLabellers
    from skurl.modes.decoupled.grpc_collectors import GrpcCollectors
    from skurl.sync.api import WeightBackend
    from skurl.train.core import RunCore

MODE = "ddp"  # recorded in mode.json: `skurl train --resume` names the DDP learner command


class RankMode:
    """One rank's mode; `backend`: rank 0's weights backend (None: in process)."""

    name = MODE

    def __init__(self, cfg: Config, device: torch.device, backend: WeightBackend | None, *, wait_s: float, poll_s: float) -> None:
        self.cfg, self.device, self.backend = cfg, device, backend
        self.lead = not dist.is_initialized() or dist.get_rank() == 0
        self.store = open_store(cfg.store)
        self.wait_s, self.poll_s = wait_s, poll_s

    def learner(self, core: RunCore) -> DDPLearner:
        """The rank's learner; on a resume rank 0 restores first: it moves damaged
        checkpoints aside, which the others then skip."""
        learner = DDPLearner(core.cfg, core.schema.dim, core.grid.n, self.device)
        if core.resumed:
            if self.lead:
                restore_checkpoint(core, learner)
            if dist.is_initialized():
                dist.barrier()
            if not self.lead:
                restore_checkpoint(core, learner)
        return learner

    def build(self, core: RunCore, learner: Learner) -> Wiring:
        """Rank 0's publisher (wire versions on the backend, driving collectors or not) and
        every rank's feed of the shards."""
        reader = ShardReader(self.store, ShardAssembly(core.catalog.sku_id, self.cfg.sim.days, learner.model.obs_dim),
                             wait_s=self.wait_s, poll_s=self.poll_s)
        warm = partial(around_warm_start, learner, self.lead, self.device)
        if not self.lead:
            return Wiring(RankFeed(None, reader, self.device), in_process_weights(learner), around_warm_start=warm,
                          labellers=self._labellers(None))
        observers: list[Observer] = [StoreCleanup(self.store, learner)]
        if self.cfg.deploy.collector_addresses:
            from skurl.modes.decoupled.driven import driven_collectors

            recording = RecordingStore(self.store)
            assert self.backend is not None  # sync.backend=inproc with collectors to drive is refused
            grpc = driven_collectors(core, learner, self.cfg.deploy.collector_addresses, self.backend, recording,
                                     assembly=reader.assembly)
            labellers = self._labellers(grpc)
            return Wiring(RankFeed(DrivenShards(grpc, recording), reader, self.device), grpc.weights,
                          close=grpc.close, observers=observers, around_warm_start=warm, labellers=labellers)
        shards = StoredShards(reader, self.cfg.deploy.collectors)
        return Wiring(RankFeed(shards, reader, self.device), self._publisher(core, learner), observers=observers,
                      around_warm_start=warm, labellers=self._labellers(None, core))

    def _labellers(self, grpc: GrpcCollectors | None, core: RunCore | None = None) -> RankLabellers | None:
        """train.algo=dcl's: rank 0 labels on the collectors it drives (else in its own process,
        on `core`'s envs) and broadcasts the parts; the other ranks receive them."""
        if self.cfg.train.algo != "dcl":
            return None
        from skurl.learn.labelling import Labellers, LocalLabellers
        from skurl.modes.ddp.labellers import RankLabellers

        lead: Labellers | None = None
        if self.lead and grpc is not None:
            from skurl.modes.decoupled.labellers import GrpcLabellers

            lead = GrpcLabellers(grpc)
        elif self.lead and core is not None:
            lead = LocalLabellers(core.local_env, core.grid)
        return RankLabellers(lead, self.device)

    def _publisher(self, core: RunCore, learner: Learner) -> WeightBackend:
        """Weights for others' collectors, which take them from the backend (None: in process)."""
        if self.backend is None:
            return in_process_weights(learner)
        from skurl.sync.wire import WIRE_FILE, WirePublisher, WireVersions

        weights = WirePublisher(self.backend, WireVersions(core.run_dir / WIRE_FILE))
        held = self.backend.published_version()
        weights.wire.raise_floor(0 if held is None else held + 1)
        weights.publish(learner.version, learner.weights())
        return weights


def around_warm_start(learner: Learner, lead: bool, device: torch.device, step: WarmStep) -> Scalars:
    """Rank 0 clones the baseline (its statistics its own); every rank takes its weights."""
    assert isinstance(learner, DDPLearner)
    out: Scalars = {}
    if lead:
        with learner.local_statistics():
            out = step()
    broadcast_state(learner.model.state_dict())
    learner.version = broadcast_ints([learner.version], device)[0]
    return out


def init_distributed(cfg: Config, wait_s: float) -> torch.device:
    """Join torchrun's process group (env://) when there is one; the rank's device. The
    timeout covers rank 0's longest step alone (baseline, warm start, an evaluation)."""
    device = resolve_device(cfg.train.device)
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return device
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device.type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, timeout=timedelta(seconds=max(cfg.sync.timeout_s, wait_s, 1800.0)))
    return device


def check_ddp(cfg: Config) -> None:
    """What the DDP learner cannot do: one line naming the key."""
    if cfg.collect.staleness:
        raise ConfigError(f"collect.staleness = {cfg.collect.staleness}: the DDP learner trains strictly "
                          "on-policy so far; expected 0")
    if cfg.collect.skus:
        raise ConfigError(f"collect.skus = {cfg.collect.skus}: the DDP learner trains on "
                          "every SKU of the collectors' shards; expected 0 (use ppo.sample_skus)")
    if cfg.deploy.collector_addresses and cfg.sync.backend == "inproc":
        raise ConfigError("sync.backend = 'inproc': the DDP learner's weights cannot reach the "
                          "collectors of deploy.collector_addresses; expected redis (with "
                          "sync.redis_url) or grpc (the learner hosts it on deploy.weights_port)")
    if cfg.deploy.collector_addresses:
        from skurl.modes.decoupled.roles import check_decoupled

        check_decoupled(cfg)
