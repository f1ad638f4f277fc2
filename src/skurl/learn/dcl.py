"""Deep Controlled Learning: approximate policy iteration with common-random-number rollouts.

Temizöz, Imdahl, Dijkman, Lamghari-Idrissi & van Jaarsveld (EJOR 2025), "Deep Controlled
Learning for inventory control". One iteration improves a policy pi_k:

More: docs/internals.md (learn/dcl.py)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch

from skurl.buffer.minibatch import seeded_generator
from skurl.learn.imitate import Demonstrations
from skurl.policy.actions import ActionGrid
from skurl.policy.rollout_q import (
    RolloutPolicy,
    RolloutSpec,
    candidate_orders,
    estimate_q,
    rollout_returns,
)
from skurl.sim.env import VectorEnv

DCL_KEY = 4  # seeded_generator key (learner.py uses 1 and 2, imitate.py 3)
# Episodes of the state-sampling runs and of the rollouts' replications: apart from PPO's
# episodes (0..iterations-1) and the warm start's teacher episodes (2**40 + e).
SAMPLE_EPISODE0 = 2**41
ROLLOUT_EPISODE0 = 2**42
ROLLOUT_STRIDE = 2**24  # replication episodes per DCL iteration and sampled day
PART_STRIDE = 2**30  # sampling episodes of an iteration's further labellings (label_states' part)


@dataclass(frozen=True)
class DclSpec:
    """How states are sampled and labelled in one iteration."""

    states: int  # labelled states per iteration (rows x sampled days)
    horizon: int  # H: days per rollout, the fixed first order's day included
    budget: int  # rollouts per state over the halving rounds
    warmup: int  # days of pi_k before the first sampled day (its state distribution)
    every: int = 1  # days between sampled days
    spread: int = 8  # sampled days the states are spread over (fewer rows per day)
    window: int = 0  # candidates: the policy's action +- window on the grid (0: every action)
    temperature: float = 0.0  # 0: the Q-best label; > 0: soft targets (soft_q_targets)
    confirm: int = 0  # fresh paired rollouts testing a changed label against the own action (0: off)
    confirm_z: float = 2.0  # the change is kept where its gain's t-statistic exceeds this

    def __post_init__(self) -> None:
        positive = (self.states, self.horizon, self.budget, self.every, self.spread)
        if min(positive) < 1 or min(self.warmup, self.window, self.temperature, self.confirm) < 0 \
                or self.confirm == 1:
            raise ValueError(f"DclSpec: states, horizon, budget, every and spread must be >= 1, warmup, "
                             f"window and temperature >= 0, confirm 0 or >= 2: {self}")


class RolloutDays(NamedTuple):
    """What a labelling's rollouts cost: the states' own SKU-days, and the clone row-days the
    simulator stepped (their groups and networks too)."""

    sku_days: int
    row_days: int


@dataclass
class Labelled:
    demos: Demonstrations  # features and Q-best labels of the sampled states
    q_gap: float  # mean Q(best) - Q(pi_k's action) per state over the first round (paired)
    changed: float  # share of states whose label differs from pi_k's action
    sku_days: int  # rollout SKU-days simulated
    rows: np.ndarray  # int64 [M]: the env row of each state
    row_days: int  # clone row-days the simulator stepped (rollout_q.QEstimate.row_days)


def sampled_days(days: int, spec: DclSpec, rows_per_day: int) -> list[int]:
    """The days states are taken on: every `every` days from `warmup`, as many as the
    states need at `rows_per_day` each (at most the episode's days before its last)."""
    wanted = math.ceil(spec.states / rows_per_day)
    usable = list(range(spec.warmup, days - 1, spec.every))
    if not usable:
        raise ValueError(f"dcl: warmup {spec.warmup} leaves no day to sample in an episode of {days} days")
    return usable[:wanted]


def label_rows(env: VectorEnv, rows: np.ndarray, own: np.ndarray, grid: ActionGrid, rollout: RolloutPolicy,
                spec: DclSpec, rspec: RolloutSpec, horizons: np.ndarray | None = None
                ) -> tuple[np.ndarray, Any, np.ndarray, int, RolloutDays]:
    """One sampled day's states (env rows `rows`, the policy's actions `own`, rollout days
    `horizons` [S] or rspec's for all): their labels, soft targets (None without dcl
    temperature), paired Q gains of the label over `own`, how many labels changed, and the
    rollout days spent. States of every horizon are rolled out together."""
    cand = candidates(own, grid.n, spec.window)
    first = np.take_along_axis(candidate_orders(grid, env, rows), cand, axis=1)
    q = estimate_q(env, rows, first, rollout, rspec, horizons)
    i = np.arange(rows.size)
    own_col = np.argmax(cand == own[:, None], axis=1)
    best_col, sku_days, row_days = q.best, q.sku_days, q.row_days
    if spec.confirm:
        # fresh futures: the upper half of the day's episodes (the halving uses the lower)
        fresh = dataclasses.replace(rspec, episode_base=rspec.episode_base + ROLLOUT_STRIDE // 2)
        t, stepped = confirm_gain(env, rows, first, own_col, best_col, rollout, spec.confirm, fresh, horizons)
        days = np.full(rows.size, rspec.horizon) if horizons is None else horizons
        sku_days += int(days[best_col != own_col].sum()) * 2 * spec.confirm
        row_days += stepped
        best_col = np.where(t > spec.confirm_z, best_col, own_col)
    best = cand[i, best_col]
    targets = soft_q_targets(q.q, q.se, cand, grid.n, spec.temperature) if spec.temperature > 0 else None
    gains = q.q_first[i, best_col] - q.q_first[i, own_col]
    return best, targets, gains, int((best != own).sum()), RolloutDays(sku_days, row_days)


def confirm_gain(env: VectorEnv, rows: np.ndarray, first: np.ndarray, own_col: np.ndarray,
                 best_col: np.ndarray, rollout: RolloutPolicy, reps: int, spec: RolloutSpec,
                 horizons: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """t-statistic (float64 [S]) of Q(best) - Q(own) for the states whose halving winner
    best_col differs from the policy's own action own_col (columns of first [S, C]), on
    `reps` paired rollouts of fresh futures (episodes spec.episode_base + j); 0 elsewhere.
    The halving's own estimate of its winner is biased up (the winner's curse: it is the
    maximum of noisy means), and near the optimum most winners beat the own action by noise
    alone; a change that does not pass this test keeps the policy's action. Also the clone
    row-days it stepped."""
    out = np.zeros(rows.shape[0])
    changed = np.flatnonzero(best_col != own_col)
    if changed.size == 0:
        return out, 0
    pair = np.stack([first[changed, own_col[changed]], first[changed, best_col[changed]]], axis=1)
    shape = (changed.size, 2, reps)
    src = np.broadcast_to(rows[changed][:, None, None], shape).ravel()
    orders = np.broadcast_to(pair[:, :, None], shape).ravel()
    episodes = np.broadcast_to(spec.episode_base + np.arange(reps)[None, None, :], shape).ravel()
    hor = None if horizons is None else np.broadcast_to(horizons[changed][:, None, None], shape).ravel()
    returns, stepped = rollout_returns(env, src, orders, episodes, rollout, spec, hor)
    returns = returns.reshape(shape)
    gain = returns[:, 1] - returns[:, 0]
    mean, sd = gain.mean(axis=1), gain.std(axis=1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(sd > 0, mean / (sd / math.sqrt(reps)), np.where(mean > 0, np.inf, 0.0))
    out[changed] = t
    return out, stepped


def soft_q_targets(q: np.ndarray, se: np.ndarray, cand: np.ndarray, actions: int,
                   temperature: float) -> np.ndarray:
    """Target distributions (float32 [S, actions]) over each state's candidates cand [S, C]:
    softmax of Q [S, C] / (temperature x the state's mean standard error of Q). Near the
    optimum Q is flat over neighbouring orders and the argmax of noisy estimates is mostly
    noise; in units of that noise a clear winner still gets (nearly) all the weight, and
    actions within the noise share it. A state whose errors are unknown (one replication)
    or zero gets its argmax."""
    known = np.isfinite(se)
    with np.errstate(invalid="ignore", divide="ignore"):
        scale = temperature * np.where(known, se, 0.0).sum(axis=1, keepdims=True) / known.sum(axis=1, keepdims=True)
    z = q - q.max(axis=1, keepdims=True)
    sharp = ~(np.isfinite(scale) & (scale > 0))
    logits = np.where(sharp, np.where(z == 0, 0.0, -np.inf), z / np.where(sharp, 1.0, scale))
    weights = np.exp(logits)
    weights /= weights.sum(axis=1, keepdims=True)
    out = np.zeros((q.shape[0], actions), np.float32)
    np.put_along_axis(out, cand, weights.astype(np.float32), axis=1)
    return out


def candidates(own: np.ndarray, actions: int, window: int) -> np.ndarray:
    """Action indices [S, C] each state's Q is estimated for: every action (window 0), or
    own - window .. own + window shifted to stay on the grid (C = min(2 window + 1, actions))."""
    if window == 0 or 2 * window + 1 >= actions:
        return np.tile(np.arange(actions, dtype=np.int64), (own.shape[0], 1))
    low = np.clip(own - window, 0, actions - 1 - 2 * window)
    return low[:, None] + np.arange(2 * window + 1, dtype=np.int64)[None, :]


def sample_rows(n: int, k: int, seed: int, iteration: int, day: int,
                strata: np.ndarray | None = None) -> np.ndarray:
    """k sorted SKU rows of n, drawn per (seed, iteration, day): uniformly, or with `strata`
    (int [n] codes 0..S-1) equally over the strata, a stratum with fewer rows than its share
    giving all it has and the rest going to the others (stratum_shares). Why: the fit
    weighs every state alike, so a uniform sample lets the big SKU types decide the shared
    net and a type of 1% of the rows gets 1% of the labels (issue 21's stratified sample).
    One stratum draws exactly the uniform sample."""
    if k >= n:
        return np.arange(n, dtype=np.int64)
    gen = seeded_generator(seed, DCL_KEY, iteration * 100_003 + day)
    sizes = None if strata is None else np.bincount(strata)
    if strata is None or sizes is None or np.count_nonzero(sizes) <= 1:
        return torch.randperm(n, generator=gen)[:k].sort().values.numpy().astype(np.int64)
    shares = stratum_shares(sizes, k, torch.rand(sizes.size, generator=gen, dtype=torch.float64).numpy())
    key = torch.rand(n, generator=gen, dtype=torch.float64).numpy()
    order = np.lexsort((key, strata))  # by stratum, then at random within it
    starts = np.cumsum(sizes) - sizes
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n) - starts[strata[order]]
    return np.flatnonzero(rank < shares[strata]).astype(np.int64)


def stratum_shares(sizes: np.ndarray, k: int, tiebreak: np.ndarray) -> np.ndarray:
    """Rows to draw from each stratum (int64 [S]) to make k <= sum(sizes): the most equal
    split that no stratum's size caps (water filling to a level t, sum min(size, t) = k);
    the units left by rounding go one each to the uncapped strata of smallest `tiebreak`
    (uniform [S]), so no stratum is favoured from day to day."""
    sizes = np.asarray(sizes, np.int64)
    ascending = np.sort(sizes)
    below = np.concatenate([[0], np.cumsum(ascending)[:-1]])  # rows of the strata smaller than each
    room = ascending * (sizes.size - np.arange(sizes.size)) + below  # rows taken if the level were that size
    j = int(np.searchsorted(room, k, side="left"))  # the first stratum the level does not cap
    level = (k - below[j]) // (sizes.size - j)
    shares = np.minimum(sizes, level)
    left = k - int(shares.sum())
    open_ = np.flatnonzero(sizes > level)
    shares[open_[np.argsort(tiebreak[open_], kind="stable")[:left]]] += 1
    return shares
