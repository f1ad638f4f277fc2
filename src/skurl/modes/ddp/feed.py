"""The DDP learner's Collectors: rank 0 collects as `--mode decoupled` does (GrpcCollectors
over deploy.collector_addresses, or the shards others write to the store), then tells every
other rank which shards it trained on (their sha256, as a tensor: nothing is pickled); each
rank reads those same shards from the store and assembles the same rollout.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.distributed as dist

from skurl.buffer.assemble import ShardAssembly, sample_mask
from skurl.collect.collectors import Collected, SampleIndex
from skurl.errors import UserError
from skurl.modes.decoupled.collect_report import CollectReport, rollout_scalars
from skurl.store import CorruptShardError, ShardManifest

if TYPE_CHECKING:
    from skurl.buffer.rollout import Rollout
    from skurl.modes.decoupled.grpc_collectors import GrpcCollectors
    from skurl.store.api import RolloutStore

_DIGEST = 32  # bytes of a shard's sha256


def broadcast_ints(values: list[int], device: torch.device) -> list[int]:
    """Rank 0's `values` on every rank (a tensor collective)."""
    if not dist.is_initialized():
        return values
    t = torch.tensor(values, dtype=torch.int64, device=device)
    dist.broadcast(t, src=0)
    return [int(v) for v in t.tolist()]


def broadcast_state(state: dict[str, torch.Tensor]) -> None:
    """Rank 0's tensors into every rank's `state` in place (same keys, same order)."""
    if not dist.is_initialized():
        return
    for name in sorted(state):
        dist.broadcast(state[name], src=0)


class RecordingStore:
    """A rollout store that remembers the last shard read of each collector: what
    GrpcCollectors read last of a collector is the shard it trained on (a rejected
    shard is collected and read again)."""

    def __init__(self, store: RolloutStore) -> None:
        self.store = store
        self.read: dict[str, ShardManifest] = {}

    def get_shard(self, manifest: ShardManifest) -> dict[str, np.ndarray]:
        self.read[manifest.collector_id] = manifest
        return self.store.get_shard(manifest)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


class ShardReader:
    """Reads, verifies and assembles an iteration's shards from the store."""

    def __init__(self, store: RolloutStore, assembly: ShardAssembly, *, wait_s: float, poll_s: float) -> None:
        self.store, self.assembly, self.wait_s, self.poll_s = store, assembly, wait_s, poll_s

    def choose(self, sample: SampleIndex) -> None:
        n = len(self.assembly.sku_ids)
        self.assembly.chosen = sample_mask(n, sample(n))

    def listed(self, iteration: int, enough: Callable[[list[ShardManifest]], bool], what: str) -> list[ShardManifest]:
        """The iteration's manifests once `enough(found)` holds (UserError after wait_s)."""
        deadline = time.monotonic() + self.wait_s
        while True:
            found = self.store.list_shards(iteration)
            if enough(found):
                return sorted(found, key=lambda m: (m.sku_start, m.collector_id))
            if time.monotonic() > deadline:
                raise UserError(f"rollout store {self.store.url}: iteration {iteration} has "
                                f"{len(found)} shards after {self.wait_s:g} s, expected {what}")
            time.sleep(self.poll_s)

    def arrays(self, manifest: ShardManifest, iteration: int, seed: int) -> dict[str, np.ndarray]:
        try:
            arrays = self.assembly.unpack(self.store.get_shard(manifest))
        except CorruptShardError as exc:
            arrays = f"is damaged ({exc.reason})"
        problem = arrays if isinstance(arrays, str) else self.assembly.problem(arrays)
        meta = manifest.meta
        if not problem and "seed" in meta and (meta.get("seed"), meta.get("episode", iteration)) != (seed, iteration):
            problem = (f"is episode {meta.get('episode')} of seed {meta.get('seed')}, expected "
                       f"{iteration} of train.seed={seed}")
        if problem:
            raise UserError(f"rollout shard {manifest.name} {problem}; not trained on")
        assert isinstance(arrays, dict)
        return arrays

    def assemble(self, manifests: list[ShardManifest], iteration: int, seed: int, version: int) -> Rollout:
        parts = [self.arrays(m, iteration, seed) for m in manifests]
        return self.assembly.assemble(parts, version=version, seed=seed, episode=iteration)


