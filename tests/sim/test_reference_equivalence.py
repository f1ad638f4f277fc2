"""VectorEnv stepped side by side with the scalar reference simulator (sim/reference.py)
over random small catalogs and configs: every feature, raw array, reward and DayMetrics
field must agree exactly, every day."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skurl.config import SimConfig
from skurl.sim import VectorEnv
from skurl.sim.reference import ReferenceSim
from skurl.sim.state import METRIC_FIELDS
from skurl.sim.testing import random_catalog

RAW_FIELDS = ("on_hand", "pipeline", "backlog", "forecast")


def _assert_same(name: str, got: np.ndarray, want: np.ndarray, day: int, names: list[str]) -> None:
    if np.array_equal(got, want):
        return
    where = np.argwhere(got != want)[0]
    column = f" ({names[where[1]]})" if name == "features" else ""
    raise AssertionError(f"day {day}: {name}{column} differs at {tuple(where)}: "
                         f"vector {got[tuple(where)]!r} vs reference {want[tuple(where)]!r}")


def _orders(rng: np.random.Generator, obs_raw: object, n: int, style: int) -> np.ndarray:
    if style == 0:  # random integer and fractional orders, often zero
        return rng.integers(0, 25, n) * (rng.random(n) < 0.6) + rng.random(n) * (rng.random(n) < 0.3)
    # order up to ~3 days of forecast, with noise
    raw = obs_raw
    position = raw.on_hand + raw.pipeline.sum(axis=1) - raw.backlog
    return np.maximum(raw.forecast[:, :3].sum(axis=1) * rng.uniform(0.5, 2.0, n) - position, 0.0)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(1, 12),
    catalog_seed=st.integers(0, 10_000),
    run_seed=st.integers(0, 2**40),
    episode=st.integers(0, 3),
    days=st.integers(1, 16),
    backorders=st.booleans(),
    lifo=st.booleans(),
    cost=st.booleans(),
    substitution=st.booleans(),
    init_days=st.sampled_from([-1.0, 0.0, 0.5, 3.0]),
    review=st.integers(1, 3),
    style=st.integers(0, 1),
)
def test_vector_env_matches_reference(n: int, catalog_seed: int, run_seed: int, episode: int,
                                      days: int, backorders: bool, lifo: bool, cost: bool,
                                      substitution: bool, init_days: float, review: int,
                                      style: int) -> None:
    catalog = random_catalog(n, catalog_seed)
    cfg = SimConfig(days=days, backorders=backorders, issuing="lifo" if lifo else "fifo",
                    reward="cost" if cost else "profit", substitution=substitution,
                    initial_stock_days=init_days, review_days=review, threads=1)
    env, ref = VectorEnv(catalog, cfg), ReferenceSim(catalog, cfg)
    obs, want = env.reset(run_seed, episode), ref.reset(run_seed, episode)
    names = env.schema.names()
    rng = np.random.default_rng(catalog_seed)
    for day in range(days):
        _assert_same("features", obs.features, want.features, day, names)
        for name in RAW_FIELDS:
            _assert_same(name, getattr(obs.raw, name), getattr(want.raw, name), day, names)
        assert obs.raw.day == want.raw.day == day
        orders = _orders(rng, obs.raw, n, style)
        res = env.step(orders)
        want, reward, done, metrics = ref.step(orders)
        _assert_same("reward", res.reward, reward, day, names)
        for name in METRIC_FIELDS:
            _assert_same(name, getattr(res.metrics, name), metrics[name], day, names)
        assert res.done == done == (day == days - 1)
        assert not res.failed.any()
        obs = res.obs
    _assert_same("features", obs.features, want.features, days, names)
