"""The simulator's state as inventory-snapshot arrays (serve/snapshot.py names the columns).

One parallel pass over the state rows: stock slots become units by days until expiry, the
shift register the open orders by days until arrival, the sales ring its last-7-days sum,
and the promotion calendar today's and the lead time's flags, exactly the inputs of
features.feature_row, so the snapshot's observation is the simulator's own.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from skurl.sim.sku_ops import ipar, promo_on, promo_within
from skurl.sim.state import (
    P_LEAD,
    P_SHELF,
    S_BACKLOG,
    S_LOST_YDAY,
    S_ON_HAND,
    S_PIPE,
    S_SALES_WEEK,
    S_SALES_YDAY,
    S_SLOT_OFF,
)

N_COUNTS = 5  # on hand, backlog, sales yesterday, sales of the last 7 days, lost yesterday


@njit(cache=True, parallel=True)
def snapshot_state(par: np.ndarray, st: np.ndarray, stock: np.ndarray, day: np.int64,
                   expiring: np.ndarray, pipeline: np.ndarray, counts: np.ndarray,
                   promo: np.ndarray) -> None:
    """State at the start of `day`: expiring [N, A] (units expiring at the end of day + k),
    pipeline [N, P] (units due on day + 1 + k), counts [N, 5] (N_COUNTS) and promo [N, 2]
    (a promotion today; one within days day + 1 .. day + lead time)."""
    nexp = expiring.shape[1]
    for i in prange(st.shape[0]):
        s = st[i]
        for k in range(nexp):
            expiring[i, k] = 0
        life = ipar(par, i, P_SHELF)
        if life > 0:
            base = s[S_SLOT_OFF]
            for k in range(min(life, nexp)):
                expiring[i, k] = stock[base + (day + 1 + k) % life]
        for k in range(pipeline.shape[1]):
            pipeline[i, k] = s[S_PIPE + k]
        counts[i, 0] = s[S_ON_HAND]
        counts[i, 1] = s[S_BACKLOG]
        counts[i, 2] = s[S_SALES_YDAY]
        counts[i, 3] = s[S_SALES_WEEK]
        counts[i, 4] = s[S_LOST_YDAY]
        promo[i, 0] = promo_on(par, i, day)
        promo[i, 1] = promo_within(par, i, day + 1, ipar(par, i, P_LEAD))
