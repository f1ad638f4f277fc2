"""Q(s, a) by rollouts with common random numbers, for approximate policy iteration.

For each sampled state s (a row of an env, today) and each candidate first order a, clones
of s (VectorEnv.clone) place a, then follow a rollout policy for the rest of H days; the
estimate is the mean H-day reward over replications. Replication j of every action of a
state replays the same future (episode `episode_base + j` of that SKU's random streams), so
action differences are not drowned in demand noise: that pairing is what makes Deep
Controlled Learning work (Temizöz et al., EJOR 2025), where PPO's advantages are mostly
noise. The budget (rollouts per state) is spent by sequential halving (Karnin, Koren &
Somekh, "Almost optimal exploration in multi-armed bandits", ICML 2013): ceil(log2 A)
rounds, each giving its surviving actions an equal share and keeping the better half.
All rollouts of a round are one env: one policy call and one kernel step per day."""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from skurl.policy.actions import ActionGrid, clip_orders
from skurl.policy.api import Policy
from skurl.policy.network_baselines import Topology
from skurl.sim.api import RawState
from skurl.sim.clone import Expansion
from skurl.sim.env import VectorEnv

if TYPE_CHECKING:
    from skurl.policy.learned import LearnedPolicy

_UNPAIRED_STRIDE = 1 << 32  # RolloutSpec.common=False: action a replays episodes from (a + 1) << 32
RolloutPolicy = Callable[[Expansion], Policy]
"""Given the rows of a clone env (sim/clone.Expansion: each row's source row, and on supply
networks its upstream among them), a Policy over those rows."""


@dataclass(frozen=True)
class RolloutSpec:
    """How Q is estimated."""

    horizon: int  # H: days per rollout, the fixed first day included
    budget: int  # rollouts per state over all halving rounds
    episode_base: int = 0  # replication j replays episode episode_base + j of each SKU
    seed: int | None = None  # run seed of the replications (default: the env's)
    gamma: float = 1.0  # discount per day within a rollout
    common: bool = True  # False: every action gets futures of its own (an ablation of the pairing)

    def __post_init__(self) -> None:
        if self.horizon < 1 or self.budget < 1 or self.episode_base < 0 or not 0.0 < self.gamma <= 1.0:
            raise ValueError(f"RolloutSpec: horizon {self.horizon} and budget {self.budget} must be >= 1, "
                             f"episode_base {self.episode_base} >= 0, gamma {self.gamma} in (0, 1]")


@dataclass
class QEstimate:
    """Estimates for S states x A candidate actions (actions dropped by the halving keep the
    mean of the replications they had, all shared with the survivors)."""

    q: np.ndarray  # float64 [S, A]: mean discounted H-day reward over the action's replications
    q_first: np.ndarray  # float64 [S, A]: the same over the first round's replications, which
    # every action shares (paired across all actions; q pairs an action only with those that
    # lasted as long)
    se: np.ndarray  # float64 [S, A]: its standard error (nan with one replication)
    reps: np.ndarray  # int64 [S, A]: replications of each action
    best: np.ndarray  # int64 [S]: the action left after the last round
    sku_days: int  # rollout SKU-days simulated: the states' own rows over their horizons
    row_days: int  # clone row-days the simulator stepped: a grouped state's group (a network
    # state's network) rides along, and every clone of a round runs the round's longest horizon


