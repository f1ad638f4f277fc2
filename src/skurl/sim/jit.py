"""The numba decorator of the per-SKU simulator code.

Per-SKU functions never allocate, so they are compiled without numba's reference counting
(`_nrt=False`). With it, every call increfs and decrefs each array argument (atomic
operations, on cache lines that all threads share whenever arrays are shared), which
measured 5-10x slower than the simulation itself. The parallel kernels that call these
functions keep the runtime (parfors need it); they pay one incref per chunk of SKUs.
"""

from __future__ import annotations

from numba import njit

sku_jit = njit(cache=True, _nrt=False)

