"""Setting torch's intra-op thread count so that it holds.

torch (CPU wheel) and numba's OpenMP threading layer share one libgomp. numba starts its
thread pool on its first parallel use and, once a parallel kernel module has been loaded,
that start resets the calling thread's OpenMP thread count to NUMBA_NUM_THREADS. A count
set before it was silently lost: `train.torch_threads=1` trained on 2 threads once the
simulator had run, and 1 vs 2 threads round GEMMs differently on some CPUs (the colocated
and decoupled DCL weights differed in the last bits). Starting numba's pool first keeps
the count (tests/unit/test_threads.py).
"""

from __future__ import annotations

import numba
import torch


def set_torch_threads(threads: int) -> None:
    """torch.set_num_threads(threads), after numba's pool has started (see above)."""
    numba.get_num_threads()  # starts numba's pool if it has not started yet
    torch.set_num_threads(threads)
