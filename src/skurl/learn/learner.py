"""The PPO learner: pure compute on one device, no processes or networks.

`Learner.update(rollout)` runs one iteration of PPO on a Rollout [T, N]: move the data
to the device once, update observation statistics, recompute behaviour log-probs and
values (in the update's compute dtype, as its minibatches compute them), scale rewards, GAE, normalize advantages over the global batch, then K
epochs of shuffled minibatches with the clipped objective and grad-norm clipping.
Deployment wrappers (co-located loop, DDP, services) call it; it knows none of them.
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial

import numpy as np
import torch

from skurl.buffer.gae import gae
from skurl.buffer.minibatch import (
    BlockGather,
    PreparedBatch,
    seeded_generator,
    shuffled_minibatches,
)
from skurl.buffer.rollout import Columns, Rollout
from skurl.config import Config
from skurl.errors import UserError
from skurl.learn.fused_step import fused_minibatch_grads, policy_loss_grads
from skurl.learn.normalize import (
    RewardScaler,
    SkuRewardScaler,
    absorb_normalizer_change,
    rescale_output_layer,
)
from skurl.learn.ppo_loss import ppo_loss
from skurl.learn.twin_step import DeferredClipStep
from skurl.learn.vtrace import ratio_stats, vtrace
from skurl.policy.bf16 import warn_if_emulated
from skurl.policy.nets import ActorCritic
from skurl.policy.twin_mlp import twin_forward, twin_outputs
from skurl.telemetry.metrics import get_metrics

_log = logging.getLogger(__name__)
# Rows per no-grad forward pass when recomputing behaviour outputs: small enough that a
# chunk's activations stay in cache (65536 rows cost 2.3x the CPU time, mostly page
# faults and cache misses on 64 MB intermediates).
EVAL_ROWS = 4096
# Keys of generators derived from (seed, iteration, key): no state to checkpoint.
SKU_SAMPLE_KEY = 1
MINIBATCH_KEY = 2
# lr_schedule=adaptive: step factor and bounds of the learning rate (rsl_rl's).
ADAPTIVE_LR_FACTOR = 1.5
ADAPTIVE_LR_BOUNDS = (1e-5, 1e-2)


def resolve_device(name: str) -> torch.device:
    """train.device as a torch device; a CUDA device this torch cannot reach is a UserError."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if (device.index or 0) >= count:
            raise UserError(f"train.device = {name!r}: this torch sees {count} CUDA device(s); "
                            "expected auto or cpu here" + (f", or cuda:0..cuda:{count - 1}" if count else ""))
    return device


