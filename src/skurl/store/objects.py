"""RolloutStore over any key -> bytes backend (a directory, an S3 bucket).

Layout under the store's root (identical on disk and in S3):

    it00000007/collector-3.manifest.json
    it00000007/collector-3.<sha256[:16]>.shard.zst
    blobs/<name>

The payload key carries the payload's digest, so rewriting a shard never changes bytes
that a reader of the old manifest is about to fetch: the new payload lands under a new
key, then the manifest flips to it, then the old payload goes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from skurl.store.api import (
    CorruptShardError,
    ShardManifest,
    check_blob_name,
    check_collector_id,
    check_iteration,
    iteration_dir,
    parse_iteration_dir,
    shard_name,
)
from skurl.store.shard_codec import build_manifest, decode_arrays, encode_arrays

log = logging.getLogger(__name__)

MANIFEST_SUFFIX = ".manifest.json"
PAYLOAD_SUFFIX = ".shard.zst"


class ObjectBackend(Protocol):
    """Flat key -> bytes storage with '/'-separated keys relative to the store root."""

    url: str

    def write(self, key: str, data: bytes) -> None:
        """Atomic: a reader sees the old object, no object, or all of `data`."""
        ...

    def read(self, key: str) -> bytes | None:
        """The object's bytes, or None when it does not exist."""
        ...

    def list_keys(self, prefix: str) -> list[str]:
        """Every key starting with `prefix` (a directory like 'it00000007/')."""
        ...

    def list_dirs(self) -> list[str]:
        """Names of the top-level directories."""
        ...

    def delete(self, keys: list[str]) -> None:
        """Delete `keys` in order; absent keys are fine."""
        ...


def manifest_key(iteration: int, collector_id: str) -> str:
    return f"{iteration_dir(iteration)}/{collector_id}{MANIFEST_SUFFIX}"


def payload_key(manifest: ShardManifest) -> str:
    digest = manifest.sha256[:16]
    return f"{iteration_dir(manifest.iteration)}/{manifest.collector_id}.{digest}{PAYLOAD_SUFFIX}"


class ShardStore:
    """The RolloutStore contract over an ObjectBackend."""

    def __init__(self, backend: ObjectBackend, compression_level: int = 1) -> None:
        self.backend = backend
        self.url = backend.url
        self.compression_level = compression_level

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    def put_shard(
        self,
        iteration: int,
        collector_id: str | int,
        arrays: Mapping[str, np.ndarray],
        meta: Mapping[str, Any],
    ) -> ShardManifest:
        iteration = check_iteration(iteration)
        cid = check_collector_id(collector_id)
        payload, specs, raw_bytes = encode_arrays(arrays, self.compression_level)
        manifest = build_manifest(iteration, cid, specs, payload, raw_bytes, meta)
        old = self._read_manifest_quietly(iteration, cid)
        # Payload first, manifest second: a listed manifest always has its data.
        self.backend.write(payload_key(manifest), payload)
        self.backend.write(manifest_key(iteration, cid), manifest.to_json())
        if old is not None and payload_key(old) != payload_key(manifest):
            self.backend.delete([payload_key(old)])
        return manifest

    def list_shards(self, iteration: int) -> list[ShardManifest]:
        iteration = check_iteration(iteration)
        keys = set(self.backend.list_keys(iteration_dir(iteration) + "/"))
        manifests = []
        for key in sorted(k for k in keys if k.endswith(MANIFEST_SUFFIX)):
            cid = key.split("/", 1)[1][: -len(MANIFEST_SUFFIX)]
            try:
                manifest = self._read_manifest(key, shard_name(iteration, cid))
            except CorruptShardError as exc:
                log.error("skipping %s", exc)
                continue
            if manifest is None:
                continue  # deleted between listing and reading
            if (manifest.iteration, manifest.collector_id) != (iteration, cid):
                log.error("skipping shard '%s': its manifest names %s", shard_name(iteration, cid),
                          manifest.name)
                continue
            if payload_key(manifest) not in keys:
                log.warning("skipping shard '%s': manifest without payload", manifest.name)
                continue
            manifests.append(manifest)
        return manifests

    def get_shard(self, manifest: ShardManifest) -> dict[str, np.ndarray]:
        return decode_arrays(self.backend.read(payload_key(manifest)), manifest)

    def iterations(self) -> list[int]:
        found = (parse_iteration_dir(d) for d in self.backend.list_dirs())
        return sorted(i for i in found if i is not None)

    def delete_before(self, iteration: int) -> int:
        iteration = check_iteration(iteration)
        deleted = 0
        for it in self.iterations():
            if it >= iteration:
                break
            keys = self.backend.list_keys(iteration_dir(it) + "/")
            # Manifests go first so no reader ever lists a shard whose payload is gone.
            manifests = [k for k in keys if k.endswith(MANIFEST_SUFFIX)]
            self.backend.delete(manifests + [k for k in keys if not k.endswith(MANIFEST_SUFFIX)])
            deleted += len(manifests)
        return deleted

    def put_blob(self, name: str, data: bytes) -> None:
        self.backend.write("blobs/" + check_blob_name(name), bytes(data))

    def get_blob(self, name: str) -> bytes:
        data = self.backend.read("blobs/" + check_blob_name(name))
        if data is None:
            raise KeyError(f"{self.url}: no blob '{name}'")
        return data

    def delete_blob(self, name: str) -> None:
        self.backend.delete(["blobs/" + check_blob_name(name)])

    def _read_manifest(self, key: str, shard: str) -> ShardManifest | None:
        raw = self.backend.read(key)
        return None if raw is None else ShardManifest.from_json(raw, shard)

    def _read_manifest_quietly(self, iteration: int, cid: str) -> ShardManifest | None:
        try:
            return self._read_manifest(manifest_key(iteration, cid), shard_name(iteration, cid))
        except CorruptShardError:
            return None
