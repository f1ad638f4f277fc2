"""sim/kernel.first_bad_order: the first NaN, negative or too large order, in one thread below
SERIAL_ORDER_CHECK orders and in parallel blocks above it, the same index either way."""

from __future__ import annotations

import numpy as np
import pytest

from skurl.sim.kernel import SERIAL_ORDER_CHECK, first_bad_order


@pytest.mark.parametrize("n", [1, 1000, SERIAL_ORDER_CHECK, SERIAL_ORDER_CHECK + 70_000])
@pytest.mark.parametrize("bad", [np.nan, -1e-9, 5.0 + 1e-9, np.inf])
def test_the_first_bad_order_is_found_at_any_size(n: int, bad: float) -> None:
    orders = np.full(n, 2.0)
    assert first_bad_order(orders, 5.0) == -1
    late = n - 1
    orders[late] = bad
    assert first_bad_order(orders, 5.0) == late
    if n > 1:
        orders[n // 3] = bad
        assert first_bad_order(orders, 5.0) == n // 3