def allreduce_mean_std(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and std of x over every rank's data: sums are all-reduced under
    torch.distributed, so advantage normalization sees the global batch (docs/architecture.md, Learning).
    Without a process group this is the plain mean and std."""
    x64 = x.detach().to(torch.float64)
    sums = torch.stack([x64.sum(), x64.square().sum(), torch.tensor(float(x.numel()), dtype=torch.float64, device=x.device)])
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.all_reduce(sums)
    mean = sums[0] / sums[2]
    var = (sums[1] / sums[2] - mean.square()).clamp_min(0.0)
    return mean.to(x.dtype), var.sqrt().to(x.dtype)


Forward = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def ppo_minibatch_loss(forward: Forward, mb: PreparedBatch, clip: float, vf_coef: float,
                       ent_coef: float, train_policy: bool = True) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The PPO loss of one minibatch; `forward` maps its observations to fp32 (logits, values)."""
    logits, values = forward(mb.obs)
    logp_all = torch.log_softmax(logits, dim=-1)
    new_logp = logp_all.gather(-1, mb.actions.unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return ppo_loss(new_logp, mb.old_logp, mb.advantages, values, mb.returns, entropy, clip, vf_coef, ent_coef,
                    train_policy, mb.weight)


def recorded_behaviour(data: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The collector's log-probs, values and bootstraps of a rollout from an older policy
    version (the learner cannot recompute them). Collectors record values only with
    collect.values (NaN otherwise): refuse rather than train on NaN."""
    values, bootstrap = data[Columns.VALUES].reshape(-1).float(), data[Columns.BOOTSTRAP].float()
    if bool(torch.isnan(values).any()) or bool(torch.isnan(bootstrap).any()):
        raise UserError("learner: a rollout from an older policy version has no recorded values "
                        "(its collectors ran with collect.values=false); expected "
                        "collect.values=true when rollouts can be stale")
    return data[Columns.LOGP].reshape(-1).float(), values, bootstrap


def behaviour_logp(data: dict[str, torch.Tensor], logp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The collector's recorded log-probs mu of a stale rollout's actions and log pi/mu
    against the learner's current `logp` (collect.staleness > 0); values are the learner's
    own (V-trace corrects them), so only the log-probs must have been recorded."""
    mu = data[Columns.LOGP].reshape(-1).float()
    if not bool(torch.isfinite(mu).all()):
        raise UserError("learner: a stale rollout carries non-finite behaviour log-probs (column logp); "
                        "expected the collector's finite log-probabilities of the actions it took")
    return mu, logp.float() - mu


class Learner:
    def __init__(self, cfg: Config, obs_dim: int, n_actions: int, device: str | torch.device | None = None) -> None:
        self.cfg = cfg
        self.ppo = cfg.ppo
        self.device = resolve_device(cfg.train.device) if device is None else torch.device(device)
        with torch.random.fork_rng(devices=[]):  # init from the run seed, global RNG untouched
            torch.manual_seed(cfg.train.seed)
            model = ActorCritic(obs_dim, n_actions, cfg.policy.hidden)
        self.model = model.to(self.device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=self.ppo.lr, eps=1e-5, fused=True)
        scaler = SkuRewardScaler if self.ppo.reward_scale == "sku" else RewardScaler
        self.reward_scaler = scaler(self.ppo.gamma, decay=self.ppo.stats_decay).to(self.device)
        # bf16: GEMMs and activations in bfloat16 from the fp32 master weights (as autocast)
        self.compute_dtype = torch.bfloat16 if self.ppo.amp == "bf16" else torch.float32
        if self.compute_dtype == torch.bfloat16 and self.device.type == "cpu":
            # measured on a 2-core AVX2 EPYC: 6.8k vs 110k transitions x epochs/s (bench learn)
            warn_if_emulated(_log, "ppo.amp=bf16", "ppo.amp=none")
        self.side_by_side = False  # set per update: the nets' threads (see _one_thread_per_net)
        self.iteration = 0  # updates done
        self.train_policy = True  # False during an update that fits the value net only
        self.version = 0  # version of the current weights (bumped by each update)
        # the fused minibatch step (learn/fused_step.py): autograd's arithmetic without its
        # graph; False runs the autograd graph (the reference it is tested against)
        self.fused = True
        self._gather = BlockGather()
        # `skurl bench train` sets a dict here: wall seconds of the update by phase (mark())
        self.phase_seconds: dict[str, float] | None = None
        self._phase_start = 0.0
        self._loss_grads = policy_loss_grads
        if cfg.train.compile:  # fused kernels, not bit-identical: off by default
            self._loss_grads = torch.compile(policy_loss_grads, dynamic=True)

    def lr_at(self, iteration: int) -> float:
        if self.ppo.lr_schedule == "constant":
            return self.ppo.lr
        if self.ppo.lr_schedule == "adaptive":  # kept in the optimizer's state (so in checkpoints)
            return float(self.optimizer.param_groups[0]["lr"])
        total = max(self.cfg.train.iterations, 1)
        return self.ppo.lr * max(1.0 - iteration / total, 1.0 / total)

    def adapt_lr(self, kl: float) -> None:
        """lr_schedule=adaptive: after an iteration whose policy moved by approx KL `kl`
        (its last epoch's mean), scale the next iteration's learning rate by 1/1.5 when
        kl > 2 lr_kl and by 1.5 when kl < lr_kl / 2, within [1e-5, 1e-2]: the adaptive
        schedule of Rudin et al. (2022), "Learning to Walk in Minutes Using Massively
        Parallel Deep RL" (rsl_rl). A fixed decay freezes a policy whose advantages are
        small against their noise long before it is sharp; this keeps it moving at the
        pace the trust region allows."""
        if self.ppo.lr_schedule != "adaptive":
            return
        lr = float(self.optimizer.param_groups[0]["lr"])
        if kl > 2.0 * self.ppo.lr_kl:
            lr = max(lr / ADAPTIVE_LR_FACTOR, ADAPTIVE_LR_BOUNDS[0])
        elif kl < 0.5 * self.ppo.lr_kl:
            lr = min(lr * ADAPTIVE_LR_FACTOR, ADAPTIVE_LR_BOUNDS[1])
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def ent_coef_at(self, iteration: int) -> float:
        """The entropy bonus of update `iteration`: constant, or decaying linearly to 0 at
        train.iterations (exploration early, a sharp policy at the end)."""
        if self.ppo.ent_schedule == "constant":
            return self.ppo.ent_coef
        return self.ppo.ent_coef * max(1.0 - iteration / max(self.cfg.train.iterations, 1), 0.0)

    def centered(self, rewards: torch.Tensor, padded: bool = False) -> tuple[torch.Tensor, float]:
        """Rewards minus the batch's mean reward per SKU-day when ppo.average_reward is on
        (and that mean). The differential (average-reward) return, as in Schneckenreither
        & Moser (2023) "Average-reward reinforcement learning in semi-Markov decision
        processes" and Zhang & Ross (2021) "On-Policy Deep Reinforcement Learning for the
        Average-Reward Criterion": with gamma near 1 the discounted values grow like
        mean / (1 - gamma) and the differences between states that GAE needs drown in
        that offset; centring leaves the relative values (the bias function) alone.
        The estimate is the global batch mean (all ranks): 10^5 SKU-days make it precise
        and it needs no state in checkpoints. A padded DDP rank contributes nothing.
        ppo.average_reward_by=sku subtracts each SKU's own mean over the batch's days instead
        (rewards [T, N]: a column's mean; no all_reduce, a SKU's days are on one rank)."""
        if not self.ppo.average_reward:
            return rewards, 0.0
        mean, _ = allreduce_mean_std(rewards[:0] if padded else rewards)
        if self.ppo.average_reward_by == "sku":
            return rewards - rewards.mean(dim=0, keepdim=True), float(mean)
        return rewards - mean, float(mean)

    def update(self, rollout: Rollout, train_policy: bool = True) -> dict[str, float]:
        """One PPO iteration on `rollout`; bumps iteration and version. Returns stats.
        train_policy=False fits the value net only (the policy net is left unchanged)."""
        self.train_policy = bool(train_policy)
        self.mark(None)
        rollout = self._sample_skus(rollout)
        data = self._to_device(rollout)
        self.mark("sample and copy")
        batch, prep_stats = self._prepare(data, behaviour=rollout.policy_version == self.version)
        self.mark("prepare (normalize, behaviour outputs, GAE)")
        lr = self.lr_at(self.iteration)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        stats = self._epochs(batch)
        if self.train_policy:  # a frozen policy's KL of 0 says nothing about the step size
            self.adapt_lr(stats["last_epoch_kl"])
        self.iteration += 1
        self.version += 1
        get_metrics().record_update(stats, self.version)  # every mode's /metrics shows it
        return {**prep_stats, **stats, "lr": lr, "ent_coef": self.ent_coef_at(self.iteration - 1),
                "transitions": float(batch.actions.numel()), **self.sample_stat(rollout.num_skus)}

    def sample_stat(self, trained_skus: int) -> dict[str, float]:
        """{"sample_skus": SKUs trained on} under ppo.sample_skus (the run report says the
        update saw a sample), else nothing."""
        return {"sample_skus": float(trained_skus)} if self.ppo.sample_skus else {}

    def _sample_skus(self, rollout: Rollout) -> Rollout:
        index = self.sample_index(rollout.num_skus)
        return rollout if index is None else rollout.select_skus(index)

    def sample_index(self, num_skus: int, iteration: int | None = None) -> np.ndarray | None:
        """The sorted SKU columns this iteration's update (or update `iteration`'s: a
        collection ahead asks for the next) trains on out of `num_skus` (ppo.sample_skus),
        None for all. A rollout of exactly these columns is taken as is, so a caller may
        gather only them (the decoupled learner decodes no others)."""
        k = self.ppo.sample_skus
        if k == 0 or k >= num_skus:
            return None
        gen = seeded_generator(self.cfg.train.seed, self.iteration if iteration is None else iteration, SKU_SAMPLE_KEY)
        return torch.randperm(num_skus, generator=gen)[:k].sort().values.numpy()

    def _to_device(self, rollout: Rollout) -> dict[str, torch.Tensor]:
        keys = (Columns.OBS, Columns.ACTIONS, Columns.LOGP, Columns.VALUES, Columns.REWARDS,
                Columns.DONES, Columns.TERMINALS, Columns.LAST_OBS, Columns.BOOTSTRAP, Columns.SKU_IDS)
        with warnings.catch_warnings():
            # Rollouts from Ray's object store are read-only views; the learner only reads them.
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            return {k: torch.from_numpy(np.ascontiguousarray(getattr(rollout, k))).to(self.device) for k in keys}

    @torch.no_grad()
    def _prepare(self, data: dict[str, torch.Tensor], behaviour: bool) -> tuple[PreparedBatch, dict[str, float]]:
        steps, n, dim = data[Columns.OBS].shape
        obs = data[Columns.OBS].reshape(steps * n, dim)
        actions = data[Columns.ACTIONS].reshape(-1).long()
        if self.ppo.normalize_obs:
            before = self.obs_stats_before_update()
            self.model.obs_norm.update(obs, self.ppo.stats_decay)
            self.preserve_obs_norm(before)
        norm_obs = torch.cat([self.model.normalize(c) for c in obs.split(EVAL_ROWS)])
        log_ratio = None  # log pi/mu of a stale rollout's actions under collect.staleness > 0
        weight = None
        if behaviour or self.cfg.collect.staleness > 0:  # recomputed: bf16 collectors cannot bias the ratio
            old_logp, values = self._logp_values(norm_obs, actions)
            bootstrap = self._values(self.model.normalize(data[Columns.LAST_OBS]))
            if not behaviour:  # near-on-policy: corrected for the policy that collected
                old_logp, log_ratio, weight = self.stale_ratio(data, old_logp)
        else:  # stale rollout: only the recorded behaviour outputs are right
            old_logp, values, bootstrap = recorded_behaviour(data)
        # Centred first, so the scale is that of the differential returns, not of the
        # mean reward piling up over an episode (which is ~1/(1 - gamma) times larger).
        rewards, avg_reward = self.centered(data[Columns.REWARDS].float())
        if self.ppo.normalize_reward:
            by_sku = (data[Columns.SKU_IDS],) if self.ppo.reward_scale == "sku" else ()
            old_std = self.reward_scale_before_update()
            self.reward_scaler.update(rewards, data[Columns.DONES], *by_sku)
            rewards = self.reward_scaler.scale(rewards, *by_sku)
            values, bootstrap = self.preserve_values(old_std, values, bootstrap)
        adv, returns = self.advantages_and_returns(rewards, values.reshape(steps, n), bootstrap, data, log_ratio)
        adv, returns = adv.reshape(-1), returns.reshape(-1)
        mean, std = allreduce_mean_std(adv)
        batch = PreparedBatch(norm_obs, actions, old_logp, (adv - mean) / (std + 1e-8), returns, values, weight)
        stats = {
            **ratio_stats(log_ratio, self.cfg.collect.vtrace_rho_bar),
            "explained_variance": _explained_variance(values, returns),
            "value_mean": float(values.mean()),
            "return_mean": float(returns.mean()),
            "reward_scale": float(self.reward_scaler.stats.std) if self.ppo.normalize_reward else 1.0,
            "average_reward": avg_reward,
        }
        return batch, stats

    def stale_ratio(self, data: dict[str, torch.Tensor],
                    logp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """For a stale rollout whose actions have log-probs `logp` under the current policy:
        the log-probs PPO's ratio is clipped against, log pi/mu for the targets (None: GAE)
        and the surrogate's weight (None: 1), by collect.staleness_correction and
        collect.staleness_clip (docs/near_on_policy.md)."""
        t = self.cfg.collect
        if t.staleness_correction == "none":  # as if on-policy: the baseline the correction is judged by
            return logp, None, None
        mu, log_ratio = behaviour_logp(data, logp)
        if t.staleness_clip == "behaviour":
            return mu, log_ratio, None
        return logp, log_ratio, log_ratio.exp().clamp(max=t.vtrace_rho_bar)

    def obs_stats_before_update(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """ppo.preserve_obs_norm: the observation moments before this iteration's update
        (None at the first update, when the nets have learnt nothing to preserve)."""
        norm = self.model.obs_norm
        if not self.ppo.preserve_obs_norm or float(norm.count) == 0:
            return None
        return norm.mean.clone(), norm.var.clone()

    def preserve_obs_norm(self, before: tuple[torch.Tensor, torch.Tensor] | None) -> None:
        """ppo.preserve_obs_norm: fold the change of the observation statistics into both
        nets' first layers (the nets compute the same function of the raw observation)."""
        if before is not None:
            absorb_normalizer_change([self.model.policy, self.model.value], self.model.obs_norm, *before)

    def reward_scale_before_update(self) -> float | None:
        """ppo.preserve_values: the global reward scale before this iteration's update
        (None at the first update, when the value net has learnt nothing to preserve)."""
        if not self.ppo.preserve_values or float(self.reward_scaler.stats.count) == 0:
            return None
        return float(self.reward_scaler.stats.std)

    def preserve_values(self, old_std: float | None, values: torch.Tensor,
                        bootstrap: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """ppo.preserve_values: after the reward scale moved from old_std, rescale the value
        net's output layer (and this iteration's values) by old_std / new std, so that the
        critic's predictions are unchanged in money units (PopArt's output preservation)."""
        if old_std is None:
            return values, bootstrap
        factor = old_std / float(self.reward_scaler.stats.std)
        rescale_output_layer(self.model.value, factor)
        return values * factor, bootstrap * factor

    def advantages_and_returns(self, rewards: torch.Tensor, values: torch.Tensor, bootstrap: torch.Tensor,
                               data: dict[str, torch.Tensor],
                               log_ratio: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """GAE(gamma, gae_lambda) advantages [T, N] and the value targets: the same GAE's
        returns, or TD(vf_lambda) returns when ppo.vf_lambda is set apart. With `log_ratio`
        (a stale rollout's log pi/mu, [B]) and collect.staleness_correction=vtrace, V-trace's
        (learn/vtrace.py), which equal GAE's where pi = mu."""
        dones, terminals = data[Columns.DONES], data[Columns.TERMINALS]
        targets = self._targets(log_ratio, values.shape)
        adv, returns = targets(rewards, values, bootstrap, dones, terminals, self.ppo.gamma, self.ppo.gae_lambda)
        if 0 <= self.ppo.vf_lambda != self.ppo.gae_lambda:
            _, returns = targets(rewards, values, bootstrap, dones, terminals, self.ppo.gamma, self.ppo.vf_lambda)
        return adv, returns

    def _targets(self, log_ratio: torch.Tensor | None, shape: torch.Size) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
        """gae, or vtrace bound to the rollout's ratios and the config's truncation levels."""
        t = self.cfg.collect
        if log_ratio is None or t.staleness_correction == "none":
            return gae
        return partial(vtrace, log_ratio=log_ratio.reshape(shape), rho_bar=t.vtrace_rho_bar, c_bar=t.vtrace_c_bar)

    def _logp_values(self, norm_obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Behaviour log-probs and values in the update's compute dtype, by the same
        arithmetic as its minibatches (twin_outputs): the first minibatch's ratio is 1."""
        logps, values = [], []
        for x, a in zip(norm_obs.split(EVAL_ROWS), actions.split(EVAL_ROWS), strict=True):
            logits, v = twin_outputs(self.model.policy, self.model.value, x, self.compute_dtype)
            logps.append(torch.log_softmax(logits, dim=-1).gather(-1, a.unsqueeze(-1)).squeeze(-1))
            values.append(v)
        return torch.cat(logps), torch.cat(values)

    def _values(self, norm_obs: torch.Tensor) -> torch.Tensor:
        """Values of normalized observations, as _logp_values computes them."""
        return twin_outputs(self.model.policy, self.model.value, norm_obs, self.compute_dtype)[1]

    def _epochs(self, batch: PreparedBatch) -> dict[str, float]:
        with self._one_thread_per_net():
            return self._run_epochs(batch)

    @contextmanager
    def _one_thread_per_net(self) -> Iterator[None]:
        """ppo.side_by_side on a CPU with 2+ torch threads: one intra-op thread while the
        policy and value nets train side by side on two (restored afterwards)."""
        threads = torch.get_num_threads()
        self.side_by_side = self.nets_side_by_side()
        if not self.side_by_side:
            yield
            return
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(threads)
            self.side_by_side = False

    def nets_side_by_side(self) -> bool:
        """Whether an update trains the policy and value nets side by side, one thread each."""
        return self.ppo.side_by_side and self.device.type == "cpu" and torch.get_num_threads() >= 2

    def _run_epochs(self, batch: PreparedBatch) -> dict[str, float]:
        total = batch.actions.numel()
        batch.obs = batch.obs.to(self.compute_dtype)  # cast once, not per minibatch
        sums: torch.Tensor | None = None  # loss stats + grad norm, summed over minibatches
        keys: list[str] = []
        steps, epochs_run, last_kl = 0, 0, 0.0
        params = list(self.model.parameters())
        clip_step = self._deferred_clip_step()
        for epoch in range(self.ppo.epochs):
            gen = seeded_generator(self.cfg.train.seed, self.iteration, MINIBATCH_KEY, epoch)
            perm = torch.randperm(total, generator=gen).to(self.device)
            epoch_sums: torch.Tensor | None = None
            for mb in shuffled_minibatches(batch, perm, self.ppo.minibatch, self._gather):
                self.mark("minibatch gather")
                stats = self._minibatch_grads(mb, clip_step)
                if clip_step is None:
                    stats["grad_norm"] = torch.nn.utils.clip_grad_norm_(params, self.ppo.max_grad_norm)
                    self.mark("grad-norm clip")
                    self.optimizer.step()
                    self.mark("Adam")
                keys = list(stats)
                # one tensor per minibatch, no host sync: read once per epoch
                row = torch.stack([v.detach().float() for v in stats.values()])
                epoch_sums = row if epoch_sums is None else epoch_sums + row
                self.mark("stats")
            if epoch_sums is None:  # an empty batch: nothing to train on
                break
            sums = epoch_sums if sums is None else sums + epoch_sums
            n_mb = -(-total // self.ppo.minibatch)
            steps, epochs_run = steps + n_mb, epochs_run + 1
            last_kl = float(epoch_sums[keys.index("approx_kl")]) / n_mb
            if self.ppo.target_kl > 0 and last_kl > self.ppo.target_kl:
                break
        if clip_step is not None:  # the last minibatch's step
            clip_step.flush()
            self.mark("Adam")
        out = {k: float(v) / max(steps, 1) for k, v in zip(keys, (sums if sums is not None else []), strict=True)}
        out["epochs"] = float(epochs_run)
        out["last_epoch_kl"] = last_kl
        return out

    def _deferred_clip_step(self) -> DeferredClipStep | None:
        """The fused update side by side clips and steps each net inside its next piece
        (learn/twin_step.py); otherwise None: clip_grad_norm_ and step after each minibatch."""
        if not (self.fused and self.side_by_side):
            return None
        return DeferredClipStep(self.optimizer, list(self.model.policy.parameters()),
                                list(self.model.value.parameters()), self.ppo.max_grad_norm)

    def _forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return twin_forward(self.model.policy, self.model.value, x, self.compute_dtype, self.side_by_side)

    def mark(self, phase: str | None) -> None:
        """With phase_seconds set: the wall time since the last mark goes to `phase`
        (None: just start the clock)."""
        if self.phase_seconds is None:
            return
        now = time.perf_counter()
        if phase is not None:
            self.phase_seconds[phase] = self.phase_seconds.get(phase, 0.0) + now - self._phase_start
        self._phase_start = now

    def _minibatch_grads(self, mb: PreparedBatch, clip_step: DeferredClipStep | None = None) -> dict[str, torch.Tensor]:
        """Set the parameters' gradients of the PPO loss on `mb`; its stats (with `clip_step`,
        also the last minibatch's clip and Adam step and this one's grad_norm)."""
        ent_coef = self.ent_coef_at(self.iteration)
        if not self.fused:
            loss, stats = self._minibatch_loss(mb)
            self.mark("forward and loss (autograd)")
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.mark("backward (autograd)")
            return stats
        return fused_minibatch_grads(
            self.model.policy, self.model.value, mb.obs, mb.actions, mb.old_logp, mb.advantages, mb.returns,
            mb.weight, clip=self.ppo.clip, vf_coef=self.ppo.vf_coef, ent_coef=ent_coef,
            train_policy=self.train_policy, dtype=self.compute_dtype, side_by_side=self.side_by_side,
            grads_fn=self._loss_grads, mark=self.mark if self.phase_seconds is not None else None,
            clip_step=clip_step)

    def _minibatch_loss(self, mb: PreparedBatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return ppo_minibatch_loss(self._forward, mb, self.ppo.clip, self.ppo.vf_coef, self.ent_coef_at(self.iteration),
                                  self.train_policy)

    def weights(self) -> dict[str, torch.Tensor]:
        """The model's state (weights + normalizer) as contiguous CPU tensors, for publishing."""
        return {k: v.detach().to("cpu").contiguous().clone() for k, v in self.model.state_dict().items()}


def _explained_variance(pred: torch.Tensor, target: torch.Tensor) -> float:
    var = float(target.var())
    if var == 0 or math.isnan(var):
        return float("nan")
    return 1.0 - float((target - pred).var()) / var
