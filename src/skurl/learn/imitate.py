"""Warm start by imitation: clone a tuned baseline into the policy net before PPO.

From random weights PPO spends its first iterations rediscovering what a tuned heuristic
already knows (order about what sells, more when the pipeline is empty). Supervised
pretraining on an expert's decisions before RL is the recipe of AlphaGo's policy network
(Silver et al. 2016) and of DQfD (Hester et al. 2018); here the expert is one of skurl's
own baselines, tuned by simulation on the training SKUs (policy/tuning.py), so the run
starts at the baseline's cost and PPO spends its iterations on improving it.

More: docs/internals.md (learn/imitate.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F

from skurl.buffer.minibatch import seeded_generator
from skurl.policy.actions import ActionGrid, bind_to_env
from skurl.sim.api import Env, RawState

if TYPE_CHECKING:
    from skurl.policy.nets import ActorCritic
    from skurl.sim.episode import DecisionRule

WARM_START_KEY = 3  # seeded_generator key (learner.py uses 1 and 2)
# Episode numbers of the recorded teacher episodes: PPO collects episodes 0..iterations-1
# of the run seed, so these never replay a training episode's demand.
TEACHER_EPISODE0 = 2**40
CLONE_LR = 1e-3  # Adam's default: a supervised fit, not a trust-region step
CLONE_MINIBATCH = 2048
EVAL_ROWS = 4096  # rows per no-grad pass (as the learner's)


def unit_table(grid: ActionGrid, raw: RawState, n: int) -> np.ndarray:
    """Units (float64 [n, A]) that each action of `grid` orders in state `raw`."""
    if grid.kind == "cover":
        return grid.unit_table(raw, slice(0, n))
    forecast = raw.forecast[:, 0]
    return np.stack([grid.to_orders_checked(np.full(n, k), forecast)[0] for k in range(grid.n)], axis=1)


def nearest_actions(grid: ActionGrid, raw: RawState, orders: np.ndarray) -> np.ndarray:
    """Per SKU, the action whose units are closest to `orders` [N]; int64 [N]. Of ties, the
    one nearest the grid's neutral action (the cover grid's offset 0: several safety factors
    all order nothing when stock is high, and a teacher on the tuned centre then keeps one
    label, offset 0, in every state), else the first (the smaller order on ordered grids)."""
    table = unit_table(grid, raw, orders.shape[0])
    gap = np.nan_to_num(np.abs(table - np.asarray(orders, np.float64)[:, None]), nan=np.inf)
    neutral = grid.neutral_index
    if neutral is None:
        return np.argmin(gap, axis=1).astype(np.int64)
    best = gap == gap.min(axis=1, keepdims=True)
    distance = np.abs(np.arange(grid.n) - neutral).astype(np.float64)
    return np.argmin(np.where(best, distance[None, :], np.inf), axis=1).astype(np.int64)


@dataclass
class Demonstrations:
    obs: np.ndarray  # float32 [M, D]: features of the recorded SKU-days
    labels: np.ndarray  # int64 [M]: the grid action nearest to the teacher's order
    reward_mean: float  # the grid-rounded teacher's mean reward per SKU-day (all SKUs)
    exact: float  # share of the teacher's orders the grid reproduces exactly
    targets: np.ndarray | None = None  # float32 [M, A]: the fit's target distributions, where
    # the teacher gives more than a label (DCL's softmax of Q estimates); None: the labels


    def scalars(self) -> dict[str, float]:
        return {"warm_start_rows": float(self.labels.shape[0]), "warm_start_reward_mean": self.reward_mean,
                "warm_start_grid_exact": self.exact}


def recorded_rows(num_skus: int, max_skus: int, seed: int) -> np.ndarray:
    """The rows whose decisions are kept: all, or a seeded sample of `max_skus` (sorted)."""
    if num_skus <= max_skus:
        return np.arange(num_skus)
    gen = seeded_generator(seed, WARM_START_KEY, -1)
    return torch.randperm(num_skus, generator=gen)[:max_skus].sort().values.numpy()


def record(env: Env, teacher: DecisionRule, grid: ActionGrid, *, seed: int, episodes: int,
           max_skus: int) -> Demonstrations:
    """Run `episodes` whole episodes of `teacher` (a Policy) on `env` from episode
    TEACHER_EPISODE0 of `seed`; keep features and nearest-action labels of up to
    `max_skus` SKUs per day."""
    grid = bind_to_env(grid, env)
    n, days = env.num_skus, int(env.info()["days"])
    rows = recorded_rows(n, max_skus, seed)
    obs_out: list[np.ndarray] = []
    label_out: list[np.ndarray] = []
    reward_sum, exact, decisions = 0.0, 0, 0
    for e in range(episodes):
        reset = getattr(teacher, "reset", None)
        if callable(reset):
            reset()
        obs = env.reset(seed, TEACHER_EPISODE0 + e)
        for _ in range(days):
            orders = np.asarray(teacher.orders(obs), np.float64)
            labels = nearest_actions(grid, obs.raw, orders)
            units, _ = grid.orders_for(labels, obs.raw)
            exact += int((units == orders).sum())
            decisions += n
            obs_out.append(np.asarray(obs.features[rows], np.float32))  # the take copies
            label_out.append(labels[rows])
            result = env.step(units)
            reward_sum += float(result.reward.sum(dtype=np.float64))
            obs = result.obs
            if result.done:
                break
    return Demonstrations(np.concatenate(obs_out), np.concatenate(label_out),
                          reward_sum / max(decisions, 1), exact / max(decisions, 1))


def soft_targets(labels: torch.Tensor, n_actions: int, smoothing: float) -> torch.Tensor:
    """Target distributions [M, A]: 1 - smoothing on the label, smoothing / 2 on each
    neighbour (all of it on the one neighbour at either end of the grid). Every grid is
    ordered (units, multipliers, safety factors), so the neighbours are the nearest
    decisions: the clone explores around the baseline, not across the whole grid."""
    target = torch.zeros(labels.shape[0], n_actions, device=labels.device)
    if smoothing == 0.0 or n_actions == 1:
        return target.scatter_(1, labels[:, None], 1.0)
    lower = torch.where(labels > 0, labels - 1, labels + 1)
    upper = torch.where(labels < n_actions - 1, labels + 1, labels - 1)
    target.scatter_(1, labels[:, None], 1.0 - smoothing)
    target.scatter_add_(1, lower[:, None], torch.full_like(target[:, :1], smoothing / 2))
    target.scatter_add_(1, upper[:, None], torch.full_like(target[:, :1], smoothing / 2))
    return target


def clone(model: ActorCritic, demos: Demonstrations, *, steps: int, smoothing: float, seed: int,
          normalize_obs: bool, stats_decay: float, max_grad_norm: float,
          device: torch.device, ranks: tuple[int, int] = (0, 1)) -> dict[str, float]:
    """Fit model.policy (an ActorCritic's) to the demonstrations by cross-entropy against
    their targets, else soft_targets of their labels, for `steps` minibatch steps
    (reshuffled passes over the data); the value net is left alone. Returns the final
    loss, the share of labels the greedy policy reproduces and the clone's mean entropy.
    `ranks` (rank, world) > 1 rank: every rank holds all the demonstrations and takes its
    slice of each minibatch; the gradients are summed over the ranks (a process group),
    so each rank takes the step one process would, within float rounding."""
    obs = torch.from_numpy(demos.obs).to(device)
    labels = torch.from_numpy(demos.labels).to(device)
    targets = None if demos.targets is None else torch.from_numpy(demos.targets).to(device)
    if normalize_obs:
        model.obs_norm.update(obs, stats_decay)
    with torch.no_grad():
        x = torch.cat([model.normalize(c) for c in obs.split(EVAL_ROWS)])
    params = list(model.policy.parameters())
    optimizer = torch.optim.Adam(params, lr=CLONE_LR, eps=1e-5)
    rows, done, epoch = labels.shape[0], 0, 0
    while done < steps and rows > 0:
        perm = torch.randperm(rows, generator=seeded_generator(seed, WARM_START_KEY, epoch)).to(device)
        epoch += 1
        for start in range(0, rows, CLONE_MINIBATCH):
            if done == steps:
                break
            done += 1
            index = perm[start:start + CLONE_MINIBATCH]
            size = index.shape[0]
            if ranks[1] > 1:  # this rank's slice of the minibatch
                index = index[ranks[0] * size // ranks[1]:(ranks[0] + 1) * size // ranks[1]]
            target = (soft_targets(labels[index], model.n_actions, smoothing) if targets is None
                      else targets[index])
            optimizer.zero_grad(set_to_none=True)
            if ranks[1] == 1:
                F.cross_entropy(model.policy(x[index]), target).backward()
            else:
                (F.cross_entropy(model.policy(x[index]), target, reduction="sum") / size).backward()
                _sum_over_ranks(params)
            torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
            optimizer.step()
    return _fit_stats(model, x, labels)


def _sum_over_ranks(params: list[torch.nn.Parameter]) -> None:
    """Each parameter's gradient summed over the process group's ranks (one flat all-reduce)."""
    import torch.distributed as dist

    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    for p, part in zip(params, flat.split([g.numel() for g in grads]), strict=True):
        p.grad = part.view_as(p).clone()


@torch.no_grad()
def _fit_stats(model: ActorCritic, x: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """The clone's mean -log p(label), greedy accuracy and mean entropy."""
    loss_sum, hits, entropy = 0.0, 0, 0.0
    for xs, ys in zip(x.split(EVAL_ROWS), labels.split(EVAL_ROWS), strict=True):
        logp = torch.log_softmax(model.policy(xs), dim=-1)
        loss_sum += float(F.nll_loss(logp, ys, reduction="sum"))
        hits += int((logp.argmax(-1) == ys).sum())
        entropy -= float((logp.exp() * logp).sum())
    rows = max(labels.shape[0], 1)
    return {"warm_start_nll": loss_sum / rows, "warm_start_accuracy": hits / rows,
            "warm_start_entropy": entropy / rows}
