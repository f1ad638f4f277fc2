"""Weights by exact version, for fixed and bounded staleness (collect/staleness.py,
collect/bounded.py): `wait_for(v)` returns version v itself, from memory (the last `keep`)
or from RUN_DIR/stale_weights, where every version put is written atomically and kept
while a resume may need it (checkpoints hold only the newest weights)."""

from __future__ import annotations

import re
from pathlib import Path

from safetensors.torch import load, save

from skurl import atomic
from skurl.errors import UserError
from skurl.sync.api import Tensors

_FILE = re.compile(r"v(\d{9})\.safetensors")


class WeightHistory:
    """A WeightSource for LocalCollectors (collect/collectors.py) that holds the versions put."""

    def __init__(self, keep: int, directory: Path | None, keep_back: int) -> None:
        self.keep, self.directory, self.keep_back = keep, directory, keep_back
        self._held: dict[int, Tensors] = {}

    def clear_directory(self) -> None:
        """A fresh start: files a crashed attempt left behind belong to another run."""
        for path in self._files():
            path.unlink(missing_ok=True)

    def put(self, version: int, tensors: Tensors) -> None:
        if version in self._held:
            return
        self._held[version] = tensors
        for old in sorted(self._held)[:-self.keep]:
            del self._held[old]
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
            atomic.write_bytes(self.directory / f"v{version:09d}.safetensors", save(tensors, {"version": str(version)}))
            self._prune(version - self.keep_back)

    def _files(self) -> list[Path]:
        if self.directory is None or not self.directory.is_dir():
            return []
        return sorted(p for p in self.directory.iterdir() if _FILE.fullmatch(p.name))

    def _prune(self, floor: int) -> None:
        for path in self._files():
            match = _FILE.fullmatch(path.name)
            if match is not None and int(match.group(1)) < floor:
                path.unlink(missing_ok=True)

    def wait_for(self, version: int, timeout: float | None = None) -> tuple[int, Tensors]:
        """Exactly `version` (nothing to wait for: it was put before any collection asks)."""
        if version not in self._held:
            path = None if self.directory is None else self.directory / f"v{version:09d}.safetensors"
            if path is None or not path.is_file():
                raise UserError(f"collect.staleness: the weights of policy version {version} are not kept "
                                f"(expected {path or 'them in memory'}); resume from a later checkpoint "
                                "or with collect.staleness=0")
            self._held[version] = load(path.read_bytes())
        return version, self._held[version]
