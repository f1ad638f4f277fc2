"""Drop numba's on-disk cache when any compiled module's source has changed.

numba keys a cached function on its own file only, but the simulator's kernels inline
functions from other modules (day.py, sku_ops.py, demand.py, rng.py, ziggurat.py): edit
one of those and the kernels would silently load the old machine code. A stamp of every
compiled package's sources (path, size, mtime) sits next to the cache; when it differs,
the cache files (*.nbi, *.nbc) of those packages are removed before anything compiles.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

# Packages whose modules use numba (all caches go when any of their sources changes:
# kernels in one inline functions of another).
JIT_PACKAGES = ("sim", "collect", "policy", "catalog")
STAMP = ".skurl-jit-sources"


def sources_stamp(root: Path) -> str:
    h = hashlib.sha256()
    for pkg in JIT_PACKAGES:
        for path in sorted((root / pkg).glob("*.py")):
            st = path.stat()
            h.update(f"{path.name}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()


def purge_stale_cache(root: Path) -> bool:
    """Remove the packages' numba cache files if their sources changed; True if removed.
    Never raises: a read-only install (numba then caches elsewhere) is left alone."""
    try:
        stamp = sources_stamp(root)
        stamp_file = root / "sim" / "__pycache__" / STAMP
        if stamp_file.exists() and stamp_file.read_text() == stamp:
            return False
        for pkg in JIT_PACKAGES:
            cache = root / pkg / "__pycache__"
            for pattern in ("*.nbi", "*.nbc"):
                for f in cache.glob(pattern):
                    f.unlink(missing_ok=True)
        stamp_file.parent.mkdir(exist_ok=True)
        tmp = stamp_file.with_suffix(".tmp")
        tmp.write_text(stamp)
        tmp.replace(stamp_file)
        return True
    except OSError:
        return False
