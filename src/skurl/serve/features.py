"""Snapshot + catalog rows -> the observation matrix, by the simulator's own feature function
(sim/features.feature_row, one parallel numba pass), so serving sees what training saw; a
network snapshot gets the network columns after them (serve/network.py)."""

from __future__ import annotations

import numpy as np

from skurl.catalog.schema import Catalog
from skurl.serve.network import network_features
from skurl.serve.snapshot import Snapshot
from skurl.sim.features import N_FIXED_FEATURES, snapshot_features
from skurl.sim.layout import NETWORK_FIELDS, static_features


def observations(s: Snapshot, rows: Catalog) -> np.ndarray:
    """float32 [N, D] observations of snapshot `s` (rows: its SKUs' catalog rows, same order);
    D = 26 + A + P of the snapshot's widths, + 5 with supply networks (layout.schema_for)."""
    w = s.widths
    base = N_FIXED_FEATURES + w.expiring + w.pipeline
    out = np.empty((len(s), base + (len(NETWORK_FIELDS) if s.has_network else 0)), np.float32)
    with np.errstate(invalid="ignore", divide="ignore"):
        statics = static_features(rows)
    c = np.ascontiguousarray
    snapshot_features(out[:, :base], np.int64(w.pipeline), c(rows.demand_mean, np.float32), c(rows.lead_time, np.int64),
                      c(rows.shelf_life, np.int64), c(statics), c(s.on_hand, np.int64), c(s.expiring, np.int64),
                      c(s.backlog, np.int64), c(s.pipeline, np.int64), c(s.forecast, np.float32),
                      c(s.sales_yesterday, np.int64), c(s.sales_last_7d, np.int64), c(s.history_days, np.int64),
                      c(s.lost_yesterday, np.int64), c(s.promo_today, np.bool_), c(s.promo_ahead, np.bool_),
                      c(s.day_of_week, np.int64))
    if s.has_network:
        out[:, base:] = network_features(s, rows)
    return out