def halving_schedule(actions: int, budget: int) -> list[tuple[int, int]]:
    """[(survivors, new replications per survivor)] per round: ceil(log2 A) rounds (one when
    A = 1), each with budget // (survivors x rounds) replications, at least one."""
    rounds = max(1, math.ceil(math.log2(actions))) if actions > 1 else 1
    out, alive = [], actions
    for _ in range(rounds):
        out.append((alive, max(1, budget // (alive * rounds))))
        alive = max(1, math.ceil(alive / 2))
    return out


class _Moments:
    """Running sums of the replication returns per (state, action)."""

    def __init__(self, states: int, actions: int) -> None:
        self.n = np.zeros((states, actions), np.int64)
        self.sum = np.zeros((states, actions))
        self.sq = np.zeros((states, actions))

    def add(self, alive: np.ndarray, returns: np.ndarray) -> None:
        """returns [S, K, n] for the surviving actions alive [S, K]."""
        s = np.arange(alive.shape[0])[:, None]
        self.n[s, alive] += returns.shape[2]
        self.sum[s, alive] += returns.sum(axis=2)
        self.sq[s, alive] += np.square(returns).sum(axis=2)

    def estimate(self) -> tuple[np.ndarray, np.ndarray]:
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = self.sum / self.n
            var = (self.sq - self.n * mean * mean) / (self.n - 1)
            return mean, np.sqrt(np.maximum(var, 0.0) / self.n)


def rollout_returns(env: VectorEnv, src_rows: np.ndarray, first: np.ndarray, episodes: np.ndarray,
                    policy: RolloutPolicy, spec: RolloutSpec, horizons: np.ndarray | None = None
                    ) -> tuple[np.ndarray, int]:
    """Discounted reward (float64 [M]) over the first horizons[m] days (default spec.horizon)
    of clones of env rows src_rows [M] that order first [M] today, then follow `policy`;
    clone m replays episode episodes[m]; and the clone row-days stepped. A grouped row is
    cloned with its substitution group, a network row with its whole network (VectorEnv.clone
    whole_groups), whose other rows follow `policy` from today on."""
    days = spec.horizon if horizons is None else int(horizons.max())
    clones = env.clone(src_rows, episodes=episodes, seed=spec.seed, days=env.day + days, whole_groups=True)
    ex = clones.cloned
    assert ex is not None
    rollout = policy(ex)
    heads = ex.heads
    if ex.src.size == heads.size:  # nothing grouped: the clones are the heads
        orders = first
    else:  # the members order as the policy would today
        orders = np.array(rollout.orders(clones.observe()), dtype=np.float64)
        orders[heads] = first
    total = np.zeros(src_rows.shape[0])
    res = clones.step(orders)
    discount, day = 1.0, 1
    total += res.reward[heads]
    while not res.done:
        discount *= spec.gamma
        res = clones.step(rollout.orders(res.obs))
        if horizons is None:
            total += discount * res.reward[heads]
        else:  # a row's reward counts while its own horizon lasts
            total += np.where(horizons > day, discount * res.reward[heads], 0.0)
        day += 1
    return total, int(ex.src.size) * days


def estimate_q(env: VectorEnv, rows: np.ndarray, first_orders: np.ndarray, policy: RolloutPolicy,
               spec: RolloutSpec, horizons: np.ndarray | None = None) -> QEstimate:
    """Q of first orders first_orders [S, A] (units) in the states of env rows `rows` [S]
    today (see the module docstring); reward as the env counts it (-cost in cost mode).
    `horizons` (int [S]): each state's own rollout days in place of spec.horizon, all
    states rolled out together (a row's reward counts over its own days only)."""
    rows = np.asarray(rows, dtype=np.int64)
    first_orders = np.asarray(first_orders, dtype=np.float64)
    if first_orders.ndim != 2 or first_orders.shape[0] != rows.shape[0]:
        raise ValueError(f"first_orders: shape {first_orders.shape}, expected ({rows.shape[0]}, actions)")
    states, actions = first_orders.shape
    moments = _Moments(states, actions)
    alive = np.tile(np.arange(actions), (states, 1))
    done, sku_days, row_days = 0, 0, 0
    for survivors, reps in halving_schedule(actions, spec.budget):
        alive = alive[:, :survivors]
        shape = (states, survivors, reps)
        src = np.broadcast_to(rows[:, None, None], shape).ravel()
        first = np.broadcast_to(np.take_along_axis(first_orders, alive, axis=1)[:, :, None], shape).ravel()
        episodes = spec.episode_base + done + np.arange(reps)[None, None, :]
        if not spec.common:  # disjoint blocks of episodes per action
            episodes = episodes + (alive[:, :, None] + 1) * _UNPAIRED_STRIDE
        episodes = np.broadcast_to(episodes, shape).ravel()
        hor = None if horizons is None else np.broadcast_to(horizons[:, None, None], shape).ravel()
        returns, stepped = rollout_returns(env, src, first, episodes, policy, spec, hor)
        returns = returns.reshape(shape)
        row_days += stepped
        moments.add(alive, returns)
        done += reps
        sku_days += src.shape[0] * spec.horizon if hor is None else int(hor.sum())
        mean, _ = moments.estimate()
        if done == reps:
            q_first = mean.copy()
        # Stable: among equal means the lower index (the earlier candidate) stays ahead.
        order = np.argsort(-np.take_along_axis(mean, alive, axis=1), axis=1, kind="stable")
        alive = np.take_along_axis(alive, order, axis=1)
    mean, se = moments.estimate()
    return QEstimate(mean, q_first, se, moments.n, alive[:, 0].copy(), sku_days, row_days)


def baseline_rollout(policy: Policy) -> RolloutPolicy:
    """A baseline (a dataclass of per-SKU arrays over the env's rows, policy/baselines.py)
    as a rollout policy: each array taken at the clones' source rows."""
    if not dataclasses.is_dataclass(policy):
        raise TypeError(f"baseline_rollout: {type(policy).__name__} is not a dataclass baseline")

    def for_rows(ex: Expansion) -> Policy:
        arrays = {f.name: getattr(policy, f.name)[ex.src] for f in dataclasses.fields(policy)
                  if isinstance(getattr(policy, f.name), np.ndarray)}
        topo = {f.name: _topology(getattr(policy, f.name), ex) for f in dataclasses.fields(policy)
                if isinstance(getattr(policy, f.name), Topology)}
        return dataclasses.replace(policy, **arrays, **topo)

    return for_rows


def learned_rollout(policy: LearnedPolicy) -> RolloutPolicy:
    """A greedy trained policy over the env's rows as a rollout policy (its network shared,
    its action grid taken at the clones' source rows)."""
    if policy.sample:
        raise ValueError("learned_rollout: a sampling policy draws noise per SKU row; expected sample=False")

    def for_rows(ex: Expansion) -> Policy:
        out = copy.copy(policy)
        out.grid = grid_rows(policy.grid, ex.src, ex.parent)
        out.sku_ids = None
        return out

    return for_rows


def _topology(topo: Topology, ex: Expansion) -> Topology:
    if ex.parent is None:
        raise ValueError("baseline_rollout: a network baseline needs the clones' networks (VectorEnv.clone "
                         "on a catalog with supply networks)")
    return topo.for_clones(ex.src, ex.parent)


def grid_rows(grid: ActionGrid, rows: np.ndarray, parent: np.ndarray | None = None) -> ActionGrid:
    """`grid` for SKU rows `rows` of the SKUs it is bound to (only a bound cover grid holds
    per-SKU data); an echelon-centred grid also needs the rows' upstreams among them
    (`parent`, sim/clone.Expansion), since an echelon position sums a whole network."""
    if grid.cover is None:
        return grid
    cover = grid.cover
    taken = {f.name: getattr(cover, f.name)[rows] for f in dataclasses.fields(cover)
             if isinstance(getattr(cover, f.name), np.ndarray)}
    if cover.echelon is not None:
        if parent is None:
            raise ValueError("grid_rows: an echelon-centred grid needs the rows' upstreams (expected clones "
                             "of whole networks)")
        taken["echelon"] = cover.echelon.for_clones(rows, parent)
    return dataclasses.replace(grid, cover=dataclasses.replace(cover, **taken))


def candidate_orders(grid: ActionGrid, env: VectorEnv, rows: np.ndarray) -> np.ndarray:
    """Units (float64 [S, A]) each action of `grid` (bound to env's SKUs when it is a cover
    grid) orders today in the states of env rows `rows` [S]."""
    raw = env.observe().raw
    if grid.cover is not None and grid.cover.echelon is not None:  # positions over whole networks
        return clip_orders(grid.unit_table(raw, rows))[0]
    n, actions = rows.shape[0], grid.n
    rep = np.repeat(rows, actions)
    sub = RawState(raw.on_hand[rep], raw.pipeline[rep], raw.backlog[rep], raw.forecast[rep], raw.day)
    units, _ = grid_rows(grid, rep).orders_for(np.tile(np.arange(actions), n), sub)
    return units.reshape(n, actions)
