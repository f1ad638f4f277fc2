"""The cover grid centred on tuned echelon base-stock (policy.actions.center_policy=echelon-base-stock).

On a catalog with supply networks, action k of row i orders up to S_i + offset_k x sd_i on
the row's echelon inventory position, S_i being the tuned echelon base-stock level and sd_i
the standard deviation of the demand over the row's echelon protection days. Echelon
base-stock is the optimal structure of a serial system (Clark-Scarf), so offset 0 is the
baseline's own order: the warm start clones it without loss and PPO learns where to deviate
(on a dc network with lost sales and a limited DC, for instance).

More: docs/networks.md (Learned policy)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from skurl.catalog.schema import Catalog
from skurl.errors import ConfigError
from skurl.policy.network_baselines import Topology, cover_days, echelon_position
from skurl.sim.api import RawState

POLICY = "echelon-base-stock"


@dataclass(frozen=True)
class EchelonCover:
    """Per-row demand moments over the echelon protection days, and the network topology."""

    mean: np.ndarray  # float64 [N]: demand mean x echelon protection days (variance: the same)
    topo: Topology

    @classmethod
    def of(cls, catalog: Catalog) -> EchelonCover:
        if not catalog.has_network:
            raise ConfigError("policy.actions.center_policy: echelon-base-stock, but the catalog has no supply "
                              "networks (expected a catalog with an upstream column, or forecast-base-stock)")
        topo = Topology.of(catalog)
        return cls(demand_over_cover(catalog, topo), topo)

    def for_clones(self, src: np.ndarray, parent: np.ndarray) -> EchelonCover:
        """This cover for a clone env's rows (Topology.for_clones)."""
        return EchelonCover(self.mean[src], self.topo.for_clones(src, parent))

    def moments(self, raw: RawState, rows: slice | np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(mean, variance, echelon position) float64 [B] of rows `rows`; the position is
        computed over every row of `raw` (an echelon sums a whole network)."""
        if self.mean.shape[0] != raw.on_hand.shape[0]:
            raise ValueError(f"actions: echelon grid bound to {self.mean.shape[0]} rows, "
                             f"the observation has {raw.on_hand.shape[0]}")
        position = echelon_position(self.topo, raw)
        return self.mean[rows], self.mean[rows], position[rows]


def demand_over_cover(catalog: Catalog, topo: Topology) -> np.ndarray:
    """Mean demand over each row's echelon protection days (network_baselines.levels' m c)."""
    return catalog.demand_mean.astype(np.float64) * cover_days(POLICY, catalog, topo)


def center_factors(catalog: Catalog, levels: np.ndarray) -> np.ndarray:
    """Per-row factor z with ceil(m c + z sqrt(m c)) = the level (the cover grid's
    arithmetic at offset 0 reproduces the tuned levels); 0 where no demand is expected."""
    mc = demand_over_cover(catalog, Topology.of(catalog))
    sd = np.sqrt(mc)
    safe = np.where(sd > 0.0, sd, 1.0)
    return np.where(sd > 0.0, (np.asarray(levels, np.float64) - mc) / safe, 0.0)


def center_levels(catalog: Catalog, z: np.ndarray) -> np.ndarray:
    """The levels offset 0 orders up to (the warm start's teacher), from per-row factors z."""
    mc = demand_over_cover(catalog, Topology.of(catalog))
    return np.maximum(0.0, np.ceil(mc + np.asarray(z, np.float64) * np.sqrt(mc) - 1e-9))
