"""Rollout stores: where collectors put shards and the learner reads them (local or S3)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from skurl.config import StoreConfig
from skurl.store.api import (
    ArraySpec,
    CorruptShardError,
    RolloutStore,
    ShardManifest,
    StoreError,
)

log = logging.getLogger(__name__)


def open_store(cfg: StoreConfig) -> RolloutStore:
    """The store that `cfg.url` names: s3://bucket/prefix or a directory path."""
    if cfg.url.startswith("s3://"):
        from skurl.store.s3 import S3RolloutStore

        return S3RolloutStore(
            cfg.url,
            endpoint_url=cfg.endpoint_url,
            compression_level=cfg.compression_level,
            create_bucket=cfg.create_bucket,
            timeout_s=cfg.timeout_s,
        )
    if "://" in cfg.url:
        raise StoreError(f"store.url '{cfg.url}': expected a directory path or s3://bucket/prefix")
    from skurl.store.local import LocalRolloutStore

    return LocalRolloutStore(cfg.url, compression_level=cfg.compression_level)


@dataclass
class IterationShards:
    """One iteration's verified shards, and the damaged ones left out (never trained on)."""

    shards: list[tuple[ShardManifest, dict[str, np.ndarray]]] = field(default_factory=list)
    corrupt: list[CorruptShardError] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(m.rows for m, _ in self.shards)


def read_iteration(store: RolloutStore, iteration: int) -> IterationShards:
    """Every readable shard of `iteration`; corrupt ones are logged and reported, not raised."""
    out = IterationShards()
    for manifest in store.list_shards(iteration):
        try:
            out.shards.append((manifest, store.get_shard(manifest)))
        except CorruptShardError as exc:
            log.error("skipping %s", exc)
            out.corrupt.append(exc)
    return out


__all__ = [
    "ArraySpec",
    "CorruptShardError",
    "IterationShards",
    "RolloutStore",
    "ShardManifest",
    "StoreError",
    "open_store",
    "read_iteration",
]
