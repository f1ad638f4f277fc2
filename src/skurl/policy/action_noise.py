"""The sampling noise of a policy's actions: counter-based uniforms
u(seed, episode, sku_id, day, STREAM_ACTION) from the simulator's generator (sim/rng.py),
so a SKU's sampled action never depends on chunking, worker count or mode. Collectors
and a sampling LearnedPolicy draw the same numbers.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from skurl.sim import rng
from skurl.sim.api import STREAM_ACTION

_STREAM = np.int64(STREAM_ACTION)


class ActionUniforms:
    """u(seed, episode, sku_id, day, STREAM_ACTION) in (0, 1): the sampling noise of one
    episode, from the simulator's counter-based generator (sim/rng.py). Per-SKU keys are
    derived once; `day(d)` draws float64 [N] for every SKU."""

    def __init__(self, seed: int, episode: int, sku_ids: np.ndarray) -> None:
        self.keys = rng.sku_keys(rng.run_key(seed, episode), np.ascontiguousarray(sku_ids, np.int64))
        self.out = np.empty(self.keys.shape[0], np.float64)

    def day(self, day: int) -> np.ndarray:
        """Uniforms of `day` (a buffer overwritten by the next call)."""
        _fill_uniforms(self.keys, np.int64(day), self.out)
        return self.out


@njit(cache=True, parallel=True)
def _fill_uniforms(keys: np.ndarray, day: np.int64, out: np.ndarray) -> None:
    for i in prange(keys.shape[0]):
        out[i] = rng.uniform(keys[i], day, _STREAM, 0)
