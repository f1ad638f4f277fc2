"""Evaluation figures of catalogs with supply networks (docs/networks.md).

avg_cost_per_network_day: the cost summed over a network's locations, averaged over
networks and counted days (cost_se: its standard error over network-episodes). Per echelon
index (1 = stores): cost and profit (revenue, at stores only, less cost) per location-day,
fill rate (stores: customers served the same day; upstream: requests shipped the same day),
mean on hand, shipping and transfer cost and units transferred per location-day (ship_cost:
at the receiving row; transfers: at the sender).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from skurl.catalog.network import echelons
from skurl.catalog.schema import Catalog
from skurl.sim.episode import COST_FIELDS


def whole_networks(catalog: Catalog, rows: np.ndarray) -> np.ndarray:
    """`rows` widened to every row of the networks they touch (ascending)."""
    _, root, _ = echelons(catalog)
    return np.flatnonzero(np.isin(root, root[rows]))


def network_summary(catalog: Catalog, episode_cost: np.ndarray, per_day: dict[str, np.ndarray],
                    ok: np.ndarray) -> dict[str, Any]:
    """episode_cost: [episodes, N] cost per day of each row; per_day: totals per day per row."""
    _, root, echelon = echelons(catalog)
    nets, net_of = np.unique(root, return_inverse=True)
    good = np.bincount(net_of, ~ok, minlength=nets.size) == 0
    draws = np.stack([np.bincount(net_of, c, minlength=nets.size)[good] for c in episode_cost]).ravel()
    by_echelon = {}
    for e in range(1, int(echelon.max()) + 1):
        rows = (echelon == e) & ok
        demand = float(per_day["demand"][rows].sum())
        cost = sum(per_day[k][rows].sum() for k in COST_FIELDS)
        locations = max(int(rows.sum()), 1)
        by_echelon[str(e)] = {
            "locations": int(rows.sum()),
            "cost_per_location_day": float(cost / locations),
            "profit_per_location_day": float((per_day["revenue"][rows].sum() - cost) / locations),
            "fill_rate": 1.0 - float(per_day["lost"][rows].sum()) / demand if demand > 0 else 1.0,
            "mean_on_hand": float(per_day["on_hand_end"][rows].sum() / locations),
            **{f"{k}_per_location_day": float(per_day[k][rows].sum() / locations)
               for k in ("ship_cost", "transfer_cost", "transferred")},
        }
    return {
        "networks": int(good.sum()),
        "avg_cost_per_network_day": float(draws.mean()) if draws.size else float("nan"),
        "cost_se": float(draws.std(ddof=1) / np.sqrt(draws.size)) if draws.size > 1 else float("nan"),
        "by_echelon": by_echelon,
    }
