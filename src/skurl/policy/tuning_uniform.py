"""Integer search of a baseline's levels on a uniform catalog.

A uniform catalog is one SKU copied N times, so one parameter set serves all SKUs and the
search can afford to be exact: every point of an integer box is simulated on the same
SKUs and seed (CRN); the box grows on any side where the best point sits on its edge;
then the close contenders get fresh batches of SKU-days (batch b uses tuning seed + b)
until the best beats each of them by `separation` paired standard errors, or the SKU
budget is spent. The paired standard error of the difference between two candidates is
std(per-SKU differences) / sqrt(SKUs): SKUs are independent copies, and CRN makes the
differences far less noisy than the levels themselves.

More: docs/internals.md (policy/tuning_uniform.py)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from skurl.catalog.schema import Catalog
from skurl.config import SimConfig
from skurl.policy.baselines import (
    daily_variance,
    default_params,
    default_z,
    eoq,
    long_run_mean,
    lot_size,
    protection_days,
)
from skurl.policy.tuning_scorer import CandidateScorer, Progress, TuneResult, objective_is

Point = tuple[int, ...]
COARSE_POINTS = 16  # an axis with more steps than this across its box is searched coarse to fine
ZOOM = 4  # lattice refinement per pass


@dataclass
class Axis:
    name: str
    lo: int
    hi: int
    floor: int = 0  # the box never extends below this index
    step: float = 1.0  # parameter value = index x step

    def value(self, index: int) -> float:
        return round(index * self.step, 10)


@dataclass
class Space:
    axes: list[Axis]
    to_params: Callable[[dict[str, float]], dict[str, float] | None]  # None: invalid point

    def params(self, point: Point) -> dict[str, float] | None:
        return self.to_params({a.name: a.value(i) for a, i in zip(self.axes, point, strict=True)})

    def points(self) -> list[Point]:
        ranges = [range(a.lo, a.hi + 1) for a in self.axes]
        return [p for p in itertools.product(*ranges) if self.params(p) is not None]


def uniform_copies(catalog: Catalog, skus: int) -> Catalog:
    """`skus` copies of row 0 with ids 0..skus-1 (a tuning catalog of any size)."""
    cat = catalog.subset(np.zeros(skus, dtype=np.int64))
    cat.sku_id = np.arange(skus, dtype=np.int64)
    return cat


def search_space(name: str, catalog: Catalog, sim_cfg: SimConfig) -> Space:
    """The integer box around the untuned defaults, with room on every side."""
    one = catalog.subset(np.arange(1))
    days = int(protection_days(one, sim_cfg.review_days)[0])
    m = float(long_run_mean(one)[0])
    sd_day = math.sqrt(float(daily_variance(np.array([m]), one.demand_dist, one.dispersion)[0]))
    sd_cover = sd_day * math.sqrt(days)
    width = max(3, math.ceil(1.5 * sd_cover))
    s0 = int(default_params("base-stock", one, sim_cfg)["S"][0])
    per_review = m * sim_cfg.review_days
    if name == "base-stock":
        return Space([Axis("S", max(0, s0 - width), s0 + width)], lambda v: {"S": v["S"]})
    if name == "capped-base-stock":
        # A 2-D box costs its area in simulations: start small, it grows where needed.
        sd_review = sd_day * math.sqrt(sim_cfg.review_days)
        r_lo = max(1, math.floor(per_review))
        r_hi = max(r_lo + 2, math.ceil(per_review + 1.5 * sd_review))
        return Space([Axis("S", max(0, s0 - 2), s0 + 3), Axis("r", r_lo, r_hi, floor=1)],
                     lambda v: {"S": v["S"], "r": v["r"]} if v["r"] <= max(v["S"], 1) else None)
    if name == "s-S":
        q0 = int(eoq(one)[0])
        # s = -1 reaches S = 0 (Q >= 1): never order under lost sales, the best policy when
        # demand is (nearly) zero and any stock only costs holding.
        return Space([Axis("s", max(0, s0 - 4), s0, floor=-1), Axis("Q", max(1, q0 - 2), q0 + 3, floor=1)],
                     lambda v: {"s": v["s"], "S": v["s"] + v["Q"]})
    if name == "constant":
        step = 0.25 if m >= 4 else max(round(m / 16, 3), 0.001)
        return Space([Axis("c", int(0.5 * m / step), math.ceil(m / step), step=step)], lambda v: {"c": v["c"]})
    z0 = float(default_z(one, sim_cfg)[0])
    if name == "forecast-s-S":
        # z on the 0.1 grid as forecast-base-stock, and the lot in whole units from 0
        # (forecast-base-stock itself) around the EOQ's.
        lot0 = int(lot_size(one, 1.0)[0])
        return Space([Axis("z", round((z0 - 0.3) / 0.1), round((z0 + 0.3) / 0.1), floor=-30, step=0.1),
                      Axis("lot", max(0, lot0 - 2), lot0 + 3)], lambda v: {"z": v["z"], "lot": v["lot"]})
    return Space([Axis("z", round((z0 - 1.0) / 0.1), round((z0 + 1.5) / 0.1), floor=-30, step=0.1)],
                 lambda v: {"z": v["z"]})


class _Scores:
    """Per-SKU objectives per (parameters, batch), simulated on demand and cached by the
    parameters' values (a coarse lattice's points are points of the finer ones)."""

    def __init__(self, scorer: CandidateScorer, progress: Progress | None) -> None:
        self.scorer, self.progress = scorer, progress
        self.cache: dict[tuple[tuple[tuple[str, float], ...], int], np.ndarray] = {}

    def get(self, space: Space, point: Point, batches: int) -> np.ndarray:
        """Concatenated per-SKU objectives over batches 0..batches-1 of `point` of `space`."""
        params = space.params(point)
        assert params is not None
        key = tuple(sorted(params.items()))
        parts = []
        for b in range(batches):
            if (key, b) not in self.cache:
                self.cache[(key, b)] = self.scorer(params, batch=b)
                if self.progress:
                    self.progress(f"tune {self.scorer.name}: run {self.scorer.runs} {params} "
                                  f"batch {b}: {float(np.mean(self.cache[(key, b)])):.4f}")
            parts.append(self.cache[(key, b)])
        return np.concatenate(parts)


def _best(space: Space, means: dict[Point, float]) -> Point:
    """The point of least mean; among exact ties (points that make the same decisions on
    every SKU-day, e.g. s-S with s + Q fixed while Q is below a day's demand) the one
    nearest the box's centre, so that a tie never drags the box along a flat ridge."""
    low = min(means.values())
    centre = [(a.lo + a.hi) / 2 for a in space.axes]
    return min((p for p, v in means.items() if v == low),
               key=lambda p: (sum((i - c) ** 2 for i, c in zip(p, centre, strict=True)), p))


def _widen(space: Space, best: Point, step: int | None = None) -> bool:
    """Widen the box on every side where `best` sits on its edge, by `step` points (default:
    half the box, at least 2); False if none."""
    grown = False
    for axis, i in zip(space.axes, best, strict=True):
        width = step or max(2, (axis.hi - axis.lo) // 2)
        if i == axis.lo and axis.lo > axis.floor:
            axis.lo, grown = max(axis.floor, axis.lo - width), True
        elif i == axis.hi:
            axis.hi, grown = axis.hi + width, True
    return grown


def _grow_box(space: Space, scores: _Scores, max_grow: int = 8) -> Point:
    """Simulate the whole box (batch 0); widen it where the best sits on an edge. A box
    wider than COARSE_POINTS on some axis is narrowed around its best first (_zoom_in)."""
    for _ in range(max_grow + 1):
        if any(a.hi - a.lo > COARSE_POINTS for a in space.axes):
            _zoom_in(space, scores, max_grow)
        points = space.points()
        best = _best(space, {p: float(np.mean(scores.get(space, p, 1))) for p in points})
        if not _widen(space, best):
            return best
    return best


def _lattice_factor(axis: Axis) -> int:
    """The smallest power of ZOOM whose lattice has at most COARSE_POINTS steps across the box."""
    factor = 1
    while (axis.hi - axis.lo) > COARSE_POINTS * factor:
        factor *= ZOOM
    return factor


def _zoom_in(space: Space, scores: _Scores, max_grow: int) -> None:
    """Narrow a wide box (module docstring): search it every f-th point (f a power of ZOOM
    per axis), then f / ZOOM-th points within one coarse step of the best, ..., until the
    box, in integer steps, spans one step of the last lattice around its best point."""
    factors = [_lattice_factor(a) for a in space.axes]
    while any(f > 1 for f in factors):
        coarse = Space([Axis(a.name, a.lo // f, -(-a.hi // f), floor=-(-a.floor // f), step=a.step * f)
                        for a, f in zip(space.axes, factors, strict=True)], space.to_params)
        if not coarse.points():
            return  # no valid point on the coarse lattice: search the box as it is
        best = _grow_box(coarse, scores, max_grow)
        for axis, f, i in zip(space.axes, factors, best, strict=True):
            centre = i * f  # in the axis's own (finest) index units
            axis.lo, axis.hi = max(axis.floor, centre - f), centre + f
        factors = [max(1, f // ZOOM) for f in factors]


def _separate(space: Space, scores: _Scores, skus: int, max_skus: int, separation: float,
              ) -> tuple[Point, int, list[dict[str, Any]]]:
    """Add batches for the contenders until the best one is clear; returns the best point,
    the batches used and one row per contender at the end."""
    contenders = space.points()
    batches = 1
    while True:
        obj = {p: scores.get(space, p, batches) for p in contenders}
        means = {p: float(np.mean(v)) for p, v in obj.items()}
        best = _best(space, means)
        rows, close = [], [best]
        for p in contenders:
            diff = obj[p] - obj[best]
            se = float(diff.std(ddof=1) / math.sqrt(diff.size)) if diff.size > 1 else 0.0
            gap = means[p] - means[best]
            rows.append({**space.params(p), "objective": means[p], "gap": gap, "gap_se": se})  # type: ignore[dict-item]
            # se == 0 with gap == 0: the same decisions on every SKU-day (e.g. two z that
            # round to one level), a tie no amount of simulation separates.
            if p != best and se > 0 and gap <= separation * se:
                close.append(p)
        if len(close) == 1 or batches * 2 * skus > max_skus:
            # the best row first even among exact ties (rows[1] is reported as runner-up)
            order = sorted(range(len(rows)), key=lambda k: (rows[k]["objective"], contenders[k] != best))
            return best, batches, [rows[k] for k in order]
        contenders, batches = close, batches * 2


def _search(space: Space, scores: _Scores, skus: int, max_skus: int, separation: float,
            max_grow: int = 8) -> tuple[Point, int, list[dict[str, Any]]]:
    """Grow the box on batch 0, then separate the contenders; when more batches move the
    best onto an edge (batch 0's noise hid the slope there), widen and separate again, so
    the answer is never a point the box cut short."""
    _grow_box(space, scores, max_grow)
    for _ in range(max_grow + 1):
        best, batches, rows = _separate(space, scores, skus, max_skus, separation)
        # two steps at a time: the best is near already, and every point of the box is a
        # contender of the next separation
        if not _widen(space, best, step=2):
            break
    return best, batches, rows


def tune_uniform(name: str, catalog: Catalog, sim_cfg: SimConfig, *, seed: int, days: int, warmup: int,
                 skus: int = 1000, max_skus: int = 16_000, separation: float = 3.0,
                 progress: Progress | None = None) -> TuneResult:
    """Best integer parameters of baseline `name` for a uniform `catalog` (see module doc)."""
    tuning_catalog = uniform_copies(catalog, skus)
    scorer = CandidateScorer(name, tuning_catalog, sim_cfg, seed=seed, days=days, warmup=warmup)
    space = search_space(name, catalog, sim_cfg)
    scores = _Scores(scorer, progress)
    best, batches, rows = _search(space, scores, skus, max_skus, separation)
    chosen = space.params(best)
    assert chosen is not None
    n = len(catalog)
    runner_up = rows[1] if len(rows) > 1 else None
    return TuneResult(
        name=name, params={k: np.full(n, float(v)) for k, v in chosen.items()},
        method="uniform-exhaustive", seed=seed, days=days, warmup=warmup, runs=scorer.runs,
        sku_days=scorer.sku_days, objective=rows[0]["objective"],
        details={"box": {a.name: [a.value(a.lo), a.value(a.hi)] for a in space.axes},
                 "final_skus": batches * skus, "runner_up": runner_up,
                 "candidates": len({key for key, _ in scores.cache})},
        objective_is=objective_is(sim_cfg),
    )
