"""One assembly of an iteration's Rollout from collector shards, for every mode and rank.

A shard holds some SKUs' columns (any order, any split) with its observations packed
(buffer/obs_delta.py) or raw; the assembly unpacks them, checks their shapes and scatters
them into the catalog's row order, so the learner sees the co-located Rollout bit for bit.
With a SKU sample (ppo.sample_skus) only the sample's observations are decoded and kept.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from skurl.buffer.obs_delta import PACKED, decode_days
from skurl.buffer.rollout import Columns, Rollout
from skurl.errors import UserError

PER_STEP = (Columns.OBS, Columns.ACTIONS, Columns.LOGP, Columns.VALUES, Columns.REWARDS,
            Columns.DONES, Columns.TERMINALS)
PER_SKU = (Columns.LAST_OBS, Columns.BOOTSTRAP)
OBS_ROWS = "obs_rows"  # catalog rows of a shard's decoded obs (the learner's sample)


class AssemblyError(UserError):
    """The shards do not fit together into one rollout of the catalog."""


class ShardAssembly:
    """Scatters shards into the row order of `sku_ids` (the catalog's); `chosen` is a mask
    of the rows whose observations the learner trains on (None: every row)."""

    def __init__(self, sku_ids: np.ndarray, days: int, obs_dim: int,
                 chosen: np.ndarray | None = None) -> None:
        self.sku_ids, self.days, self.obs_dim, self.chosen = sku_ids, days, obs_dim, chosen
        self._sorter = np.argsort(sku_ids, kind="stable")

    def rows(self, sku_ids: np.ndarray) -> np.ndarray:
        """Catalog rows of `sku_ids` (AssemblyError for ids not in the catalog)."""
        ids = self.sku_ids
        pos = np.searchsorted(ids[self._sorter], sku_ids)
        rows = self._sorter[np.minimum(pos, len(ids) - 1)]
        bad = ids[rows] != sku_ids
        if bad.any():
            raise AssemblyError(f"a shard holds SKU id {int(sku_ids[np.argmax(bad)])}, which is "
                                "not in the learner's catalog (same catalog config everywhere?)")
        return rows

    def unpack(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray] | str:
        """The shard's arrays with packed obs decoded (the sample's rows only, named by
        OBS_ROWS, when `chosen` is set), or why they cannot be (damaged)."""
        ids = arrays.get(Columns.SKU_IDS)
        if ids is None:
            return arrays  # problem() names what is missing
        obs_ids = arrays.get(Columns.OBS_SKU_IDS, ids)
        select = None
        if self.chosen is not None:
            obs_rows = self.rows(obs_ids)
            select = np.flatnonzero(self.chosen[obs_rows])
            arrays[OBS_ROWS] = obs_rows[select]
            if Columns.LAST_OBS in arrays:
                arrays[Columns.LAST_OBS] = arrays[Columns.LAST_OBS][select]
        if all(k in arrays for k in PACKED):
            try:
                arrays[Columns.OBS] = decode_days(arrays, obs_ids.shape[0], self.obs_dim, select)
            except ValueError as exc:
                return f"is damaged ({exc})"
            for k in PACKED:
                del arrays[k]
        elif select is not None and Columns.OBS in arrays:
            arrays[Columns.OBS] = arrays[Columns.OBS][:, select]
        return arrays

    def problem(self, arrays: dict[str, np.ndarray]) -> str:
        """Why the unpacked shard does not fit the rollout ('' when it does)."""
        missing = [k for k in (*PER_STEP, *PER_SKU, Columns.SKU_IDS) if k not in arrays]
        if missing:
            return f"lacks arrays {missing}"
        n = arrays[Columns.SKU_IDS].shape[0]
        if self.chosen is None and Columns.OBS_SKU_IDS in arrays and arrays[Columns.OBS_SKU_IDS].shape[0] != n:
            return (f"holds the obs of {arrays[Columns.OBS_SKU_IDS].shape[0]} of its {n} SKUs, but "
                    "the learner trains on every SKU (was ppo.sample_skus changed?)")
        if OBS_ROWS in arrays:
            n = arrays[OBS_ROWS].shape[0]
        want = (self.days, n, self.obs_dim)
        if arrays[Columns.OBS].shape != want:
            return f"has obs of shape {arrays[Columns.OBS].shape}, expected {want}"
        if arrays[Columns.LAST_OBS].shape != (n, self.obs_dim):
            return f"has last_obs of shape {arrays[Columns.LAST_OBS].shape}, expected {(n, self.obs_dim)}"
        return ""

    def assemble(self, shards: Iterable[dict[str, np.ndarray]], *, version: int, seed: int,
                 episode: int, missing_ok: bool = False) -> Rollout:
        """The unpacked, checked shards as one Rollout in catalog row order; each SKU must
        be in exactly one shard (`missing_ok`: at most one, and the rollout holds the SKUs
        present only: shares lost to dead collectors). With `chosen`, obs and last_obs hold
        the sample's rows (Rollout.obs_sku_ids), which Learner.update restricts to as it
        would a full one."""
        n = len(self.sku_ids)
        out = Rollout.allocate(self.days, self.sku_ids, self.obs_dim if self.chosen is None else 0)
        seen = np.zeros(n, np.int32)
        placed = []
        for arrays in shards:
            rows = self.rows(arrays[Columns.SKU_IDS])
            np.add.at(seen, rows, 1)
            for name in PER_STEP:
                if name != Columns.OBS:
                    getattr(out, name)[:, rows] = arrays[name]
            out.bootstrap[rows] = arrays[Columns.BOOTSTRAP]
            if self.chosen is None:
                out.obs[:, rows] = arrays[Columns.OBS]
                out.last_obs[rows] = arrays[Columns.LAST_OBS]
            else:
                placed.append((arrays[OBS_ROWS], arrays[Columns.OBS], arrays[Columns.LAST_OBS]))
        bad = (seen > 1) if missing_ok else (seen != 1)
        if bad.any():
            i = int(np.argmax(bad))
            raise AssemblyError(f"iteration {episode}: SKU {int(self.sku_ids[i])} is in "
                                f"{int(seen[i])} shards, expected exactly one")
        out.policy_version, out.seed, out.episode = version, seed, episode
        if self.chosen is not None:
            if missing_ok and not seen.all():
                raise AssemblyError("a rollout missing some SKUs cannot hold the learner's SKU sample; "
                                    "expected every share collected")
            return self._with_sample(out, placed)
        return out if seen.all() else out.select_skus(np.flatnonzero(seen))

    def _with_sample(self, full: Rollout, placed: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> Rollout:
        assert self.chosen is not None
        index = np.flatnonzero(self.chosen)
        position = np.full(len(self.sku_ids), -1, np.int64)
        position[index] = np.arange(index.size)
        full.obs = np.empty((full.days, index.size, self.obs_dim), np.float32)
        full.last_obs = np.empty((index.size, self.obs_dim), np.float32)
        full.obs_sku_ids = self.sku_ids[index]
        filled = np.zeros(index.size, np.int64)
        for rows, part, last in placed:
            full.obs[:, position[rows]] = part
            full.last_obs[position[rows]] = last
            np.add.at(filled, position[rows], 1)
        if not (filled == 1).all():
            raise AssemblyError(f"the shards hold the obs of {int((filled > 0).sum())} of the "
                                f"learner's {index.size} sampled SKUs, expected each exactly once")
        return full


def sample_mask(n: int, index: np.ndarray | None) -> np.ndarray | None:
    """Rows `index` of `n` as a mask (the learner's SKU sample); None for every row."""
    if index is None:
        return None
    chosen = np.zeros(n, bool)
    chosen[index] = True
    return chosen
