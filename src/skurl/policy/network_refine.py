"""Per-network tuning of the network baselines: every network its own z per echelon index.

Networks are independent (each one's demand draws are keyed by its own SKUs), so one
simulation scores a different candidate for every network at once: the coordinate search of
network_tuning.py runs in lockstep over all networks, each accepting or rejecting its own
step. Each network picks on its own simulated days, so the search scores `episodes` episodes
a candidate and the refined z is then checked on as many fresh episodes against the shared
start: a network keeps whichever was better there (a pick made on noise does not survive).
Copies of one network (identical_networks) keep the shared search. More: docs/networks.md (Baselines)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from skurl.catalog.schema import Catalog
from skurl.config import SimConfig
from skurl.policy.network_baselines import Topology, make_network_policy, row_levels
from skurl.sim.episode import TotalingEnv, run_episode, sku_objective

MAX_WALK = 8  # steps one network walks in one direction before the next move
COARSE_STEP = 1.0  # steps at least this large score one episode a candidate


@dataclass
class NetworkScorer:
    """Objective per network-day of per-row factors `z`, each network on its own rows, as the
    mean over episodes `first`..`first + episodes - 1` of tuning seed `seed` (common random
    numbers: every candidate sees the same demand)."""

    name: str
    catalog: Catalog
    topo: Topology
    env: TotalingEnv
    sim_cfg: SimConfig
    seed: int
    days: int
    warmup: int
    network: np.ndarray  # int64 [N]: dense network index of each row
    runs: int = field(default=0)

    @property
    def networks(self) -> int:
        return int(self.network.max(initial=-1)) + 1

    def rows(self, z_net: np.ndarray) -> np.ndarray:
        """Per-row factors of per-network ones [networks, echelons]."""
        return z_net[self.network, self.topo.echelon - 1]

    def levels(self, z_net: np.ndarray) -> np.ndarray:
        return self.levels_of_rows(self.rows(z_net))

    def levels_of_rows(self, z_rows: np.ndarray) -> np.ndarray:
        return row_levels(self.name, self.catalog, self.topo, z_rows)

    def __call__(self, z_net: np.ndarray, first: int, episodes: int) -> np.ndarray:
        return self.score_rows(self.rows(z_net), first, episodes)

    def score_rows(self, z_rows: np.ndarray, first: int, episodes: int) -> np.ndarray:
        policy = make_network_policy(self.name, self.catalog, self.sim_cfg, {"S": self.levels_of_rows(z_rows)})
        total = np.zeros(self.networks)
        for episode in range(first, first + episodes):
            totals, failed = run_episode(self.env, policy, seed=self.seed, episode=episode, days=self.days,
                                         warmup=self.warmup)
            per_row = sku_objective(totals, self.sim_cfg.reward) / self.days
            total += np.bincount(self.network, per_row, self.networks)
            total[np.bincount(self.network, failed, self.networks) > 0] = np.inf  # never pick a failing candidate
            self.runs += 1
        return total / episodes


@dataclass(frozen=True)
class Refined:
    z: np.ndarray  # float64 [networks, echelons]
    objective: np.ndarray  # per network-day on the check episodes, of the kept z
    kept: int  # networks whose refined z beat the shared one on the check episodes


def refine_per_network(scorer: NetworkScorer, shared: np.ndarray, steps: tuple[float, ...],
                       moves: list[np.ndarray], episodes: int, max_runs: int) -> Refined:
    """Lockstep coordinate search from the shared factors `shared` [echelons] (module
    docstring), at most `max_runs` candidate simulations, then the check on fresh episodes."""
    start = np.tile(np.asarray(shared, np.float64), (scorer.networks, 1))
    z = start.copy()
    spent = 0
    for step in steps:
        used = 1 if step >= COARSE_STEP else episodes  # coarse steps: big differences, one episode tells
        best = scorer(z, 0, used)
        spent += used
        improved = np.ones(scorer.networks, bool)
        while improved.any() and spent + used <= max_runs:
            improved[:] = False
            for move in moves:
                walking = np.ones(scorer.networks, bool)
                for _ in range(MAX_WALK):
                    trial, walking = _step(scorer, z, step * move, walking)
                    if not walking.any() or spent + used > max_runs:
                        break
                    value = scorer(trial, 0, used)
                    spent += used
                    walking &= value < best
                    z[walking], best[walking] = trial[walking], value[walking]
                    improved |= walking
    _, objective, keep = keep_better(scorer, scorer.rows(z), scorer.rows(start), episodes, episodes)
    z[~keep] = start[~keep]
    return Refined(z, objective, int(keep.sum()))


def _step(scorer: NetworkScorer, z: np.ndarray, delta: np.ndarray, walking: np.ndarray,
          plateau: int = 50) -> tuple[np.ndarray, np.ndarray]:
    """`z` moved by `delta` for the walking networks, stepped on (up to `plateau` times) until
    some level of the network changes; networks no step moves stop walking."""
    here = scorer.levels(z)
    trial, pending = z.copy(), walking.copy()
    moved = np.zeros_like(walking)
    for _ in range(plateau):
        trial[pending] += delta
        changed = np.bincount(scorer.network, scorer.levels(trial) != here, scorer.networks) > 0
        moved |= pending & changed
        pending &= ~changed
        if not pending.any():
            break
    walking = walking & moved
    trial[~walking] = z[~walking]
    return trial, walking


def dense_networks(root: np.ndarray) -> np.ndarray:
    """Dense index 0..networks-1 of each row's network (by root row)."""
    return np.unique(root, return_inverse=True)[1].astype(np.int64)


