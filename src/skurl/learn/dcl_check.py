"""Is a DCL candidate better than the policy it was fitted from? A paired test on the training env.

Exact policy iteration never makes a policy worse; the approximate one can. Its labels are
right on the states the incumbent visits, but the performance difference lemma (Kakade &
Langford 2002) weighs the advantages on the states the *candidate* visits. When every label
moves the same way (L10 p4: the incumbent never holds stock, so every label says "order
more"), the net extrapolates that to states the incumbent never reached and the candidate
drifts into them (docs/dcl.md). Both policies run the same episodes of the training env
(common random numbers), so the per-SKU difference of their mean daily reward is a precise
test of the whole candidate at the price of a few greedy episodes, far less than the
labelling.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from skurl.policy.api import Policy
from skurl.sim.env import VectorEnv
from skurl.sim.episode import run_episode, sku_objective

# Episodes of the check: far above PPO's, the warm start's (2**40 + e), DCL's sampling
# (2**41 + ...) and rollout (2**42 + (iteration x days + day) x 2**24 + j) episodes
# (episode numbers are taken modulo 2**64, sim/rng.py).
CHECK_EPISODE0 = 2**62


@dataclass(frozen=True)
class PairedGain:
    """The candidate's mean reward per SKU-day minus the incumbent's, over SKU-episodes."""

    gain: float
    se: float  # its standard error (the SKU-episodes' paired differences)
    samples: int  # SKU-episodes

    def worse(self, z: float) -> bool:
        """The candidate loses by more than z standard errors."""
        return self.gain < -z * self.se


def episode_reward(env: VectorEnv, policy: Policy, *, seed: int, episode: int, skip: int) -> np.ndarray:
    """Mean daily reward per SKU (float64 [N]) of `policy` over one episode of `env`,
    the first `skip` days (the start-up from the catalog's initial stock) left out: minus
    the objective evaluation and tuning count (sim/episode.py)."""
    days = int(env.info()["days"]) - skip
    if days < 1:
        raise ValueError(f"dcl check: skipping {skip} days leaves nothing of an episode of {days + skip} days")
    totals, _ = run_episode(env, policy, seed=seed, episode=episode, days=days, warmup=skip)
    return -sku_objective(totals, env.cfg.reward) / days


def paired_gain(env: VectorEnv, incumbent: Policy, candidate: Policy, *, seed: int, iteration: int,
                episodes: int, skip: int) -> PairedGain:
    """`episodes` episodes of env (numbered per iteration, apart from every other use of
    the seed's streams) under both policies; see the module docstring."""
    part = check_part(env, incumbent, candidate, seed=seed, iteration=iteration, episodes=episodes, skip=skip)
    return merge_checks([part], part.sku_ids)


@dataclass
class CheckPart:
    """One holder's share of the paired check: per episode, each of its SKUs' reward gain."""

    sku_ids: np.ndarray  # int64 [N]
    gains: np.ndarray  # float64 [episodes, N]: candidate minus incumbent mean daily reward


def check_part(env: VectorEnv, incumbent: Policy, candidate: Policy, *, seed: int, iteration: int,
               episodes: int, skip: int) -> CheckPart:
    """The paired check's episodes (learn/dcl_check.py, paired_gain) on env's SKUs."""
    if episodes < 1:
        raise ValueError(f"dcl check: episodes {episodes}, expected >= 1")
    gains = []
    for e in range(episodes):
        episode = CHECK_EPISODE0 + iteration * episodes + e
        before = episode_reward(env, incumbent, seed=seed, episode=episode, skip=skip)
        gains.append(episode_reward(env, candidate, seed=seed, episode=episode, skip=skip) - before)
    return CheckPart(np.asarray(env.catalog.sku_id, np.int64), np.stack(gains))


def merge_checks(parts: list[CheckPart], shard_ids: np.ndarray) -> PairedGain:
    """The paired gain over the union of `parts`, SKUs in the training shard's row order (so
    the sums run in the order one env over the shard gives)."""
    rows = shard_rows(shard_ids, np.concatenate([p.sku_ids for p in parts]))
    gains = np.concatenate([p.gains for p in parts], axis=1)
    if np.unique(rows).size != rows.size:
        raise ValueError("dcl check: a SKU was checked by two parts (do the SKU shards overlap?)")
    d = gains[:, np.argsort(rows, kind="stable")].ravel()
    se = float(d.std(ddof=1) / math.sqrt(d.size)) if d.size > 1 else float("inf")
    return PairedGain(float(d.mean()), se, int(d.size))


def shard_rows(shard_ids: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Rows (int64) of SKUs `ids` in the training shard of SKUs `shard_ids`; unknown ones raise."""
    sorter = np.argsort(shard_ids, kind="stable")
    at = np.minimum(np.searchsorted(shard_ids, ids, sorter=sorter), max(shard_ids.size - 1, 0))
    rows = sorter[at]
    if ids.size and not np.array_equal(shard_ids[rows], ids):
        raise ValueError("dcl: a part labelled SKUs outside the training shard")
    return rows.astype(np.int64)
