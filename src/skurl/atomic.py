"""Whole-file writes a crash cannot tear: the data goes to a temporary file beside the target,
is fsynced, and is renamed over the target (os.replace is atomic within one filesystem), so
a reader (or a resumed run) sees the old file or the new one, never a part of one."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_bytes(path: str | Path, data: bytes) -> None:
    path = Path(path)
    # A unique temporary name: writers in other threads or processes never share one.
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text(path: str | Path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))
