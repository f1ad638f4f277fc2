"""Tuning baselines by simulation, with common random numbers (CRN).

Every candidate parameter set is simulated on the same tuning seed, so the candidates
face the very same demand and their cost differences are not blurred by sampling noise.
Tuning seeds are `tuning_seed(eval_seed) + k`, far from the held-out evaluation seeds
(eval_seed, eval_seed + 1, ...), so a tuned policy is never scored on the draws it was
tuned on.

More: docs/internals.md (policy/tuning.py)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from skurl.catalog.network import parent_rows
from skurl.catalog.schema import Catalog, catalog_digest
from skurl.config import SimConfig
from skurl.policy.baselines import (
    Params,
    cap_from_multiplier,
    check_policy_name,
    critical_ratio,
    default_z,
    eoq,
    long_run_mean,
    lot_size,
    reorder_point,
    static_level,
    summarize,
)
from skurl.policy.tuning_sample import extend_knob, stratified_rows
from skurl.policy.tuning_scorer import CandidateScorer, Progress, TuneResult, objective_is

TUNE_SEED_OFFSET = 7_777_777


def tuning_seed(eval_seed: int) -> int:
    """First tuning seed for a run whose held-out evaluation starts at `eval_seed`."""
    return int(eval_seed) + TUNE_SEED_OFFSET


def is_uniform(catalog: Catalog) -> bool:
    """True when every SKU has the same parameters (sku_id aside)."""
    for f in dataclasses.fields(catalog):
        if f.name == "sku_id":
            continue
        arr = getattr(catalog, f.name)
        if arr.shape[0] and not np.all(arr == arr[:1]):
            return False
    return True


# ------------------------------------------------------------ per-SKU (heterogeneous)

@dataclass(frozen=True)
class Knob:
    name: str
    grid: tuple[float, ...]  # first pass: each value for every SKU
    step: float  # grid spacing; refinement tries each SKU's best +- step / 2
    lo: float = -np.inf
    hi: float = np.inf


# Grids are short on purpose: each value is one simulation of the whole catalog.
Z_GRID = (-0.5, 0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0)
KNOBS: dict[str, tuple[Knob, ...]] = {
    "base-stock": (Knob("z", Z_GRID, 0.5, -3.0, 6.0),),
    "forecast-base-stock": (Knob("z", Z_GRID, 0.5, -3.0, 6.0),),
    "capped-base-stock": (Knob("z", Z_GRID, 0.5, -3.0, 6.0),
                          Knob("cap", (1.0, 1.25, 1.5, 2.0, 3.0), 0.25, 0.5, 50.0)),
    "s-S": (Knob("z", Z_GRID, 0.5, -3.0, 6.0), Knob("q", (0.5, 1.0, 1.5, 2.0, 3.0), 0.5, 0.1, 20.0)),
    # forecast-s-S's lot in EOQs: 0 is forecast-base-stock (and a SKU without order cost).
    # z again after the lot: a lot is stock, so the best level moves with it (session 27, the
    # embedded catalog: z, q gave 9.7896 profit / SKU-day on the held-out seed, z, q, z 9.8120,
    # its perishables 8.2307 and 8.3284 against forecast-base-stock's 8.3013).
    "forecast-s-S": (Knob("z", Z_GRID, 0.5, -3.0, 6.0), Knob("q", (0.0, 0.25, 0.5, 1.0, 1.5, 2.0), 0.25, 0.0, 10.0),
                     Knob("z", Z_GRID, 0.5, -3.0, 6.0)),
    "constant": (Knob("f", (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 1.0), 0.05, 0.0, 2.0),),
}


def initial_knobs(name: str, catalog: Catalog, sim_cfg: SimConfig) -> dict[str, np.ndarray]:
    """Knob values that reproduce the untuned defaults of baselines.default_params."""
    n = len(catalog)
    z = default_z(catalog, sim_cfg)
    start = {"z": z, "cap": np.full(n, 1.5), "q": np.ones(n), "f": critical_ratio(catalog, sim_cfg)}
    return {k.name: start[k.name].astype(np.float64) for k in KNOBS[name]}


def knob_params(name: str, catalog: Catalog, sim_cfg: SimConfig, knobs: dict[str, np.ndarray]) -> Params:
    """Policy parameters (per-SKU arrays) for per-SKU knob values."""
    if name == "forecast-base-stock":
        return {"z": knobs["z"]}
    if name == "forecast-s-S":
        return {"z": knobs["z"], "lot": lot_size(catalog, knobs["q"])}
    if name == "constant":
        return {"c": knobs["f"] * long_run_mean(catalog)}
    level = static_level(catalog, sim_cfg, knobs["z"])
    if name == "base-stock":
        return {"S": level}
    if name == "capped-base-stock":
        return {"S": level, "r": cap_from_multiplier(catalog, sim_cfg, knobs["cap"])}
    s = reorder_point(level)
    return {"s": s, "S": s + np.maximum(1.0, np.round(knobs["q"] * eoq(catalog)))}


def _pick(best_obj: np.ndarray, best_val: np.ndarray, obj: np.ndarray, val: np.ndarray) -> None:
    """Per SKU, keep the candidate with the lower objective (in place; ties keep the old)."""
    better = obj < best_obj
    best_obj[better] = obj[better]
    best_val[better] = val[better]


def _candidates(knob: Knob, knobs: dict[str, np.ndarray], scored: bool) -> list[np.ndarray | float]:
    """First pass: every grid value, plus each SKU's current value unless already scored."""
    return [*knob.grid] if scored else [*knob.grid, knobs[knob.name].copy()]


