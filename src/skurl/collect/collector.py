"""The Collector: drives any Env with the current policy and records a Rollout.

Each day: the env's features are normalized and run through the policy and value nets
in chunks of SKUs (torch inference mode, optionally bfloat16), an action index is
sampled per SKU by inverse CDF with counter-based uniforms, indices become units via
the ActionGrid, and the env steps. Arrays are preallocated and written in place; with
record=False nothing per step is kept (benchmarks).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from skurl.buffer.rollout import Rollout
from skurl.catalog.schema import Catalog
from skurl.collect.reward_range import check_rewards, reward_bounds
from skurl.config import CollectConfig
from skurl.errors import UserError
from skurl.policy.action_noise import ActionUniforms
from skurl.policy.actions import ActionGrid, bind_to_env, report_clipped
from skurl.policy.bf16 import cpu_has_bf16, warn_if_emulated
from skurl.policy.grid_center import GridCenter
from skurl.policy.nets import ActorCritic, InferenceNets, input_tensor, sample_inverse_cdf
from skurl.sim.api import Env

log = logging.getLogger("skurl.collect")


class Timer(Protocol):
    def stage(self, name: str) -> AbstractContextManager[None]: ...


class _NoTimer:
    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        yield


def resolve_infer_dtype(name: str) -> torch.dtype:
    """auto | float32 | bfloat16 -> torch dtype (auto: bf16 only where the CPU has it)."""
    if name == "float32":
        return torch.float32
    if name == "bfloat16":
        warn_if_emulated(log, "collect.infer_dtype=bfloat16", "auto or float32")
        return torch.bfloat16
    if name == "auto":
        return torch.bfloat16 if cpu_has_bf16() else torch.float32
    raise ValueError(f"infer_dtype: got {name!r}, expected auto | float32 | bfloat16")


@dataclass
class CollectStats:
    days: int = 0
    skus: int = 0
    reward_sum: float = 0.0
    seconds: float = 0.0
    infer_seconds: float = 0.0
    sim_seconds: float = 0.0
    clipped_orders: int = 0  # SKU-days whose order was clipped (ActionGrid.orders_for)

    @property
    def transitions(self) -> int:
        return self.days * self.skus

    @property
    def reward_mean(self) -> float:
        return self.reward_sum / max(self.transitions, 1)

    def scalars(self) -> dict[str, float]:
        return {"reward_mean": self.reward_mean, "transitions": float(self.transitions),
                "transitions_per_s": self.transitions / max(self.seconds, 1e-9),
                "clipped_orders": float(self.clipped_orders)}


class Collector:
    """Runs whole episodes of `env` with the policy held at `version`."""

    def __init__(
        self,
        env: Env,
        model: ActorCritic,
        grid: ActionGrid,
        chunk: int = 4096,
        infer_dtype: str | torch.dtype = "auto",
        days: int | None = None,
        sku_ids: np.ndarray | None = None,
        timer: Timer | None = None,
        record_values: bool = True,
        catalog: Catalog | None = None,
    ) -> None:
        self.env = env
        # A cover grid needs the env's SKUs: `catalog` holds their rows (remote envs) or
        # the env has its own. Centred on tuned factors it waits for them (use_center).
        self._catalog = catalog
        self._unbound = grid
        self.grid = grid if grid.needs_center else bind_to_env(grid, env, catalog)
        self.chunk = int(chunk)
        self.dtype = infer_dtype if isinstance(infer_dtype, torch.dtype) else resolve_infer_dtype(infer_dtype)
        info = env.info()
        self.days = int(days if days is not None else info["days"])
        self.sku_ids = np.asarray(sku_ids if sku_ids is not None else env.sku_ids, np.int64)
        if self.sku_ids.shape != (env.num_skus,):
            raise ValueError(f"collector: {self.sku_ids.shape[0]} sku_ids for {env.num_skus} SKUs")
        self.timer: Timer = timer or _NoTimer()
        # Without values (collect.values=false) rollouts carry NaN values and
        # bootstraps: the learner recomputes both for rollouts at its version and refuses
        # stale ones without them. The value net is half of the inference cost.
        self.record_values = bool(record_values)
        self.model = model
        self.version = 0
        self.nets = InferenceNets(model, self.dtype)
        self.stats = CollectStats()
        self._reward_bound = self._bounds(catalog if catalog is not None else getattr(env, "catalog", None))

    @classmethod
    def from_config(cls, env: Env, model: ActorCritic, grid: ActionGrid, collect: CollectConfig, *,
                    timer: Timer | None = None, catalog: Catalog | None = None) -> Collector:
        """A Collector with the collection settings of `collect` (chunk, infer_dtype,
        values): the one place that reads them, for every mode."""
        return cls(env, model, grid, chunk=collect.chunk, infer_dtype=collect.infer_dtype, timer=timer,
                   record_values=collect.values, catalog=catalog)

    def _bounds(self, catalog: Catalog | None) -> np.ndarray:
        """Per-SKU reward range (collect/reward_range.py); only finiteness is checked for
        an env whose catalog rows are not known here."""
        if catalog is None or len(catalog) != self.env.num_skus:
            return np.full(self.env.num_skus, np.inf)
        return reward_bounds(catalog, self.days, self._unbound)

    def use_center(self, center: GridCenter) -> None:
        """Centre the cover grid on the run's tuned factors (policy.actions.z_center=tuned)."""
        self.grid = bind_to_env(self._unbound.with_center(center), self.env, self._catalog)

    def set_weights(self, version: int, tensors: dict[str, torch.Tensor]) -> None:
        """Load published weights (model state_dict) as policy `version`."""
        self.model.load_state_dict(tensors)
        self.version = int(version)
        self.nets = InferenceNets(self.model, self.dtype)

    def collect(self, seed: int, episode: int, version: int | None = None, record: bool = True,
                obs_skus: np.ndarray | None = None) -> Rollout | None:
        """One episode from env.reset(seed, episode); returns the Rollout (None if not record).
        With `obs_skus` (SKU ids) the rollout keeps the observations of those of them this
        collector runs only (Rollout.obs_sku_ids): all a learner training on that sample
        reads, at a fraction of the memory, store and network bytes."""
        if version is not None and version != self.version:
            raise ValueError(f"collector holds policy version {self.version}, asked for {version}")
        if self.grid.needs_center:
            raise UserError("collector: policy.actions.z_center=tuned but no tuned centre was given "
                            "(expected Collector.use_center before collecting)")
        n = self.env.num_skus
        start = time.perf_counter()
        self.stats = CollectStats(skus=n)
        with self.timer.stage("simulate"):
            obs = self.env.reset(seed, episode)
            t_sim = time.perf_counter()
        rows = None if obs_skus is None else np.flatnonzero(np.isin(self.sku_ids, obs_skus))
        rollout = self._allocate(obs.features.shape[1], rows) if record else None
        noise = ActionUniforms(seed, episode, self.sku_ids)
        actions = np.empty(n, np.int64)
        logp = np.empty(n, np.float32)
        values = np.full(n, np.nan, np.float32)
        self.stats.sim_seconds += t_sim - start
        for day in range(self.days):
            t0 = time.perf_counter()
            with self.timer.stage("infer"):
                self._act(obs.features, noise.day(day), actions, logp, values)
            t1 = time.perf_counter()
            if rollout is not None:
                if rows is None:
                    rollout.obs[day] = obs.features
                else:
                    np.take(obs.features, rows, axis=0, out=rollout.obs[day])
                rollout.actions[day] = actions
                rollout.logp[day] = logp
                rollout.values[day] = values
            with self.timer.stage("simulate"):
                orders, clipped = self.grid.orders_for(actions, obs.raw)
                if clipped.any():
                    self.stats.clipped_orders += report_clipped(log, clipped, self.sku_ids, day)
                result = self.env.step(orders)
            self.stats.infer_seconds += t1 - t0
            self.stats.sim_seconds += time.perf_counter() - t1
            self.stats.reward_sum += float(result.reward.sum(dtype=np.float64))
            self.stats.days += 1
            if rollout is not None:
                check_rewards(result.reward, self._reward_bound, self.sku_ids, day)
                rollout.rewards[day] = result.reward
                rollout.dones[day] = result.done
            obs = result.obs
            if result.done:
                break
        self.stats.seconds = time.perf_counter() - start
        if rollout is None:
            return None
        if self.stats.days != self.days:
            raise RuntimeError(f"collector: episode ended after {self.stats.days} days, expected {self.days}")
        rollout.dones[-1] = True  # the end of the collected episode is a truncation
        rollout.last_obs[:] = obs.features if rows is None else obs.features[rows]
        if self.record_values:
            with self.timer.stage("infer"):
                self._values(obs.features, rollout.bootstrap)
        else:
            rollout.bootstrap[:] = np.nan
        rollout.policy_version, rollout.seed, rollout.episode = self.version, seed, episode
        return rollout

    def _allocate(self, dim: int, rows: np.ndarray | None) -> Rollout:
        rollout = Rollout.allocate(self.days, self.sku_ids, dim if rows is None else 0)
        if rows is not None:
            rollout.obs = np.empty((self.days, rows.size, dim), np.float32)
            rollout.last_obs = np.empty((rows.size, dim), np.float32)
            rollout.obs_sku_ids = self.sku_ids[rows].copy()
        return rollout

    @torch.inference_mode()
    def _act(self, features: np.ndarray, u: np.ndarray, actions: np.ndarray, logp: np.ndarray, values: np.ndarray) -> None:
        feats = input_tensor(features)
        uniforms = torch.from_numpy(u)
        for s in range(0, features.shape[0], self.chunk):
            e = s + self.chunk
            if self.record_values:
                logits, value = self.nets(feats[s:e])
                values[s:e] = value.numpy()
            else:
                logits = self.nets.logits(feats[s:e])
            idx, lp = sample_inverse_cdf(logits, uniforms[s:e])
            actions[s:e] = idx.numpy()
            logp[s:e] = lp.numpy()

    @torch.inference_mode()
    def _values(self, features: np.ndarray, out: np.ndarray) -> None:
        feats = input_tensor(features)
        for s in range(0, features.shape[0], self.chunk):
            e = s + self.chunk
            out[s:e] = self.nets.values(feats[s:e]).numpy()

