"""The PPO Learner on K ranks under torch DDP (torchrun; gloo on CPU, NCCL on GPU).

Same math as `Learner` (docs/architecture.md, Learning), split by SKU: rank r holds the contiguous SKU columns
[start, stop) of the iteration's global rollout [T, N]. What must see the global batch is
all-reduced, so that K ranks compute the update one rank would on the same data:

More: docs/internals.md (learn/ddp.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from skurl.buffer.minibatch import seeded_generator
from skurl.buffer.rollout import Columns, Rollout
from skurl.config import Config
from skurl.learn.learner import (
    EVAL_ROWS,
    MINIBATCH_KEY,
    Learner,
    PreparedBatch,
    allreduce_mean_std,
    ppo_minibatch_loss,
    recorded_behaviour,
)
from skurl.policy.normalize import RunningMeanStd
from skurl.policy.twin_mlp import twin_forward
from skurl.telemetry.metrics import get_metrics

AdvantageNorm = Literal["global", "per_rank"]
# Minibatch stats averaged over an iteration's minibatches (ppo_loss's keys).
LOSS_STATS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_frac")


def distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank_and_world() -> tuple[int, int]:
    return (dist.get_rank(), dist.get_world_size()) if distributed() else (0, 1)


def all_reduce_sum_(t: torch.Tensor) -> torch.Tensor:
    """Sum `t` over ranks in place (no-op without a process group)."""
    if distributed():
        dist.all_reduce(t)
    return t


@dataclass(frozen=True)
class RankSlice:
    """The global SKU columns [start, stop) a rank trains on, out of `total`.
    `padded`: the rank would have none and holds a masked copy of one column instead."""

    start: int
    stop: int
    total: int
    padded: bool = False

    @property
    def width(self) -> int:
        return self.stop - self.start


def rank_slice(total: int, rank: int, world: int) -> RankSlice:
    """Balanced contiguous split of `total` SKU columns over `world` ranks."""
    if total < 1 or not 0 <= rank < world:
        raise ValueError(f"rank_slice: total={total}, rank={rank}, world={world}")
    start, stop = rank * total // world, (rank + 1) * total // world
    if stop > start:
        return RankSlice(start, stop, total)
    col = min(start, total - 1)
    return RankSlice(col, col + 1, total, padded=True)


class GlobalRunningMeanStd(RunningMeanStd):
    """RunningMeanStd whose batch moments are first combined over all ranks: every rank
    merges the moments of the global batch, so the statistics stay identical on all."""

    @classmethod
    def like(cls, other: RunningMeanStd) -> GlobalRunningMeanStd:
        out = cls(tuple(other.mean.shape), eps=other.eps, clip=other.clip).to(other.mean.device)
        out.load_state_dict(other.state_dict())
        return out

    @torch.no_grad()
    def merge(self, b_mean: torch.Tensor, b_var: torch.Tensor, b_count: float, decay: float = 1.0) -> None:
        mean = b_mean.to(torch.float64).reshape(-1)
        var = b_var.to(torch.float64).reshape(-1)
        k = mean.numel()
        count = torch.full((1,), float(b_count), dtype=torch.float64, device=self.mean.device)
        sums = torch.cat([mean * count, (var + mean.square()) * count, count])
        all_reduce_sum_(sums)
        total = float(sums[-1])
        if total == 0:
            return
        g_mean = sums[:k] / total
        g_var = (sums[k:2 * k] / total - g_mean.square()).clamp_min(0.0)
        super().merge(g_mean.reshape(self.mean.shape), g_var.reshape(self.mean.shape), total, decay)


class PolicyValueHeads(nn.Module):
    """The trained networks of an ActorCritic as one module for DDP to wrap: normalized
    obs -> fp32 (logits, value), computed in `dtype` (twin_forward). Parameters are the
    ActorCritic's own (shared, not copied)."""

    def __init__(self, policy: nn.Module, value: nn.Module, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.policy = policy
        self.value = value
        self.dtype = dtype

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return twin_forward(self.policy, self.value, x, self.dtype)


class DDPLearner(Learner):
    """A Learner whose update runs on this rank's SKU columns and all-reduces the rest.
    Without a process group it is a one-rank Learner (same results)."""

    def __init__(self, cfg: Config, obs_dim: int, n_actions: int, device: str | torch.device | None = None,
                 *, advantage_norm: AdvantageNorm = "global") -> None:
        super().__init__(cfg, obs_dim, n_actions, device)
        self.rank, self.world = rank_and_world()
        self.advantage_norm = advantage_norm  # per_rank only exists to measure what global buys
        self.alone = not distributed() and advantage_norm == "global"  # one rank: Learner.update itself
        if self.alone:
            self.ddp: nn.Module = PolicyValueHeads(self.model.policy, self.model.value, self.compute_dtype)
            return
        self.model.obs_norm = GlobalRunningMeanStd.like(self.model.obs_norm)
        self.reward_scaler.stats = GlobalRunningMeanStd.like(self.reward_scaler.stats)
        heads = PolicyValueHeads(self.model.policy, self.model.value, self.compute_dtype)
        if distributed():
            ids = [self.device] if self.device.type == "cuda" else None
            self.ddp = DistributedDataParallel(heads, device_ids=ids)
        else:
            self.ddp = heads

    @contextmanager
    def local_statistics(self) -> Iterator[None]:
        """The observation statistics merged on this rank alone, while rank 0 fits the
        model without the others (the warm start's clone); every rank then takes its weights."""
        norm = self.model.obs_norm
        if not isinstance(norm, GlobalRunningMeanStd):
            yield
            return
        local = RunningMeanStd(tuple(norm.mean.shape), eps=norm.eps, clip=norm.clip).to(norm.mean.device)
        local.load_state_dict(norm.state_dict())
        self.model.obs_norm = local
        try:
            yield
        finally:
            norm.load_state_dict(local.state_dict())
            self.model.obs_norm = norm

    def close(self) -> None:
        """Drop the DDP wrapper (its reducer holds the process group) while the group is still
        alive. Left to interpreter exit, it is torn down after the group and the rank aborts
        ("terminate called without an active exception", SIGABRT) in about 1 run in 5.
        Call before `dist.destroy_process_group()`."""
        import gc

        self.ddp = PolicyValueHeads(self.model.policy, self.model.value, self.compute_dtype)
        gc.collect()  # the DDP wrapper sits in reference cycles

    def update(self, rollout: Rollout, train_policy: bool = True) -> dict[str, float]:
        """One PPO iteration on the global rollout (every rank passes the same one); one
        rank alone runs Learner.update, so it is bit for bit the single-process learner."""
        if self.alone:
            return super().update(rollout, train_policy)
        rollout = self._sample_skus(rollout)
        sl = rank_slice(rollout.num_skus, self.rank, self.world)
        return self.update_slice(rollout.select_skus(np.arange(sl.start, sl.stop)), sl, train_policy)

    def update_slice(self, part: Rollout, sl: RankSlice, train_policy: bool = True) -> dict[str, float]:
        """One PPO iteration where this rank holds only columns `sl` of the global rollout
        (`part`); ppo.sample_skus needs the global rollout: use update(). train_policy=False
        fits the value net only."""
        if part.num_skus != sl.width:
            raise ValueError(f"update_slice: rollout has {part.num_skus} SKUs, slice {sl}")
        self.train_policy = bool(train_policy)
        data = self._to_device(part)
        batch, prep_stats = self._prepare_slice(data, sl, behaviour=part.policy_version == self.version)
        lr = self.lr_at(self.iteration)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        stats = self._epochs_slice(batch, sl, part.days)
        if self.train_policy:  # the kl is global: every rank takes the same lr
            self.adapt_lr(stats["last_epoch_kl"])
        self.iteration += 1
        self.version += 1
        get_metrics().record_update(stats, self.version)
        return {**prep_stats, **stats, "lr": lr, "ent_coef": self.ent_coef_at(self.iteration - 1),
                "transitions": float(part.days * sl.total), **self.sample_stat(sl.total)}

    @torch.no_grad()
    def _prepare_slice(self, data: dict[str, torch.Tensor], sl: RankSlice,
                       behaviour: bool) -> tuple[PreparedBatch, dict[str, float]]:
        """Learner._prepare with global statistics; a padded rank contributes nothing."""
        steps, n, dim = data[Columns.OBS].shape
        obs = data[Columns.OBS].reshape(steps * n, dim)
        actions = data[Columns.ACTIONS].reshape(-1).long()
        f64: dict[str, Any] = {"dtype": torch.float64, "device": self.device}
        if self.ppo.normalize_obs:
            before = self.obs_stats_before_update()
            if sl.padded:
                self.model.obs_norm.merge(torch.zeros(dim, **f64), torch.zeros(dim, **f64), 0.0, self.ppo.stats_decay)
            else:
                self.model.obs_norm.update(obs, self.ppo.stats_decay)
            self.preserve_obs_norm(before)
        norm_obs = torch.cat([self.model.normalize(c) for c in obs.split(EVAL_ROWS)])
        if behaviour:
            old_logp, values = self._logp_values(norm_obs, actions)
            bootstrap = self._values(self.model.normalize(data[Columns.LAST_OBS]))
        else:
            old_logp, values, bootstrap = recorded_behaviour(data)
        rewards = self.centered(data[Columns.REWARDS].float(), sl.padded)[0]
        if self.ppo.normalize_reward:
            old_std = self.reward_scale_before_update()
            if sl.padded:
                self.reward_scaler.stats.merge(torch.zeros((), **f64), torch.zeros((), **f64), 0.0,
                                               self.reward_scaler.decay)
            else:
                self.reward_scaler.update(rewards, data[Columns.DONES])
            rewards = self.reward_scaler.scale(rewards)
            values, bootstrap = self.preserve_values(old_std, values, bootstrap)
        adv, returns = self.advantages_and_returns(rewards, values.reshape(steps, n), bootstrap, data)
        adv, returns = adv.reshape(-1), returns.reshape(-1)
        real = adv[:0] if sl.padded else adv
        mean, std = allreduce_mean_std(real) if self.advantage_norm == "global" else _local_mean_std(real)
        batch = PreparedBatch(norm_obs, actions, old_logp, (adv - mean) / (std + 1e-8), returns, values)
        return batch, self._global_value_stats(values, returns, sl.padded)

    def _global_value_stats(self, values: torch.Tensor, returns: torch.Tensor, padded: bool) -> dict[str, float]:
        v, r = values.to(torch.float64), returns.to(torch.float64)
        err = r - v
        sums = torch.stack([v.sum(), r.sum(), r.square().sum(), err.sum(), err.square().sum(),
                            torch.tensor(float(v.numel()), dtype=torch.float64, device=v.device)])
        if padded:
            sums.zero_()
        all_reduce_sum_(sums)
        n = float(sums[5])
        var_r = float(sums[2]) / n - (float(sums[1]) / n) ** 2
        var_e = float(sums[4]) / n - (float(sums[3]) / n) ** 2
        # Ratio of population variances = ratio of the Learner's unbiased ones.
        ev = float("nan") if var_r <= 0 else 1.0 - var_e / var_r
        return {
            "explained_variance": ev,
            "value_mean": float(sums[0]) / n,
            "return_mean": float(sums[1]) / n,
            "reward_scale": float(self.reward_scaler.stats.std) if self.ppo.normalize_reward else 1.0,
        }

    def _my_minibatches(self, epoch: int, total: int, sl: RankSlice, steps: int) -> tuple[torch.Tensor, list[int]]:
        """This rank's rows of every global minibatch of `epoch`: local row indices, and
        bounds such that minibatch b is local[bounds[b]:bounds[b + 1]]."""
        gen = seeded_generator(self.cfg.train.seed, self.iteration, MINIBATCH_KEY, epoch)
        perm = torch.randperm(total, generator=gen)  # the permutation minibatch_indices draws
        size = self.ppo.minibatch
        edges = torch.arange(0, total + size, size).clamp_(max=total)[: -(-total // size) + 1]
        if sl.padded:
            return torch.zeros(0, dtype=torch.long, device=self.device), [0] * edges.numel()
        day, col = perm // sl.total, perm % sl.total
        positions = ((col >= sl.start) & (col < sl.stop)).nonzero().squeeze(1)
        local = day[positions] * sl.width + (col[positions] - sl.start)
        bounds = torch.searchsorted(positions, edges).tolist()
        return local.to(self.device), bounds

    def _epochs_slice(self, batch: PreparedBatch, sl: RankSlice, steps: int) -> dict[str, float]:
        total = steps * sl.total
        size = self.ppo.minibatch
        n_mb = -(-total // size)
        params = list(self.model.parameters())
        batch.obs = batch.obs.to(self.compute_dtype)  # cast once, not per minibatch
        sums = torch.zeros(len(LOSS_STATS), dtype=torch.float64, device=self.device)
        grad_norm_sum = torch.zeros((), dtype=torch.float64, device=self.device)  # no host sync per step
        epochs_run, last_kl = 0, 0.0
        kl_at = LOSS_STATS.index("approx_kl")
        for epoch in range(self.ppo.epochs):
            local, bounds = self._my_minibatches(epoch, total, sl, steps)
            epoch_sums = torch.zeros_like(sums)
            for b in range(n_mb):
                idx = local[bounds[b]:bounds[b + 1]]
                rows = idx.numel()
                global_rows = min(size, total - b * size)
                if rows == 0:  # still join DDP's all-reduce, with a zero-weight row
                    idx = torch.zeros(1, dtype=torch.long, device=self.device)
                loss, stats = self._slice_loss(batch, idx)
                self.optimizer.zero_grad(set_to_none=True)
                (loss * (rows * self.world / global_rows)).backward()
                grad_norm_sum += torch.nn.utils.clip_grad_norm_(params, self.ppo.max_grad_norm)
                self.optimizer.step()
                local_stats = torch.stack([stats[k].detach().to(torch.float64) for k in LOSS_STATS])
                epoch_sums += local_stats * (rows / global_rows)
            all_reduce_sum_(epoch_sums)  # sum over ranks: each minibatch's global mean
            sums += epoch_sums
            epochs_run += 1
            last_kl = float(epoch_sums[kl_at]) / n_mb
            if self.ppo.target_kl > 0 and last_kl > self.ppo.target_kl:
                break  # the same decision on every rank: the kl is global
        steps_run = n_mb * epochs_run
        out = {k: float(v) / steps_run for k, v in zip(LOSS_STATS, sums, strict=True)}
        out.update(grad_norm=float(grad_norm_sum) / steps_run, epochs=float(epochs_run), last_epoch_kl=last_kl)
        return out

    def _slice_loss(self, batch: PreparedBatch, idx: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Learner._minibatch_loss through the DDP wrapper (its forward arms the all-reduce)."""
        return ppo_minibatch_loss(self.ddp, batch.take(idx), self.ppo.clip, self.ppo.vf_coef,
                                  self.ent_coef_at(self.iteration), self.train_policy)


def _local_mean_std(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x64 = x.detach().to(torch.float64)
    mean = x64.mean()
    return mean.to(x.dtype), (x64 - mean).square().mean().sqrt().to(x.dtype)
