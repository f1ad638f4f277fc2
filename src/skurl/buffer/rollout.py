"""The Rollout: one iteration's trajectories as arrays [T, N] (T days, N SKUs).

`Columns` names every key once; the collector writes these arrays in place, stores and
wire formats move them as named tensors, and the learner reads them by the same names.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np


class Columns:
    """Names of the rollout arrays (also the tensor names on the wire and on disk)."""

    OBS = "obs"  # float32 [T, N, D] raw features seen before acting on day t
    ACTIONS = "actions"  # int32 [T, N] action index
    LOGP = "logp"  # float32 [T, N] behaviour log-probability of the action
    VALUES = "values"  # float32 [T, N] behaviour value estimate
    REWARDS = "rewards"  # float32 [T, N]
    DONES = "dones"  # bool [T, N] the episode ended after step t (terminal or truncated)
    TERMINALS = "terminals"  # bool [T, N] it ended in a true terminal state (no bootstrap)
    LAST_OBS = "last_obs"  # float32 [N, D] observation after the last step
    BOOTSTRAP = "bootstrap"  # float32 [N] behaviour value of LAST_OBS
    SKU_IDS = "sku_ids"  # int64 [N]
    # int64 [K]: when present, OBS [T, K, D] and LAST_OBS [K, D] hold only these SKUs (in
    # column order): a collector records the observations of the learner's sample only.
    OBS_SKU_IDS = "obs_sku_ids"

    # Advantage-estimation and minibatch keys (learner side).
    ADVANTAGES = "advantages"
    RETURNS = "returns"


@dataclass
class Rollout:
    obs: np.ndarray
    actions: np.ndarray
    logp: np.ndarray
    values: np.ndarray
    rewards: np.ndarray
    dones: np.ndarray
    terminals: np.ndarray
    last_obs: np.ndarray
    bootstrap: np.ndarray
    sku_ids: np.ndarray
    policy_version: int = 0
    seed: int = 0
    episode: int = 0
    obs_sku_ids: np.ndarray | None = None  # Columns.OBS_SKU_IDS (None: obs of every SKU)

    @classmethod
    def allocate(cls, days: int, sku_ids: np.ndarray, obs_dim: int) -> Rollout:
        """Preallocated arrays for `days` steps of len(sku_ids) SKUs."""
        n = int(sku_ids.shape[0])
        return cls(
            obs=np.empty((days, n, obs_dim), np.float32),
            actions=np.empty((days, n), np.int32),
            logp=np.empty((days, n), np.float32),
            values=np.empty((days, n), np.float32),
            rewards=np.empty((days, n), np.float32),
            dones=np.zeros((days, n), bool),
            terminals=np.zeros((days, n), bool),
            last_obs=np.empty((n, obs_dim), np.float32),
            bootstrap=np.empty(n, np.float32),
            sku_ids=np.asarray(sku_ids, np.int64).copy(),
        )

    @property
    def days(self) -> int:
        return int(self.rewards.shape[0])

    @property
    def num_skus(self) -> int:
        return int(self.rewards.shape[1])

    @property
    def transitions(self) -> int:
        return int(self.rewards.size)

    def arrays(self) -> dict[str, np.ndarray]:
        """The arrays by Columns name (no copy)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if isinstance(getattr(self, f.name), np.ndarray)}

    def select_skus(self, index: np.ndarray) -> Rollout:
        """The rollout restricted to SKU columns `index` (sorted; copies). A rollout with
        the observations of some SKUs only (obs_sku_ids) must be restricted to exactly those."""
        partial = self.obs_sku_ids is not None
        if self.obs_sku_ids is not None and not np.array_equal(self.obs_sku_ids, self.sku_ids[index]):
            raise ValueError(f"Rollout.select_skus: the rollout holds the observations of "
                             f"{self.obs_sku_ids.shape[0]} of its {self.num_skus} SKUs only, not "
                             f"of the {len(index)} selected")
        per_step = (Columns.ACTIONS, Columns.LOGP, Columns.VALUES, Columns.REWARDS,
                    Columns.DONES, Columns.TERMINALS) + (() if partial else (Columns.OBS,))
        kw = {k: np.ascontiguousarray(getattr(self, k)[:, index]) for k in per_step}
        for k in (Columns.BOOTSTRAP, Columns.SKU_IDS) + (() if partial else (Columns.LAST_OBS,)):
            kw[k] = np.ascontiguousarray(getattr(self, k)[index])
        if partial:
            kw[Columns.OBS], kw[Columns.LAST_OBS] = self.obs, self.last_obs
        return Rollout(**kw, policy_version=self.policy_version, seed=self.seed, episode=self.episode)

    @staticmethod
    def concat_skus(parts: list[Rollout]) -> Rollout:
        """Join rollouts of the same days and version along the SKU axis (shards)."""
        first = parts[0]
        for p in parts:
            _require_every_obs(p, "concat_skus")
        per_step_axis = {Columns.OBS: 1, Columns.ACTIONS: 1, Columns.LOGP: 1, Columns.VALUES: 1,
                         Columns.REWARDS: 1, Columns.DONES: 1, Columns.TERMINALS: 1,
                         Columns.LAST_OBS: 0, Columns.BOOTSTRAP: 0, Columns.SKU_IDS: 0}
        kw = {k: np.concatenate([getattr(p, k) for p in parts], axis=ax) for k, ax in per_step_axis.items()}
        return Rollout(**kw, policy_version=first.policy_version, seed=first.seed, episode=first.episode)


def _require_every_obs(rollout: Rollout, what: str) -> None:
    if rollout.obs_sku_ids is not None:
        raise ValueError(f"Rollout.{what}: the rollout holds the observations of "
                         f"{rollout.obs_sku_ids.shape[0]} of its {rollout.num_skus} SKUs only")