MAX_EXPANSIONS = 8  # per knob: steps beyond the grid's ends (z: from 3.0 up to 6.0 is 6)


# SKU-days simulated per candidate of a per-SKU search, all replicas together: a SKU
# selling a few units a month sees only a handful of demands in one 100-day episode, and
# its best value on those is mostly noise. On the embedded `skurl train` catalog (2,000
# SKUs, forecast-base-stock, held-out profit over 2 x 200 days) one 100-day episode gave
# 9.2853 per SKU-day, 3 replicas 9.3228, 5 replicas 9.3302, 10 replicas 9.3409; one
# 800-day episode 9.3348 (session 13). Large catalogs keep one copy (a budget per catalog).
PER_SKU_DAY_BUDGET = 2_000_000
MAX_TUNING_REPLICAS = 16


def per_sku_replicas(skus: int, days: int, sku_days: int = PER_SKU_DAY_BUDGET) -> int:
    """Copies of each SKU a per-SKU search simulates side by side (independent demand):
    sku_days per candidate, at most MAX_TUNING_REPLICAS per PER_SKU_DAY_BUDGET of them."""
    most = MAX_TUNING_REPLICAS * max(1, sku_days // PER_SKU_DAY_BUDGET)
    return int(min(most, max(1, sku_days // max(skus * days, 1))))


def replicate(catalog: Catalog, copies: int) -> Catalog:
    """`copies` copies of `catalog`, one after the other. Copy 0 keeps the sku ids; copy
    k > 0 gets fresh ones (its own random numbers: an independent demand path of the same
    SKU). Substitution groups are numbered 0..G-1 within each copy, plus k x G (a group's
    id only tells its members apart from other groups' members); a network row's upstream
    is its upstream's id in the same copy."""
    if copies == 1:
        return catalog
    n = len(catalog)
    parent = parent_rows(catalog.sku_id, catalog.upstream)
    grouped = catalog.group >= 0
    ids, dense = np.unique(catalog.group[grouped], return_inverse=True)
    base_id = int(catalog.sku_id.max(initial=0)) + 1
    fits = base_id * copies <= 2**62  # else every copy is numbered by row (ids stay unique)
    parts = []
    for k in range(copies):
        part = catalog.subset(np.arange(n))
        part.sku_id = catalog.sku_id + k * base_id if fits else np.arange(n, dtype=np.int64) + k * n
        part.group[grouped] = dense + k * ids.size
        part.upstream = np.where(parent >= 0, part.sku_id[np.maximum(parent, 0)], -1).astype(np.int64)
        parts.append(part)
    return Catalog.concat(parts)


def tune_per_sku(scorer: CandidateScorer, catalog: Catalog,
                 progress: Progress | None = None) -> tuple[Params, np.ndarray, dict]:
    """Coordinate search over the policy's knobs, per SKU of `catalog` (one sweep in KNOBS'
    order: z first, then the cap or order-size knob; forecast-s-S's z once more). The
    scorer simulates `catalog` or replicas of it (replicate): a SKU's knob is shared by its
    replicas and scored by their mean. Returns params, the per-SKU objective of the chosen
    candidate, and the chosen knob values."""
    name, sim_cfg = scorer.name, scorer.sim_cfg
    n = len(catalog)
    copies = len(scorer.catalog) // n
    knobs = initial_knobs(name, catalog, sim_cfg)
    best_obj = np.full(n, np.inf)

    def try_values(knob: Knob, values: np.ndarray | float) -> np.ndarray:
        val = np.clip(np.broadcast_to(np.asarray(values, dtype=np.float64), (n,)), knob.lo, knob.hi)
        tiled = {k: np.tile(v, copies) for k, v in {**knobs, knob.name: val}.items()}
        obj = scorer(knob_params(name, scorer.catalog, sim_cfg, tiled)).reshape(copies, n).mean(axis=0)
        improved = obj < best_obj
        _pick(best_obj, knobs[knob.name], obj, val)
        if progress:
            progress(f"tune {name}: run {scorer.runs} ({knob.name}), mean objective "
                     f"{float(np.mean(best_obj[np.isfinite(best_obj)])):.4f}")
        return improved

    expansions: dict[str, int] = {}
    for knob in KNOBS[name]:
        for values in _candidates(knob, knobs, bool(np.isfinite(best_obj).any())):
            try_values(knob, values)
        key = f"{knob.name}_expansions"
        expansions[key] = expansions.get(key, 0) + _expand(knob, knobs, try_values)  # a knob may come twice
        center = knobs[knob.name].copy()  # refine around each SKU's best so far
        try_values(knob, center - knob.step / 2)
        try_values(knob, center + knob.step / 2)
    details = {f"{k}_chosen": v for k, v in knobs.items()}
    return knob_params(name, catalog, sim_cfg, knobs), best_obj, {**details, **expansions}


def _expand(knob: Knob, knobs: dict[str, np.ndarray],
            try_values: Callable[[Knob, np.ndarray], np.ndarray]) -> int:
    """Step each SKU whose best value is the highest (lowest) tried beyond it, while some
    SKU improves; SKUs inside the tried range keep their value (scored again, unchanged).
    Returns the number of extra simulations."""
    top, bottom = max(knob.grid), min(knob.grid)
    runs = 0
    for _ in range(MAX_EXPANSIONS):
        best = knobs[knob.name]
        up = (best >= top) & (best + knob.step <= knob.hi)
        down = (best <= bottom) & (best - knob.step >= knob.lo)
        if not (up.any() or down.any()):
            break
        trial = best + np.where(up, knob.step, 0.0) - np.where(down, knob.step, 0.0)
        improved = try_values(knob, trial)
        runs += 1
        if not (improved & (up | down)).any():
            break
        top, bottom = top + knob.step, bottom - knob.step
    return runs


# ------------------------------------------------------------------------------ tune

# Results of tune() in this process, by every input that decides them: a run tunes the same
# baseline for its grid centre, its warm start and its report on the same SKUs (forecast-s-S
# on the embedded catalog: 46 whole-catalog simulations, a minute on 2 cores, each time).
_MEMO: dict[str, TuneResult] = {}
MEMO_SIZE = 4


def tune(name: str, catalog: Catalog, sim_cfg: SimConfig, *, eval_seed: int, days: int, warmup: int,
         uniform_skus: int = 1000, max_uniform_skus: int = 16_000, per_sku_days: int = 100,
         per_sku_warmup: int = 30, sku_days: int = PER_SKU_DAY_BUDGET, max_skus: int = 0,
         network_tuning: str = "per-network", progress: Progress | None = None) -> TuneResult:
    """`tune_uncached`'s result, computed once per process for the same inputs (callers must
    not modify its arrays)."""
    check_policy_name(name)
    key = json.dumps([name, catalog_digest(catalog), dataclasses.asdict(sim_cfg), eval_seed, days, warmup,
                      uniform_skus, max_uniform_skus, per_sku_days, per_sku_warmup, sku_days, max_skus, network_tuning],
                     sort_keys=True)
    if key not in _MEMO:
        result = tune_uncached(name, catalog, sim_cfg, eval_seed=eval_seed, days=days, warmup=warmup,
                               uniform_skus=uniform_skus, max_uniform_skus=max_uniform_skus,
                               per_sku_days=per_sku_days, per_sku_warmup=per_sku_warmup, sku_days=sku_days,
                               max_skus=max_skus, network_tuning=network_tuning, progress=progress)
        while len(_MEMO) >= MEMO_SIZE:
            _MEMO.pop(next(iter(_MEMO)))
        _MEMO[key] = result
    return _MEMO[key]


def tune_uncached(name: str, catalog: Catalog, sim_cfg: SimConfig, *, eval_seed: int, days: int, warmup: int,
                  uniform_skus: int = 1000, max_uniform_skus: int = 16_000, per_sku_days: int = 100,
                  per_sku_warmup: int = 30, sku_days: int = PER_SKU_DAY_BUDGET, max_skus: int = 0,
                  network_tuning: str = "per-network", progress: Progress | None = None) -> TuneResult:
    """Tune baseline `name` for `catalog` on tuning seeds derived from `eval_seed` (never
    the evaluation seeds), simulating warmup + days per candidate. Uniform catalogs: exact
    integer search on `uniform_skus` copies (more, up to `max_uniform_skus`, while the
    leaders are too close to call). Heterogeneous catalogs simulate every SKU for each of
    ~11-20 candidates, so their horizon is capped at per_sku_warmup + per_sku_days (a
    20k-SKU tune then stays well under a minute on 2 cores), and a small catalog is
    simulated as several replicas (per_sku_replicas: `sku_days` SKU-days a candidate,
    eval.tune_sku_days). A catalog of more than `max_skus` SKUs (> 0) tunes a stratified sample
    of them and extends its knobs to the rest (policy/tuning_sample.py, eval.tune_max_skus).
    Network baselines: network_tuning.py (`network_tuning`: per-network or per-echelon).
    `progress` gets a line per candidate run; by default a line every 5 s at most goes to
    stderr (a minute of tuning before training must not look like a hang in a log)."""
    check_policy_name(name)
    if progress is None:
        from skurl.telemetry.progress import throttled_lines

        progress = throttled_lines(5.0)
    seed = tuning_seed(eval_seed)
    if name in ("echelon-base-stock", "installation-base-stock"):  # supply networks
        from skurl.policy.network_tuning import tune_network

        return tune_network(name, catalog, sim_cfg, seed=seed, days=days, warmup=warmup, by=network_tuning,
                            sku_days=sku_days, progress=progress)
    if is_uniform(catalog):
        from skurl.policy.tuning_uniform import tune_uniform

        return tune_uniform(name, catalog, sim_cfg, seed=seed, days=days, warmup=warmup,
                            skus=uniform_skus, max_skus=max_uniform_skus, progress=progress)
    days, warmup = min(days, per_sku_days), min(warmup, per_sku_warmup)
    rows = stratified_rows(catalog, max_skus, seed) if 0 < max_skus < len(catalog) else None
    tuned = catalog if rows is None else catalog.subset(rows)
    copies = per_sku_replicas(len(tuned), days, sku_days)
    scorer = CandidateScorer(name, replicate(tuned, copies), sim_cfg, seed=seed, days=days, warmup=warmup)
    params, obj, details = tune_per_sku(scorer, tuned, progress)
    if rows is not None:
        knobs = {k.name: extend_knob(catalog, rows, details[f"{k.name}_chosen"]) for k in KNOBS[name]}
        params = knob_params(name, catalog, sim_cfg, knobs)
        details = {**details, **{f"{k}_chosen": v for k, v in knobs.items()}, "tuned_skus": rows.size}
    finite = np.isfinite(obj)
    return TuneResult(
        name=name, params=params, method="per-sku-grid", seed=seed, days=days, warmup=warmup,
        runs=scorer.runs, sku_days=scorer.sku_days,
        objective=float(obj[finite].mean()) if finite.any() else float("nan"),
        details={"replicas": copies, **{k: summarize(v) for k, v in details.items()}},
        objective_is=objective_is(sim_cfg),
    )
