"""State cloning (VectorEnv.clone, sim/clone.py): a clone replays its source row's future
exactly, clones under different orders see the same demand, replications (other episodes)
agree with the scalar reference's clones, and cloning is shard-invariant."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skurl.config import SimConfig
from skurl.sim import VectorEnv
from skurl.sim.api import EnvStateError
from skurl.sim.layout import catalog_widths
from skurl.sim.reference import ReferenceSim
from skurl.sim.state import METRIC_FIELDS
from skurl.sim.testing import order_up_to, random_catalog

RAW_FIELDS = ("on_hand", "pipeline", "backlog", "forecast")


def _orders(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.integers(0, 25, n) * (rng.random(n) < 0.6) + rng.random(n) * (rng.random(n) < 0.3)


def _same_day(a_obs, a_res, b_obs, b_reward, b_metrics, where: str) -> None:
    """Features, raw state, reward and every metric of two envs' days agree exactly."""
    np.testing.assert_array_equal(a_obs.features, b_obs.features, err_msg=f"{where}: features")
    for name in RAW_FIELDS:
        np.testing.assert_array_equal(getattr(a_obs.raw, name), getattr(b_obs.raw, name),
                                      err_msg=f"{where}: {name}")
    assert a_obs.raw.day == b_obs.raw.day
    if a_res is None:
        return
    np.testing.assert_array_equal(a_res.reward, b_reward, err_msg=f"{where}: reward")
    for name in METRIC_FIELDS:
        np.testing.assert_array_equal(getattr(a_res.metrics, name), b_metrics[name],
                                      err_msg=f"{where}: {name}")


def _run(env, rng: np.random.Generator, days: int):
    obs = None
    for _ in range(days):
        obs = env.step(_orders(rng, env.num_skus)).obs
    return obs


@pytest.mark.parametrize("backorders,lifo,review,cost", [(False, False, 1, True), (True, True, 2, False),
                                                         (False, True, 3, False)])
def test_clone_replays_the_source_rows(backorders: bool, lifo: bool, review: int, cost: bool) -> None:
    catalog = random_catalog(14, 5, group_share=0.0)
    cfg = SimConfig(days=20, backorders=backorders, issuing="lifo" if lifo else "fifo", review_days=review,
                    reward="cost" if cost else "profit", threads=1)
    env = VectorEnv(catalog, cfg)
    env.reset(seed=11, episode=2)
    rng = np.random.default_rng(0)
    obs = _run(env, rng, 6)
    rows = np.array([3, 3, 0, 13, 7, 3])
    clone = env.clone(rows)
    cobs = clone.observe()
    np.testing.assert_array_equal(cobs.features, obs.features[rows])
    assert clone.day == env.day == 6 and clone.schema == env.schema
    for day in range(6, 20):
        orders = _orders(rng, env.num_skus)
        res, cres = env.step(orders), clone.step(orders[rows])
        metrics = {name: getattr(res.metrics, name)[rows] for name in METRIC_FIELDS}
        sliced = type(res.obs)(res.obs.features[rows], type(res.obs.raw)(
            *(getattr(res.obs.raw, name)[rows] for name in RAW_FIELDS), res.obs.raw.day), res.obs.schema)
        _same_day(cres.obs, cres, sliced, res.reward[rows], metrics, f"day {day}")
        assert cres.done == res.done
    totals, ctotals = env.totals(), clone.totals()
    assert not np.array_equal(totals["reward"][rows], ctotals["reward"])  # clone totals start at day 6


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(1, 10),
    catalog_seed=st.integers(0, 10_000),
    run_seed=st.integers(0, 2**40),
    before=st.integers(0, 8),
    after=st.integers(1, 10),
    backorders=st.booleans(),
    substitution=st.booleans(),
    replicate=st.booleans(),
    review=st.integers(1, 3),
)
def test_clone_matches_the_reference_clone(n: int, catalog_seed: int, run_seed: int, before: int,
                                           after: int, backorders: bool, substitution: bool,
                                           replicate: bool, review: int) -> None:
    catalog = random_catalog(n, catalog_seed)
    cfg = SimConfig(days=before + 1, backorders=backorders, substitution=substitution,
                    review_days=review, threads=1)
    env, ref = VectorEnv(catalog, cfg), ReferenceSim(catalog, cfg)
    env.reset(run_seed, 1)
    ref.reset(run_seed, 1)
    rng = np.random.default_rng(catalog_seed)
    for _ in range(before):
        orders = _orders(rng, n)
        env.step(orders)
        ref.step(orders)
    rows = rng.integers(0, n, 2 * n)
    episodes = rng.integers(0, 4, rows.size) if replicate else None
    days = before + after
    clone = env.clone(rows, episodes=episodes, seed=run_seed + 1 if replicate else None, days=days)
    rclone = ref.clone(list(rows), None if episodes is None else list(episodes),
                       run_seed + 1 if replicate else None, days)
    _same_day(clone.observe(), None, rclone._obs(), None, None, f"day {before}")
    for day in range(before, days):
        orders = _orders(rng, rows.size)
        res = clone.step(orders)
        want, reward, done, metrics = rclone.step(orders)
        _same_day(res.obs, res, want, reward, metrics, f"day {day}")
        assert res.done == done == (day == days - 1)


