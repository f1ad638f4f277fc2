"""The prefetch intrinsic compiles on this LLVM, runs on any row, and changes nothing."""

from __future__ import annotations

import numpy as np
from numba import njit

from skurl.sim.prefetch import prefetch_row


@njit
def _touch_all(a: np.ndarray) -> float:
    total = 0.0
    for i in range(a.shape[0]):
        prefetch_row(a, min(i + 8, a.shape[0] - 1))
        total += a[i, 0]
    return total


def test_prefetch_rows_leave_values_alone() -> None:
    for dtype, width in ((np.float64, 29), (np.float32, 70), (np.int64, 3)):
        a = np.arange(50 * width, dtype=dtype).reshape(50, width)
        before = a.copy()
        assert _touch_all(a) == float(before[:, 0].sum())
        np.testing.assert_array_equal(a, before)
