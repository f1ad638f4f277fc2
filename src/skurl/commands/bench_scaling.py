"""`skurl bench modes --ray-workers 1,2,4`: Ray's throughput per worker count (W simulator
workers and W collectors each), and a projection to more workers than the machine has:
strong scaling of one iteration of the same catalog, where collection divides over the
workers and the learner does not,

    t(W) = collect(1) / W + learner,

with learner the 1-worker run's learn + sync seconds per iteration and collect(1) the rest
of its iteration. The learner is the limit from W* = collect(1) / learner on.
More: docs/modes.md (Scaling Ray)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypedDict


class Scaling(TypedDict):
    """What `scaling` returns (printed by print_scaling, or as JSON)."""

    table: list[dict[str, float]]
    projection: list[dict[str, float]]
    collect_1_worker_s: float
    learner_s: float
    learner_limit_workers: float

PROJECTED = (8, 64, 512)
SERIAL_STAGES = ("learn", "sync")  # the learner's: not divided over workers


def parse_workers(text: str) -> list[int]:
    """'1,2,4' -> [1, 2, 4]; ValueError naming what is expected."""
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1 or len(set(counts)) != len(counts):
        raise ValueError(f"--ray-workers {text!r}, expected distinct integers >= 1, e.g. 1,2,4")
    return sorted(counts)


def ray_settings(workers: int) -> list[str]:
    """--set values of one count: W workers, W collectors, W + 1 Ray CPUs (one per pair and
    one left for tasks; a logical count: more than the machine's cores oversubscribes them)."""
    return [f"ray.num_workers={workers}", f"ray.collectors={workers}", f"ray.num_cpus={workers + 1}",
            "ray.cpus_per_worker=0.5", "ray.cpus_per_collector=0.5"]


def split_iteration(run: Mapping[str, object]) -> tuple[float, float]:
    """(collection seconds, the learner's seconds) of a run's mean iteration: the learner's
    stages, and everything else (untimed work included, so the projection is optimistic)."""
    stages = run["stages_s"]
    if not isinstance(stages, dict):
        raise TypeError("stages_s: expected a dict of stage -> seconds")
    serial = float(sum(v for k, v in stages.items() if k in SERIAL_STAGES))
    return max(_number(run, "seconds_per_iteration") - serial, 0.0), serial


def _number(run: Mapping[str, object], key: str) -> float:
    value = run[key]
    if not isinstance(value, (int, float)):
        raise TypeError(f"{key}: expected a number, got {value!r}")
    return float(value)


def scaling(runs: Mapping[int, Mapping[str, object]]) -> Scaling:
    """The table (per measured count: transitions/s, speed-up and efficiency against 1
    worker, collection and learner seconds) and the projection (see the module docstring).
    `runs`: worker count -> that run's bench modes summary; it must hold 1."""
    if 1 not in runs:
        raise ValueError("--ray-workers must include 1 (the reference of the speed-up and the projection)")
    base = runs[1]
    collect1, serial = split_iteration(base)
    base_rate = _number(base, "transitions_per_s")
    per_iteration = base_rate * _number(base, "seconds_per_iteration")
    table: list[dict[str, float]] = []
    for w, r in sorted(runs.items()):
        collect, learner = split_iteration(r)
        speedup = _number(r, "transitions_per_s") / base_rate
        table.append({"workers": w, "transitions_per_s": _number(r, "transitions_per_s"), "speedup": round(speedup, 3),
                      "efficiency": round(speedup / w, 3), "collect_s": round(collect, 4),
                      "learner_s": round(learner, 4), "seconds_per_iteration": _number(r, "seconds_per_iteration")})
    projection: list[dict[str, float]] = []
    for w in sorted({*PROJECTED, *runs}):
        t = collect1 / w + serial
        projection.append({"workers": w, "seconds_per_iteration": round(t, 4),
                           "transitions_per_s": round(per_iteration / t, 1),
                           "learner_share": round(serial / t, 3)})
    limit = collect1 / serial if serial > 0 else float("inf")
    return {"table": table, "projection": projection, "collect_1_worker_s": round(collect1, 4),
            "learner_s": round(serial, 4), "learner_limit_workers": round(limit, 1)}


def print_scaling(out: Scaling) -> None:
    print("workers  transitions/s  speed-up  efficiency  collect s  learner s")
    for r in out["table"]:
        print(f"{r['workers']:>7}  {r['transitions_per_s']:>13,.0f}  x{r['speedup']:<7.2f}  {r['efficiency']:>10.2f}"
              f"  {r['collect_s']:>9.2f}  {r['learner_s']:>9.2f}")
    print(f"projection t(W) = {out['collect_1_worker_s']:.2f} / W + {out['learner_s']:.2f} s:")
    for r in out["projection"]:
        print(f"{r['workers']:>7}  {r['seconds_per_iteration']:>8.2f} s/iteration  {r['transitions_per_s']:>13,.0f}"
              f" transitions/s  learner {100 * r['learner_share']:.0f}%")
    print(f"the learner is the limit from about {out['learner_limit_workers']:g} workers on")