def identical_networks(catalog: Catalog, network: np.ndarray, echelon: np.ndarray) -> bool:
    """True when every network has the same rows (parameters and echelon index, ids aside):
    copies of one network (catalog.kind=serial) share one best z, which the shared search
    finds on all of them together; tuned apart, each copy would pick on its own noise."""
    n = network.shape[0]
    sizes = np.bincount(network)
    if n == 0 or sizes.min() != sizes.max():
        return False
    columns = [echelon.astype(np.float64).reshape(n, 1)]
    columns += [np.asarray(getattr(catalog, f.name), np.float64).reshape(n, -1)
                for f in dataclasses.fields(catalog) if f.name not in ("sku_id", "upstream", "item")]
    rows = np.hstack(columns)
    order = np.lexsort((*rows.T[::-1], network))  # by network, then by the row's parameters
    by_network = rows[order].reshape(sizes.size, int(sizes[0]), -1)
    return bool((by_network == by_network[:1]).all())


def keep_better(scorer: NetworkScorer, candidate: np.ndarray, fallback: np.ndarray, first: int,
                episodes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-row factors: each network's `candidate` rows where they beat `fallback` on episodes
    first.. (fresh ones), else `fallback`'s; with the kept objective per network-day and the
    mask of networks that kept the candidate."""
    base = scorer.score_rows(fallback, first, episodes)
    tried = scorer.score_rows(candidate, first, episodes)
    keep = tried < base
    return np.where(keep[scorer.network], candidate, fallback), np.where(keep, tried, base), keep


def carry_by_echelon(catalog: Catalog, echelon: np.ndarray, tuned_rows: np.ndarray,
                     tuned_z: np.ndarray) -> np.ndarray:
    """Per-row factors for all of `catalog` from those of `tuned_rows`: every other row takes
    the median of its nearest tuned rows of the same echelon index (tuning_sample.extend_knob)."""
    from skurl.policy.tuning_sample import extend_knob

    out = np.full(len(catalog), np.nan)
    for level in np.unique(echelon):
        at = np.flatnonzero(echelon == level)
        tuned = np.isin(at, tuned_rows)
        values = tuned_z[np.searchsorted(tuned_rows, at[tuned])]
        out[at] = extend_knob(catalog.subset(at), np.flatnonzero(tuned), values)
    return out
