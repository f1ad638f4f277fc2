"""skurl: reinforcement-learning replenishment policies for huge SKU catalogs."""

import os as _os

# OpenMP threads (torch, numba) that busy-wait between parallel regions collapse when the
# cores are shared (measured on 2 cores at load 8: a PPO update 26x slower spinning than
# sleeping). Must be set before the OpenMP runtime loads; an explicit setting wins.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"

from skurl._jit_cache import purge_stale_cache as _purge_stale_cache

_purge_stale_cache(__import__("pathlib").Path(__file__).parent)
