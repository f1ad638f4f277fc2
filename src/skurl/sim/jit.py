"""The numba decorator of the per-SKU simulator code.

Per-SKU functions never allocate, so they are compiled without numba's reference counting
(the `_nrt=False` option). With it, every call increfs and decrefs each array argument and
every row view (atomic operations, on cache lines that all threads share), which measured
5-10x slower than the simulation itself. The parallel kernels that call these functions
keep the runtime (parfors need it) and pay one incref per chunk of SKUs. `_nrt` is a
private numba option; if a numba release drops it, the code still runs, only slower.
"""

from __future__ import annotations

from numba import njit
from numba.core import options


def _options() -> dict[str, bool]:
    has_nrt = isinstance(getattr(options.DefaultOptions, "_nrt", None), options.TargetOptions.Mapping)
    return {"cache": True, **({"_nrt": False} if has_nrt else {})}


sku_jit = njit(**_options())
