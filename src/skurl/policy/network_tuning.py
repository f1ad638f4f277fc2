"""Tuning of the network baselines (echelon and installation base-stock): one z per
echelon index by a pattern search with common random numbers on the whole catalog, then,
by default, every network its own z per echelon index from there (network_refine.py;
docs/networks.md, Baselines)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from skurl.catalog.network import echelons
from skurl.catalog.schema import Catalog
from skurl.config import SimConfig
from skurl.policy.api import Policy
from skurl.policy.network_baselines import Topology, default_z, levels, make_network_policy
from skurl.policy.network_refine import (
    NetworkScorer,
    carry_by_echelon,
    dense_networks,
    identical_networks,
    keep_better,
    refine_per_network,
)
from skurl.policy.tuning_sample import stratified_rows
from skurl.policy.tuning_scorer import TuneResult, objective_is
from skurl.sim.episode import TotalingEnv, make_env, run_episode, sku_cost

Z_STEPS = (0.5, 0.1, 0.02)  # coordinate search: each step until no knob improves, then finer
MAX_PASSES = 12
PLATEAU_STEPS = 50
REFINE_RUNS = 800  # episodes the per-network search simulates at most (each a whole-catalog run)
REFINE_SKU_DAYS = 400_000_000  # a larger catalog is searched per network on a sample of this many (about 2 min)
REFINE_STEPS = (2.0, 0.5, 0.1)  # networks sit far apart (z from 0 to over 20 on dc.yaml): a coarse first step


def tune_network(name: str, catalog: Catalog, sim_cfg: SimConfig, *, seed: int, days: int, warmup: int,
                 by: str = "per-network", sku_days: int = 2_000_000,
                 progress: Callable[[str], None] | None = None) -> TuneResult:
    """One z per echelon index by coordinate search (module docstring), every candidate
    simulated over the whole catalog on tuning seed `seed` (common random numbers); with
    `by`=per-network, then one per network and echelon index, each candidate scored on
    about `sku_days` SKU-days (episodes of the whole catalog, at least 2)."""
    topo = Topology.of(catalog)
    nets = int((topo.parent < 0).sum())
    env = make_env(catalog, _with_days(sim_cfg, warmup + days))
    seen: dict[bytes, float] = {}

    def score(z: np.ndarray) -> float:
        S = levels(name, catalog, topo, z)
        key = S.tobytes()
        if key not in seen:
            seen[key] = _objective(env, make_network_policy(name, catalog, sim_cfg, {"S": S}), sim_cfg,
                                   seed=seed, days=days, warmup=warmup) * len(catalog) / nets
            if progress is not None:
                progress(f"tune {name}: z={np.round(z, 3).tolist()} objective/network-day {seen[key]:.4f}")
        return seen[key]

    z = default_z(catalog, sim_cfg, topo)
    best = score(z)
    moves = _moves(z.shape[0])
    for step in Z_STEPS:
        for _ in range(MAX_PASSES):
            improved = False
            for move in moves:
                while True:  # keep walking this direction while it pays
                    trial = z + step * move
                    here = levels(name, catalog, topo, z)
                    for _ in range(PLATEAU_STEPS):  # a step too small to move any level: step on
                        if not np.array_equal(levels(name, catalog, topo, trial), here):
                            break
                        trial = trial + step * move
                    value = score(trial)
                    if value >= best:
                        break
                    z, best, improved = trial, value, True
            if not improved:
                break
    shared = TuneResult(name=name, params={"S": levels(name, catalog, topo, z)}, method="network-echelon-z",
                        seed=seed, days=days, warmup=warmup, runs=len(seen),
                        sku_days=len(seen) * len(catalog) * (days + warmup), objective=best,
                        details={"z_by_echelon": [float(x) for x in z], "objective_per": "network-day"},
                        objective_is=objective_is(sim_cfg))
    network = dense_networks(echelons(catalog)[1])
    if by == "per-echelon" or identical_networks(catalog, network, topo.echelon):
        return shared
    return _per_network(shared, z, env, catalog, sim_cfg, topo, network, sku_days, progress)


def _per_network(shared: TuneResult, z: np.ndarray, env: TotalingEnv, catalog: Catalog, sim_cfg: SimConfig,
                 topo: Topology, network: np.ndarray, sku_days: int,
                 progress: Callable[[str], None] | None) -> TuneResult:
    """`shared`'s search refined per network (network_refine.py)."""
    scorer = NetworkScorer(shared.name, catalog, topo, env, sim_cfg, shared.seed, shared.days, shared.warmup,
                           network)
    episodes = max(2, sku_days // max(len(catalog) * shared.days, 1))
    most_rows = max(1, REFINE_SKU_DAYS // (REFINE_RUNS * (shared.days + shared.warmup)))
    sampled = len(catalog) > most_rows
    if sampled:  # search a stratified sample of whole networks, carry, check every network
        z_rows, objective, kept, sample_runs = _sampled(shared, z, scorer, most_rows, episodes)
        searched_rows = sample_runs * most_rows
    else:
        refined = refine_per_network(scorer, z, REFINE_STEPS, _moves(z.shape[0]), episodes, REFINE_RUNS)
        z_rows, objective, kept, searched_rows = scorer.rows(refined.z), refined.objective, refined.kept, 0
    if progress is not None:
        progress(f"tune {shared.name} per network: {kept} of {scorer.networks} networks kept their own z, "
                 f"objective/network-day {float(objective.mean()):.4f}")
    by_echelon = [z_rows[topo.echelon == e] for e in range(1, int(topo.echelon.max()) + 1)]
    details = {**shared.details, "per_network": {
        "networks": scorer.networks, "kept_own_z": kept, "episodes": episodes, "sampled": sampled,
        "z_mean_by_echelon": [float(v.mean()) for v in by_echelon],
        "z_sd_by_echelon": [float(v.std()) for v in by_echelon]}}
    row_days = (scorer.runs * len(catalog) + searched_rows) * (shared.days + shared.warmup)
    return TuneResult(name=shared.name, params={"S": scorer.levels_of_rows(z_rows)},
                      method="network-per-network-z", seed=shared.seed, days=shared.days, warmup=shared.warmup,
                      runs=shared.runs + scorer.runs, sku_days=shared.sku_days + row_days,
                      objective=float(objective.mean()), details=details, objective_is=shared.objective_is)


def _sampled(shared: TuneResult, z: np.ndarray, full: NetworkScorer, most_rows: int,
             episodes: int) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Per-network search on about `most_rows` rows of whole networks (tuning_sample's strata),
    their factors carried to the other networks by echelon index, then each network of the
    catalog keeps carried or shared factors by fresh episodes (network_refine.keep_better)."""
    catalog, topo = full.catalog, full.topo
    rows = stratified_rows(catalog, most_rows, shared.seed)
    sub = catalog.subset(rows)
    env = make_env(sub, _with_days(full.sim_cfg, shared.warmup + shared.days))
    sample = NetworkScorer(shared.name, sub, Topology.of(sub), env, full.sim_cfg, shared.seed, shared.days,
                           shared.warmup, dense_networks(echelons(sub)[1]))
    refined = refine_per_network(sample, z, REFINE_STEPS, _moves(z.shape[0]), episodes, REFINE_RUNS)
    carried = carry_by_echelon(catalog, topo.echelon, rows, sample.rows(refined.z))
    chosen, objective, keep = keep_better(full, carried, z[topo.echelon - 1], 2 * episodes, episodes)
    return chosen, objective, int(keep.sum()), sample.runs


def _objective(env: TotalingEnv, policy: Policy, sim_cfg: SimConfig, *, seed: int, days: int,
               warmup: int) -> float:
    """Cost (or minus profit) per SKU-day of one episode, over the SKUs the env kept, as
    collect/evaluate.py scores a policy (without importing the collect package)."""
    totals, failed = run_episode(env, policy, seed=seed, episode=0, days=days, warmup=warmup)
    ok = ~failed
    count = max(int(ok.sum()), 1)
    cost = sku_cost({k: v / days for k, v in totals.items()})
    if sim_cfg.reward == "cost":
        return float(cost[ok].sum() / count)
    return -float((totals["revenue"] / days - cost)[ok].sum() / count)


def _moves(knobs: int) -> list[np.ndarray]:
    """Search directions: each knob alone, then each pair together and against each other
    (the levels of an upstream and its locations trade off: one at a time stalls)."""
    eye = np.eye(knobs)
    out = [sign * eye[e] for e in range(knobs) for sign in (1.0, -1.0)]
    for a in range(knobs):
        for b in range(a + 1, knobs):
            out += [eye[a] + eye[b], -eye[a] - eye[b], eye[a] - eye[b], eye[b] - eye[a]]
    return out


def _with_days(sim_cfg: SimConfig, days: int) -> SimConfig:
    import dataclasses

    return dataclasses.replace(sim_cfg, days=days)
