"""Baselines for supply networks (docs/networks.md): echelon and installation base-stock.

- echelon-base-stock: order up to S on the echelon inventory position: on hand and in
  transit at and below the row, plus what its upstream owes it, less the stores' backlog.
- installation-base-stock: order up to S on the row's own position: on hand, in transit,
  owed to it, less what it owes its own locations or customers.
Untuned levels: mean + z x sd of the demand over the protection days (echelon: the longest
chain of lead times down to a store, + 1; installation: own lead time + 1), z the stores'
newsvendor factor. Tuning: network_tuning.py (one z per echelon index, then by default one
per network and echelon index; docs/networks.md, Baselines).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from skurl.catalog.network import MAX_DEPTH, echelons
from skurl.catalog.schema import Catalog
from skurl.config import SimConfig
from skurl.policy.newsvendor import default_z as store_z
from skurl.policy.protection import position
from skurl.sim.api import Obs, RawState

if TYPE_CHECKING:
    from skurl.policy.api import Policy

NETWORK_POLICIES = ("echelon-base-stock", "installation-base-stock")


@dataclass
class Topology:
    parent: np.ndarray
    echelon: np.ndarray
    store: np.ndarray  # rows nobody orders from
    # per level 1.., the rows of that level with an upstream: found once, not on every day
    level_rows: list[np.ndarray] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.level_rows = [np.flatnonzero((self.echelon == level) & (self.parent >= 0))
                           for level in range(1, MAX_DEPTH)]

    @staticmethod
    def of(catalog: Catalog) -> Topology:
        parent, _, echelon = echelons(catalog)
        store = np.ones(len(catalog), bool)
        store[parent[parent >= 0]] = False
        return Topology(parent, echelon, store)

    def for_clones(self, src: np.ndarray, parent: np.ndarray) -> Topology:
        """The topology of a clone env (VectorEnv.clone): its rows are rows `src` of this
        one, their upstreams the clone rows `parent` (sim/clone.network_expansion)."""
        return Topology(parent, self.echelon[src], self.store[src])

    def echelon_sum(self, local: np.ndarray) -> np.ndarray:
        """Per row, the sum of `local` over the row and every row below it."""
        out = local.astype(np.float64)  # a copy, also of a float64 `local`
        for rows in self.level_rows:  # rows of a level are complete once lower levels are added
            np.add.at(out, self.parent[rows], out[rows])
        return out


def _owed(obs: Obs) -> np.ndarray:
    return _owed_raw(obs.raw)


def _owed_raw(raw: RawState) -> np.ndarray:
    return np.zeros(raw.on_hand.shape[0]) if raw.owed is None else raw.owed.astype(np.float64)


def echelon_position(topo: Topology, raw: RawState) -> np.ndarray:
    """Per row: on hand and in transit at and below it, plus what its upstream owes it, less
    the stores' backlog (float64 [N])."""
    local = position(raw.on_hand, raw.pipeline, np.where(topo.store, raw.backlog, 0))
    return topo.echelon_sum(local) + _owed_raw(raw)


@dataclass
class EchelonBaseStock:
    """order = max(0, S - echelon inventory position)."""

    S: np.ndarray
    topo: Topology
    name: str = "echelon-base-stock"
    raw_only: ClassVar[bool] = True  # reads obs.raw only (sim/episode.py DecisionRule)

    def position(self, obs: Obs) -> np.ndarray:
        return echelon_position(self.topo, obs.raw)

    def orders(self, obs: Obs) -> np.ndarray:
        return np.maximum(0.0, self.S - self.position(obs))

    def params(self) -> dict[str, Any]:
        return {"S": self.S}


@dataclass
class InstallationBaseStock:
    """order = max(0, S - (on hand + in transit + owed to it - what it owes))."""

    S: np.ndarray
    name: str = "installation-base-stock"
    raw_only: ClassVar[bool] = True  # reads obs.raw only (sim/episode.py DecisionRule)

    def orders(self, obs: Obs) -> np.ndarray:
        raw = obs.raw  # whole units: the sums are exact in any order
        return np.maximum(0.0, self.S - (position(raw.on_hand, raw.pipeline, raw.backlog) + _owed(obs)))

    def params(self) -> dict[str, Any]:
        return {"S": self.S}


def cover_days(name: str, catalog: Catalog, topo: Topology) -> np.ndarray:
    """Protection days of each row (module docstring)."""
    lead = catalog.lead_time.astype(np.float64)
    if name == "installation-base-stock":
        return lead + 1.0
    chain = lead.copy()  # longest chain of lead times from the row down to a store
    for level in range(1, MAX_DEPTH):
        rows = np.flatnonzero((topo.echelon == level) & (topo.parent >= 0))
        np.maximum.at(chain, topo.parent[rows], lead[topo.parent[rows]] + chain[rows])
    return chain + 1.0


def levels(name: str, catalog: Catalog, topo: Topology, z_by_echelon: np.ndarray) -> np.ndarray:
    """Levels with one z per echelon index (row_levels)."""
    return row_levels(name, catalog, topo, np.asarray(z_by_echelon, np.float64)[topo.echelon - 1])


def row_levels(name: str, catalog: Catalog, topo: Topology, z: np.ndarray) -> np.ndarray:
    """S = round(mean x cover + z_i sqrt(var x cover)) with row i's own z_i, Poisson-like
    variance (var = mean)."""
    cover = cover_days(name, catalog, topo)
    mean = catalog.demand_mean.astype(np.float64) * cover
    return np.maximum(np.round(mean + z * np.sqrt(mean)), 0.0)


def default_z(catalog: Catalog, sim_cfg: SimConfig, topo: Topology) -> np.ndarray:
    """z per echelon index: the stores' newsvendor factor at every echelon."""
    z = store_z(catalog, sim_cfg)
    zs = float(np.median(z[topo.store])) if topo.store.any() else 0.0
    return np.full(int(topo.echelon.max()), zs)


def make_network_policy(name: str, catalog: Catalog, sim_cfg: SimConfig, params: dict | None) -> Policy:
    topo = Topology.of(catalog)
    S = (levels(name, catalog, topo, default_z(catalog, sim_cfg, topo)) if params is None
         else np.broadcast_to(np.asarray(params["S"], np.float64), (len(catalog),)).copy())
    return EchelonBaseStock(S, topo) if name == "echelon-base-stock" else InstallationBaseStock(S)
