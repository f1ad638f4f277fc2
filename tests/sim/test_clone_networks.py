"""Clones on supply networks (VectorEnv.clone whole_groups=True, sim/clone.network_expansion):
a clone of any row brings its whole network (DC and stores) as a network of the clone env's
own, with the same state and random keys, so under the same orders it replays the source
rows bit for bit every day (features, raw state, owed units, rewards, metrics); a clone
simulated alone is refused (a store without its DC is another system)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from skurl.catalog import load_catalog
from skurl.config import SimConfig, TransfersConfig, load_config
from skurl.policy.baselines import make_policy
from skurl.policy.rollout_q import RolloutSpec, baseline_rollout, rollout_returns
from skurl.sim import VectorEnv
from skurl.sim.api import EnvStateError
from skurl.sim.state import METRIC_FIELDS
from skurl.sim.testing import random_network_catalog


def _dc():
    cfg = load_config(None, ["catalog.skus=60", "catalog.synthetic.network=dc", "sim.backorders=false",
                             "sim.substitution=false"])
    return load_catalog(cfg.catalog), dataclasses.replace(cfg.sim, days=30, threads=1)


def _serial():
    cfg = load_config(None, ["catalog.kind=serial", "catalog.skus=8", "catalog.serial.lead_times=[0,2,1]",
                             "catalog.serial.holding=[3.0,2.0,1.0]", "sim.backorders=true"])
    return load_catalog(cfg.catalog), dataclasses.replace(cfg.sim, days=30, threads=1)


def _random():  # deeper trees, lone rows, cancelled shortages, fair allocation, transfers
    sim = SimConfig(days=30, threads=1, upstream_allocation="fair", upstream_shortage="cancel",
                    network_reward="location", transfers=TransfersConfig(enabled=True, lead_time=1))
    return random_network_catalog(40, 7), sim


CATALOGS = {"dc": _dc, "serial": _serial, "random": _random}


def _orders(rng: np.random.Generator, means: np.ndarray) -> np.ndarray:
    return rng.poisson(2.0 * means) * (rng.random(means.size) < 0.8) + rng.random(means.size) * 0.6


def _started(kind: str) -> tuple[VectorEnv, np.random.Generator]:
    catalog, sim = CATALOGS[kind]()
    env = VectorEnv(catalog, sim)
    env.reset(seed=4, episode=2)
    rng = np.random.default_rng(9)
    for _ in range(7):
        env.step(_orders(rng, catalog.demand_mean))
    return env, rng


def _day(res, rows: np.ndarray) -> dict[str, np.ndarray]:
    raw = res.obs.raw
    out = {"features": res.obs.features[rows], "on_hand": raw.on_hand[rows], "pipeline": raw.pipeline[rows],
           "backlog": raw.backlog[rows], "owed": raw.owed[rows], "reward": res.reward[rows],
           "failed": res.failed[rows]}
    out.update({name: getattr(res.metrics, name)[rows] for name in METRIC_FIELDS})
    return {k: np.array(v) for k, v in out.items()}


def _replay(env: VectorEnv, clone: VectorEnv, rng: np.random.Generator) -> list[str]:
    """Step both with the same orders to the end; the fields where a clone row ever differs
    from its source row."""
    ex = clone.cloned
    assert ex is not None
    differ: set[str] = set()
    days = 0
    while not env.done:
        orders = _orders(rng, env.catalog.demand_mean)
        want, got = _day(env.step(orders), ex.src), _day(clone.step(orders[ex.src]), np.arange(ex.src.size))
        differ |= {k for k in want if not np.array_equal(want[k], got[k])}
        days += 1
    assert days > 20
    return sorted(differ)


def _network_rows(env: VectorEnv, row: int) -> set[int]:
    net = env._net
    assert net is not None
    k = int(np.searchsorted(net.net_start, np.flatnonzero(net.net_rows == row)[0], side="right")) - 1
    return set(net.net_rows[net.net_start[k]:net.net_start[k + 1]].tolist())


@pytest.mark.parametrize("kind", sorted(CATALOGS))
def test_network_clone_replays_the_networks(kind: str) -> None:
    env, rng = _started(kind)
    stores = np.flatnonzero(np.diff(env._net.child_start) == 0)
    uppers = np.flatnonzero(np.diff(env._net.child_start) > 0)
    rows = np.array([stores[0], uppers[0], stores[-1], stores[0], uppers[-1]])  # a store twice
    clone = env.clone(rows, whole_groups=True)
    ex = clone.cloned
    assert ex is not None and ex.parent is not None
    np.testing.assert_array_equal(ex.src[ex.heads], rows)
    for j, row in enumerate(rows):  # each clone brings its whole network: the DC and the siblings
        assert set(ex.src[ex.owner == j].tolist()) == _network_rows(env, int(row))
    linked = ex.parent >= 0  # the clone's upstreams are the clone rows of the source's upstreams
    np.testing.assert_array_equal(ex.src[ex.parent[linked]], env._net.parent[ex.src[linked]])
    np.testing.assert_array_equal(ex.owner[ex.parent[linked]], ex.owner[linked])
    assert (env._net.parent[ex.src[~linked]] == -1).all()
    np.testing.assert_array_equal(clone.observe().raw.owed, env.observe().raw.owed[ex.src])
    assert clone.observe().raw.owed.any() or kind == "random"  # random: shortages cancelled, nothing owed
    assert _replay(env, clone, rng) == []


def test_a_store_clone_brings_its_dc_and_siblings() -> None:
    env, _ = _started("dc")
    net = env._net
    store = int(np.flatnonzero((net.parent >= 0) & (np.diff(net.child_start) == 0))[0])
    dc = int(net.parent[store])
    siblings = net.child_rows[net.child_start[dc]:net.child_start[dc + 1]]
    assert siblings.size >= 2
    ex = env.clone(np.array([store]), whole_groups=True).cloned
    assert ex is not None
    assert ex.src.tolist() == [dc, *sorted(siblings.tolist(), key=lambda r: env.catalog.sku_id[r])]
    assert ex.src[ex.heads[0]] == store and ex.parent.tolist() == [-1] + [0] * siblings.size


def test_copies_of_one_network_are_separate_networks() -> None:
    env, rng = _started("dc")
    row = int(np.flatnonzero(np.diff(env._net.child_start) == 0)[0])
    clone = env.clone(np.array([row, row]), whole_groups=True)
    ex = clone.cloned
    assert ex is not None
    second = np.flatnonzero(ex.owner == 1)
    differ = set()
    while not env.done:  # the first copy's store orders far more; the second copy must not notice
        orders = _orders(rng, env.catalog.demand_mean)
        cloned = orders[ex.src]
        cloned[ex.heads[0]] += 500.0
        want, got = _day(env.step(orders), ex.src[second]), _day(clone.step(cloned), second)
        differ |= {k for k in want if not np.array_equal(want[k], got[k])}
    assert differ == set()


def test_replications_are_reproducible_and_differ_by_episode() -> None:
    env, _ = _started("dc")
    rows = np.flatnonzero(np.diff(env._net.child_start) == 0)[:3]
    rows = np.concatenate([rows, rows])
    episodes = np.array([5, 5, 5, 6, 6, 6])
    a = env.clone(rows, episodes=episodes, seed=11, whole_groups=True)
    b = env.clone(rows, episodes=episodes, seed=11, whole_groups=True)
    ex = a.cloned
    assert ex is not None
    orders = np.ones(ex.src.size)
    demand = []
    for _ in range(8):
        ra, rb = a.step(orders), b.step(orders)
        np.testing.assert_array_equal(ra.reward, rb.reward)
        demand.append(np.array(ra.metrics.demand))
    demand = np.array(demand)
    first, second = ex.owner < 3, ex.owner >= 3
    assert not np.array_equal(demand[:, first], demand[:, second])


def test_the_rollout_of_the_policys_own_order_is_the_policys_future() -> None:
    """rollout_returns on a network: the sampled row takes the first order, its network's
    other rows follow the rollout policy (echelon base-stock on the clone's topology); with
    the policy's own order on the env's own episode, that is the env's future bit for bit."""
    env, _ = _started("serial")
    policy = make_policy("echelon-base-stock", env.catalog, env.cfg)
    obs = env.observe()
    rows = np.array([0, 4, 7, 7])
    first = policy.orders(obs)[rows]
    horizon = 6
    spec_days = env.day + horizon
    got, row_days = rollout_returns(env, rows, first, np.full(rows.size, env._episode), baseline_rollout(policy),
                                    RolloutSpec(horizon=horizon, budget=1))
    cloned = env.clone(rows, whole_groups=True).cloned
    assert cloned is not None and row_days == cloned.src.size * horizon > rows.size * horizon  # whole networks
    want = np.zeros(rows.size)
    while env.day < spec_days:
        want += env.step(policy.orders(obs)).reward[rows]
        obs = env.observe()
    np.testing.assert_array_equal(got, want)


def test_a_network_row_alone_is_refused() -> None:
    env, _ = _started("dc")
    with pytest.raises(EnvStateError, match="whole_groups=True"):
        env.clone(np.array([0]))
