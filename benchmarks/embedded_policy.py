"""The DP's optimal orders as a decision rule on skurl's VectorEnv (docs/headroom.md).

Each SKU's table (embedded_dp.solve) is looked up at its exact state: on hand by days
left, read from the simulator's stock slots (the raw observation has only the total),
and the pipeline. SKUs are handled in groups of equal (shelf life, lead time), numpy over
the group's rows, so there is no Python loop per SKU.
"""

from __future__ import annotations

import numpy as np
from embedded_dp import SkuModel

from skurl.sim.api import Obs
from skurl.sim.env import VectorEnv
from skurl.sim.state import S_SLOT_OFF


class TablePolicy:
    """Orders of per-SKU tables [days, states] for the env's rows (models in row order)."""

    name = "dp-optimal"

    def __init__(self, env: VectorEnv, models: list[SkuModel], tables: list[np.ndarray]) -> None:
        self.env = env
        self.bound = np.array([m.bound for m in models], np.int64)
        sizes = np.array([m.lookup.size for m in models], np.int64)
        self.lookup = np.concatenate([m.lookup for m in models])
        self.lookup_off = np.cumsum(sizes) - sizes
        self.days = np.array([t.shape[0] for t in tables], np.int64)
        self.nstates = np.array([t.shape[1] for t in tables], np.int64)
        self.table = np.concatenate([t.reshape(-1) for t in tables])
        self.table_off = np.cumsum(self.days * self.nstates) - self.days * self.nstates
        sig = np.array([(m.life, m.lead) for m in models], np.int64).reshape(-1, 2)
        self.groups = [(int(life), int(lead), np.flatnonzero((sig[:, 0] == life) & (sig[:, 1] == lead)))
                       for life, lead in np.unique(sig, axis=0)]
        self.outside = 0  # SKU-days whose state lay beyond the DP's bound (ordered nothing)
        self.at_bound = 0  # SKU-days whose order raised the position to the bound B exactly

    def reset(self) -> None:
        self.outside = 0
        self.at_bound = 0

    def components(self, obs: Obs, rows: np.ndarray, life: int, lead: int) -> np.ndarray:
        """int64 [len(rows), dims]: the DP state of these rows (embedded_dp.SkuModel.states)."""
        raw = obs.raw
        if life > 0:
            st = self.env._state  # the stock slots by age: not in the raw observation
            base = st.st[rows, S_SLOT_OFF]
            r = np.arange(1, life + 1)
            ages = st.stock[base[:, None] + (raw.day + r[None, :]) % life]
        else:
            ages = raw.on_hand[rows, None].astype(np.int64)
        pipe = raw.pipeline[rows, :lead - 1].astype(np.int64)
        return np.concatenate([ages, pipe], axis=1)

    def orders(self, obs: Obs) -> np.ndarray:
        day = obs.raw.day
        out = np.zeros(self.bound.shape[0])
        for life, lead, rows in self.groups:
            comp = self.components(obs, rows, life, lead)
            radix = self.bound[rows] + 1
            flat = np.zeros(rows.shape[0], np.int64)
            for k in range(comp.shape[1]):
                flat = flat * radix + np.minimum(comp[:, k], radix - 1)
            pos = comp.sum(axis=1)
            inside = (pos <= self.bound[rows]) & (day < self.days[rows])
            self.outside += int((~inside).sum())
            idx = self.lookup[self.lookup_off[rows] + np.where(inside, flat, 0)]
            at = np.where(inside, day, 0) * self.nstates[rows] + np.maximum(idx, 0)
            q = self.table[self.table_off[rows] + at]
            q = np.where(inside & (idx >= 0), q, 0)
            self.at_bound += int(((q > 0) & (pos + q == self.bound[rows])).sum())
            out[rows] = q
        return out