def test_clones_under_different_first_orders_see_the_same_demand() -> None:
    catalog = random_catalog(9, 3, group_share=0.0)
    cfg = SimConfig(days=40, threads=1)
    env = VectorEnv(catalog, cfg)
    env.reset(seed=4, episode=0)
    _run(env, np.random.default_rng(1), 10)
    copies = 5
    rows = np.repeat(np.arange(9), copies)
    first = np.tile(np.arange(copies) * 7.0, 9)
    lead = catalog.lead_time[rows].astype(np.int64)
    for episodes in (None, np.full(rows.size, 3)):
        clone = env.clone(rows, episodes=episodes)
        res = clone.step(first)
        demand = [res.metrics.demand.copy()]
        orders = np.empty(rows.size)
        while not res.done:
            raw = res.obs.raw
            res = clone.step(order_up_to(raw.on_hand, raw.pipeline, raw.backlog, raw.forecast, lead, orders))
            demand.append(res.metrics.demand.copy())
        d = np.array(demand).reshape(len(demand), 9, copies)
        assert (d == d[:, :, :1]).all()  # common random numbers across the first orders
        on_hand = clone.totals()["on_hand_end"].reshape(9, copies)
        assert (on_hand != on_hand[:, :1]).any()  # the first orders did change the trajectories
        if episodes is None:
            replay = d
    assert not np.array_equal(d, replay)  # another episode: another future


def test_clone_is_shard_invariant() -> None:
    catalog = random_catalog(30, 8, group_share=0.0)
    cfg = SimConfig(days=25, threads=1)
    shard = np.array([4, 17, 9, 22, 0])
    whole = VectorEnv(catalog, cfg)
    part = VectorEnv(catalog.subset(shard), cfg, catalog_widths(catalog))
    whole.reset(seed=3)
    part.reset(seed=3)
    rng = np.random.default_rng(2)
    for _ in range(5):
        orders = _orders(rng, 30)
        whole.step(orders)
        part.step(orders[shard])
    rows = np.array([1, 1, 3, 0])
    episodes = np.array([0, 5, 5, 9])
    a = whole.clone(shard[rows], episodes=episodes)
    b = part.clone(rows, episodes=episodes)
    for _ in range(5, 25):
        orders = _orders(rng, rows.size)
        ra, rb = a.step(orders), b.step(orders)
        np.testing.assert_array_equal(ra.obs.features, rb.obs.features)
        np.testing.assert_array_equal(ra.reward, rb.reward)


def test_clone_rejects_bad_calls() -> None:
    env = VectorEnv(random_catalog(3, 1), SimConfig(days=5, threads=1))
    with pytest.raises(EnvStateError, match="reset"):
        env.clone(np.array([0]))
    env.reset(seed=0)
    for rows in (np.array([3]), np.array([], np.int64), np.array([[0]])):
        with pytest.raises(ValueError, match="rows"):
            env.clone(rows)
    with pytest.raises(ValueError, match="episodes"):
        env.clone(np.array([0, 1]), episodes=np.array([0]))
    with pytest.raises(EnvStateError, match="days"):
        env.clone(np.array([0]), days=0)