class StoredShards:
    """Rank 0's collectors when nobody is driven (deploy.collector_addresses empty): the
    deploy.collectors shards that others write to the store for each iteration."""

    def __init__(self, reader: ShardReader, expected: int) -> None:
        self.reader, self.expected = reader, expected
        self.last: list[ShardManifest] = []

    def collect(self, iteration: int, seed: int, version: int, sample: SampleIndex) -> Collected:
        self.reader.choose(sample)
        began = time.perf_counter()
        self.last = self.reader.listed(iteration, lambda found: len(found) >= self.expected,
                                       f"deploy.collectors = {self.expected}")
        held = {m.policy_version for m in self.last}
        if len(held) != 1:
            raise UserError(f"rollout shards of iteration {iteration} hold policy versions "
                            f"{sorted(held)}, expected one")
        rollout = self.reader.assemble(self.last, iteration, seed, held.pop())
        report = CollectReport()
        report.collect_wall = time.perf_counter() - began
        return Collected(rollout, rollout_scalars(rollout, report))

    def manifests(self) -> list[ShardManifest]:
        return self.last

    def close(self) -> None:
        pass


class DrivenShards:
    """Rank 0's collectors with deploy.collector_addresses: GrpcCollectors (over a
    RecordingStore), which knows the shards it trained on."""

    def __init__(self, grpc: GrpcCollectors, recording: RecordingStore) -> None:
        self.grpc, self.recording = grpc, recording

    def collect(self, iteration: int, seed: int, version: int, sample: SampleIndex) -> Collected:
        self.recording.read.clear()
        return self.grpc.collect(iteration, seed, version, sample)

    def manifests(self) -> list[ShardManifest]:
        return [self.recording.read[cid] for cid in self.grpc.clients]

    def close(self) -> None:
        self.grpc.close()


class RankFeed:
    """Collectors of every rank: rank 0 runs `lead` and broadcasts the shards' sha256 and
    the rollout's version; the other ranks assemble those shards themselves."""

    def __init__(self, lead: StoredShards | DrivenShards | None, reader: ShardReader,
                 device: torch.device) -> None:
        self.lead, self.reader, self.device = lead, reader, device

    def collect(self, iteration: int, seed: int, version: int, sample: SampleIndex) -> Collected:
        if self.lead is not None:
            try:
                got = self.lead.collect(iteration, seed, version, sample)
            except BaseException:
                broadcast_ints([0, 0, 0], self.device)  # the other ranks stop with one line
                raise
            digests = [bytes.fromhex(m.sha256) for m in self.lead.manifests()]
            broadcast_ints([1, len(digests), got.rollout.policy_version], self.device)
            self._broadcast_digests(digests)
            return got
        ok, count, held = broadcast_ints([0, 0, 0], self.device)
        if not ok:
            raise UserError(f"rank 0 failed to collect iteration {iteration} (see its error); "
                            "this rank stops with it")
        wanted = {d.hex() for d in self._broadcast_digests([bytes(_DIGEST)] * count)}
        self.reader.choose(sample)
        manifests = self.reader.listed(iteration, lambda found: wanted <= {m.sha256 for m in found},
                                       f"the {count} shards rank 0 trained on")
        chosen = [m for m in manifests if m.sha256 in wanted]
        return Collected(self.reader.assemble(chosen, iteration, seed, held))

    def _broadcast_digests(self, digests: list[bytes]) -> list[bytes]:
        if not dist.is_initialized() or not digests:
            return digests
        flat = np.frombuffer(b"".join(digests), np.uint8).copy()
        t = torch.from_numpy(flat).to(self.device)
        dist.broadcast(t, src=0)
        raw = t.cpu().numpy().tobytes()
        return [raw[i:i + _DIGEST] for i in range(0, len(raw), _DIGEST)]

    def close(self) -> None:
        if self.lead is not None:
            self.lead.close()

