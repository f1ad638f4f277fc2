"""skurl: reinforcement-learning replenishment policies for huge SKU catalogs."""

import os as _os

# OpenMP threads (torch, numba) that busy-wait between parallel regions collapse when the
# cores are shared (measured on 2 cores at load 8: a PPO update 26x slower spinning than
# sleeping). Must be set before the OpenMP runtime loads; an explicit setting wins.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# MKL's default code paths round depending on what the process did before (buffer alignment):
# a PPO run after another run in the same process differed from the same run alone in the
# last bits (1e-8 after two iterations), so an in-process run and a torchrun rank disagreed.
# Strict conditional numerical reproducibility removes that; no cost measured on the
# learner's MLP (Intel oneMKL developer guide, "Obtaining Numerically Reproducible Results").
# Read at MKL's first call, so it must be set before any BLAS work; an explicit setting wins.
_os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")

__version__ = "0.1.0"

from skurl._jit_cache import purge_stale_cache as _purge_stale_cache

_purge_stale_cache(__import__("pathlib").Path(__file__).parent)
