"""How a short upstream splits its on-hand among its locations' requests (sim.upstream_allocation;
docs/networks.md, allocation rules); step 3 of sim/network.py's day."""

from __future__ import annotations

import math

import numpy as np

from skurl.sim.jit import sku_jit
from skurl.sim.network_cols import N_BUMPED, N_REQUEST, N_SHIPPED

RULES = {"proportional": 0, "fair": 1, "priority": 2}
PROPORTIONAL, FAIR, PRIORITY = 0, 1, 2


@sku_jit
def allocate(st: np.ndarray, kids: np.ndarray, lo: np.int64, hi: np.int64, avail: np.int64,
             rule: np.int64) -> None:
    """st[c, N_SHIPPED] for the rows kids[lo:hi] from their st[c, N_REQUEST] and `avail`
    units, when the requests exceed them (docs/networks.md, allocation rules)."""
    total = np.int64(0)
    for r in range(lo, hi):
        total += st[kids[r], N_REQUEST]
        st[kids[r], N_SHIPPED] = 0
        st[kids[r], N_BUMPED] = 0
    left = avail
    if rule == PRIORITY:
        for r in range(lo, hi):
            c = kids[r]
            give = min(st[c, N_REQUEST], left)
            st[c, N_SHIPPED] = give
            left -= give
        return
    if rule == PROPORTIONAL:
        for r in range(lo, hi):
            c = kids[r]
            give = np.int64(math.floor(np.float64(avail) * np.float64(st[c, N_REQUEST]) / np.float64(total)))
            give = min(give, st[c, N_REQUEST])
            st[c, N_SHIPPED] = give
            left -= give
        while left > 0:  # largest remainder first, ties to the lower sku_id; one unit each
            best = np.int64(-1)
            best_frac = -1.0
            for r in range(lo, hi):
                c = kids[r]
                if st[c, N_BUMPED] != 0 or st[c, N_SHIPPED] >= st[c, N_REQUEST]:
                    continue
                exact = np.float64(avail) * np.float64(st[c, N_REQUEST]) / np.float64(total)
                frac = exact - math.floor(exact)
                if frac > best_frac:
                    best, best_frac = c, frac
            if best < 0:
                break
            st[best, N_SHIPPED] += 1
            st[best, N_BUMPED] = 1
            left -= 1
        return
    while left > 0:  # fair: equal shares, capped at each request, until nothing is left
        active = np.int64(0)
        for r in range(lo, hi):
            if st[kids[r], N_SHIPPED] < st[kids[r], N_REQUEST]:
                active += 1
        if active == 0:
            break
        share = left // active
        for r in range(lo, hi):
            c = kids[r]
            want = st[c, N_REQUEST] - st[c, N_SHIPPED]
            if want <= 0:
                continue
            give = min(want, share if share > 0 else np.int64(1))
            st[c, N_SHIPPED] += give
            left -= give
            if left == 0:
                break
