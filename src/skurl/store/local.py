"""Rollout store in a local (or network-mounted) directory.

Writes go through skurl.atomic (a hidden temporary file in the target directory, flushed
to disk, renamed into place), so a reader never sees half a file under a real name.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from skurl import atomic
from skurl.store.api import StoreError
from skurl.store.objects import ShardStore


class LocalObjects:
    """ObjectBackend over a directory tree."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).expanduser()
        self.url = str(self.root)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"store.url '{root}': cannot create the directory ({exc.strerror})") from None
        if not os.access(self.root, os.W_OK):
            raise StoreError(f"store.url '{root}': directory is not writable")

    def write(self, key: str, data: bytes) -> None:
        path = self.root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_bytes(path, data)  # its temporary names end in ".tmp", never like a key

    def read(self, key: str) -> bytes | None:
        try:
            return (self.root / key).read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            return None

    def list_keys(self, prefix: str) -> list[str]:
        directory = self.root / prefix
        try:
            entries = list(os.scandir(directory))
        except (FileNotFoundError, NotADirectoryError):
            return []
        # Temporary files are listed too (delete_before removes them with their iteration);
        # their names never end like a manifest or payload.
        return [prefix + e.name for e in entries if e.is_file()]

    def list_dirs(self) -> list[str]:
        return [e.name for e in os.scandir(self.root) if e.is_dir()]

    def delete(self, keys: list[str]) -> None:
        parents = set()
        for key in keys:
            path = self.root / key
            path.unlink(missing_ok=True)
            parents.add(path.parent)
        for parent in parents:
            if parent != self.root:
                with contextlib.suppress(OSError):
                    parent.rmdir()  # only succeeds once the iteration directory is empty


class LocalRolloutStore(ShardStore):
    """RolloutStore in directory `root` (created when missing)."""

    def __init__(self, root: str | Path, compression_level: int = 1) -> None:
        super().__init__(LocalObjects(root), compression_level)
