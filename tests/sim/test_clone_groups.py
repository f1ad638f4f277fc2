"""Whole-group clones (VectorEnv.clone whole_groups=True, sim/clone.py): a clone of a row in
a substitution group brings its group along and replays the source rows bit for bit, members
included; a clone simulated alone does not (the negative control)."""

from __future__ import annotations

import numpy as np
import pytest

from skurl.config import SimConfig
from skurl.sim import VectorEnv
from skurl.sim.clone import clone_keys
from skurl.sim.state import METRIC_FIELDS, S_KEY
from skurl.sim.testing import random_catalog


def _orders(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.integers(0, 12, n) * (rng.random(n) < 0.7) + rng.random(n) * (rng.random(n) < 0.3)


def _started(n: int = 24, days: int = 30, backorders: bool = False) -> tuple[VectorEnv, np.random.Generator]:
    catalog = random_catalog(n, 17, group_share=0.7)
    env = VectorEnv(catalog, SimConfig(days=days, backorders=backorders, threads=1))
    env.reset(seed=5, episode=1)
    rng = np.random.default_rng(3)
    for _ in range(6):
        env.step(_orders(rng, n))
    return env, rng


def _day(res, rows: np.ndarray) -> dict[str, np.ndarray]:
    out = {"features": res.obs.features[rows], "on_hand": res.obs.raw.on_hand[rows],
           "pipeline": res.obs.raw.pipeline[rows], "reward": res.reward[rows]}
    out.update({name: getattr(res.metrics, name)[rows] for name in METRIC_FIELDS})
    return {k: np.array(v) for k, v in out.items()}


def _replay(env: VectorEnv, clone: VectorEnv, src: np.ndarray, rows: np.ndarray,
            rng: np.random.Generator) -> list[str]:
    """Step both with the same orders to the end; the fields where clone rows `rows` ever
    differ from the source rows src[rows]."""
    differ: set[str] = set()
    while not env.done:
        orders = _orders(rng, env.num_skus)
        want, got = _day(env.step(orders), src[rows]), _day(clone.step(orders[src]), rows)
        differ |= {k for k in want if not np.array_equal(want[k], got[k])}
    return sorted(differ)


@pytest.mark.parametrize("backorders", [False, True])
def test_whole_group_clone_replays_the_group(backorders: bool) -> None:
    env, rng = _started(backorders=backorders)
    grouped = np.flatnonzero(env.catalog.group >= 0)
    rows = np.array([grouped[0], 0, grouped[3], grouped[0], grouped[-1]])
    clone = env.clone(rows, whole_groups=True)
    ex = clone.cloned
    assert ex is not None
    np.testing.assert_array_equal(ex.src[ex.heads], rows)
    members = np.flatnonzero(env.catalog.group == env.catalog.group[grouped[0]])
    assert set(ex.src[ex.owner == 0]) == set(members) and members.size > 1
    np.testing.assert_array_equal(clone.observe().features, env.observe().features[ex.src])
    assert _replay(env, clone, ex.src, np.arange(ex.src.size), rng) == []


def test_clones_of_one_group_are_separate_groups() -> None:
    env, rng = _started()
    g = int(env.catalog.group[np.flatnonzero(env.catalog.group >= 0)[0]])
    row = int(np.flatnonzero(env.catalog.group == g)[0])
    clone = env.clone(np.array([row, row]), whole_groups=True)
    ex = clone.cloned
    assert ex is not None
    second = np.flatnonzero(ex.owner == 1)
    # the first copy's head orders a lot more than the source; the second copy must not notice
    differ = set()
    while not env.done:
        orders = _orders(rng, env.num_skus)
        cloned = orders[ex.src]
        cloned[ex.heads[0]] += 40.0
        want, got = _day(env.step(orders), ex.src[second]), _day(clone.step(cloned), second)
        differ |= {k for k in want if not np.array_equal(want[k], got[k])}
    assert differ == set()


def test_standalone_clone_of_a_grouped_row_differs() -> None:
    """The negative control: without its group, a grouped row's clone sees another future."""
    env, rng = _started(n=40)
    grouped = np.flatnonzero(env.catalog.group >= 0)
    alone = np.flatnonzero(env.catalog.group < 0)
    clone = env.clone(grouped)
    ex = clone.cloned
    assert ex is not None and ex.src.size == grouped.size
    assert "sales" in _replay(env, clone, grouped, np.arange(grouped.size), rng)
    env2, rng2 = _started(n=40)
    assert _replay(env2, env2.clone(alone), alone, np.arange(alone.size), rng2) == []


def test_whole_group_replications_use_each_members_own_keys() -> None:
    env, _ = _started()
    rows = np.flatnonzero(env.catalog.group >= 0)[:4]
    episodes = np.array([7, 8, 8, 9])
    clone = env.clone(rows, episodes=episodes, seed=11, whole_groups=True)
    ex = clone.cloned
    assert ex is not None
    want = clone_keys(np.zeros(ex.src.size, np.int64), env.catalog.sku_id[ex.src], 11, episodes[ex.owner])
    np.testing.assert_array_equal(clone._state.st[:, S_KEY], want)
    again = env.clone(rows, episodes=episodes, seed=11, whole_groups=True)
    orders = np.full(ex.src.size, 3.0)
    for _ in range(5):
        a, b = clone.step(orders), again.step(orders)
        np.testing.assert_array_equal(a.reward, b.reward)


def test_whole_groups_without_substitution_clones_rows_alone() -> None:
    catalog = random_catalog(12, 4, group_share=0.7)
    env = VectorEnv(catalog, SimConfig(days=10, substitution=False, threads=1))
    env.reset(seed=0)
    clone = env.clone(np.array([0, 5]), whole_groups=True)
    assert clone.num_skus == 2 and clone.cloned is not None
