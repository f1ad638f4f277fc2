"""The DDP learner's parts for the one loop (train/loop.py): a DDPLearner, and RankFeed
collectors (modes/ddp/feed.py). Rank 0 leads: it drives the collectors of
deploy.collector_addresses (or reads the shards others' collectors write), publishes the
weights, evaluates, keeps the best policy and writes the run dir; the other ranks follow
its decisions through tensor broadcasts and write nothing."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

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
from skurl.store import open_store

if TYPE_CHECKING:
    from skurl.modes.decoupled.grpc_collectors import WireBackend
    from skurl.sync.api import WeightPublisher
    from skurl.train.core import RunCore
    from skurl.train.seams import TrainerView
from skurl.train.loop import Parts, in_process_weights, restore_checkpoint

MODE = "ddp"  # recorded in mode.json: `skurl train --resume` names the DDP learner command


class RankParts:
    """One rank's choice of parts; `backend`: rank 0's weights backend (None: in process)."""

    def __init__(self, cfg: Config, device: torch.device, backend: WireBackend | None, *, wait_s: float, poll_s: float) -> None:
        self.cfg, self.device, self.backend = cfg, device, backend
        self.lead = not dist.is_initialized() or dist.get_rank() == 0
        self.store = open_store(cfg.store)
        self.wait_s, self.poll_s = wait_s, poll_s
        self.reader: ShardReader | None = None
        self.shards: StoredShards | DrivenShards | None = None
        self._learner: DDPLearner | None = None

    def parts(self) -> Parts:
        return Parts(MODE, self.collectors, weights=self.weights, learner=self.learner, restore=self.restore,
                     around_warm_start=self.around_warm_start, lead=self.lead)

    def learner(self, core: RunCore, obs_dim: int, n_actions: int) -> DDPLearner:
        self._learner = DDPLearner(core.cfg, obs_dim, n_actions, self.device)
        return self._learner

    def restore(self, trainer: TrainerView) -> dict[str, Any]:
        """Rank 0 first: it moves damaged checkpoints aside, which the others then skip."""
        meta = restore_checkpoint(trainer) if self.lead else {}
        if dist.is_initialized():
            dist.barrier()
        return meta if self.lead else restore_checkpoint(trainer)

    def weights(self, trainer: TrainerView) -> WeightPublisher:
        """Rank 0's publisher: wire versions on the backend, driving collectors or not."""
        core = trainer.core
        self.reader = ShardReader(self.store, ShardAssembly(core.catalog.sku_id, self.cfg.sim.days,
                                                            trainer.learner.model.obs_dim),
                                  wait_s=self.wait_s, poll_s=self.poll_s)
        if not self.lead:
            return in_process_weights(trainer)
        trainer.on_checkpoint.append(lambda it: self.store.delete_before(trainer.learner.iteration))
        if self.cfg.deploy.collector_addresses:
            from skurl.modes.decoupled.grpc_collectors import driven_collectors

            recording = RecordingStore(self.store)
            assert self.backend is not None  # sync.backend=inproc with collectors to drive is refused
            grpc = driven_collectors(trainer, self.cfg.deploy.collector_addresses, self.backend, recording,
                                     resumed=trainer.resumed, run_name=core.run_dir.name,
                                     assembly=self.reader.assembly)
            self.shards = DrivenShards(grpc, recording)
            return grpc.weights
        self.shards = StoredShards(self.reader, self.cfg.deploy.collectors)
        if self.backend is None:
            return in_process_weights(trainer)
        from skurl.modes.decoupled.grpc_collectors import WirePublisher
        from skurl.sync.wire_versions import WIRE_FILE, WireVersions

        weights = WirePublisher(self.backend, WireVersions(core.run_dir / WIRE_FILE))
        held = self.backend.published_version()  # others' collectors take these weights from the backend
        weights.wire.raise_floor(0 if held is None else held + 1)
        weights.publish(trainer.learner.version, trainer.learner.weights())
        return weights

    def collectors(self, trainer: TrainerView) -> RankFeed:
        assert self.reader is not None
        return RankFeed(self.shards, self.reader, self.device)

    def around_warm_start(self, step: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """Rank 0 clones the baseline (its statistics its own); every rank takes its weights."""
        learner = self._learner
        assert learner is not None, "the learner is built first"
        out: dict[str, Any] = {}
        if self.lead:
            with learner.local_statistics():
                out = step()
        broadcast_state(learner.model.state_dict())
        learner.version = broadcast_ints([learner.version], self.device)[0]
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
    if cfg.train.staleness:
        raise ConfigError(f"train.staleness = {cfg.train.staleness}: the DDP learner trains strictly "
                          "on-policy so far; expected 0")
    if cfg.train.collect_skus:
        raise ConfigError(f"train.collect_skus = {cfg.train.collect_skus}: the DDP learner trains on "
                          "every SKU of the collectors' shards; expected 0 (use ppo.sample_skus)")
    if cfg.deploy.collector_addresses and cfg.sync.backend == "inproc":
        raise ConfigError("sync.backend = 'inproc': the DDP learner's weights cannot reach the "
                          "collectors of deploy.collector_addresses; expected redis (with "
                          "sync.redis_url) or grpc (the learner hosts it on deploy.weights_port)")
    if cfg.deploy.collector_addresses:
        from skurl.modes.decoupled.roles import check_decoupled

        check_decoupled(cfg)
