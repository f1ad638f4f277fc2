"""Every setting of skurl as frozen dataclasses; help text per field (`skurl config keys`).

Load with `load_config(path, overrides)`: one YAML file plus `--set a.b=value` strings,
validated on construction. Sections are grouped by the part of the loop they drive.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from skurl.config.actions import ActionsConfig
from skurl.config.catalog import CatalogConfig, DemandConfig, SerialConfig, SyntheticConfig
from skurl.config.collect import CollectConfig, refuse_moved
from skurl.config.dcl import DclConfig
from skurl.config.loader import (
    apply_overrides,
    build,
    check,
    check_seed,
    opt,
    read_yaml,
    section,
    to_dict,
)
from skurl.config.services import DeployConfig, RayConfig, RpcConfig, StoreConfig, SyncConfig
from skurl.config.tracking import TrackingConfig
from skurl.config.transfers import TransfersConfig

__all__ = [
    "ActionsConfig",
    "CatalogConfig",
    "Config",
    "DclConfig",
    "DemandConfig",
    "DeployConfig",
    "EvalConfig",
    "PPOConfig",
    "PolicyConfig",
    "RayConfig",
    "RpcConfig",
    "SerialConfig",
    "SimConfig",
    "StoreConfig",
    "SyncConfig",
    "SyntheticConfig",
    "TrackingConfig",
    "TrainConfig",
    "config_to_dict",
    "load_config",
]

# the heuristic policies of policy/baselines.py (named here: eval.baselines validates against them)
POLICY_NAMES = ("base-stock", "capped-base-stock", "s-S", "constant", "forecast-base-stock", "forecast-s-S",
                "echelon-base-stock", "installation-base-stock")  # the last two: supply networks only
DEVICE_PATTERN = re.compile(r"auto|cpu|cuda(:\d+)?")


@dataclass(frozen=True)
class SimConfig:
    days: int = opt(100, "days per episode (one step = one day)")
    backorders: bool = opt(False, "false: unmet demand is lost; true: it is backordered")
    issuing: Literal["fifo", "lifo"] = opt("fifo", "which stock sells first: fifo (oldest) | lifo (newest)")
    reward: Literal["profit", "cost"] = opt("profit", "reward = revenue - costs (profit) or -costs (cost)")
    review_days: int = opt(1, "days an order should cover in the multiplier action grid")
    substitution: bool = opt(True, "move unmet demand to in-stock substitutes of the same group")
    initial_stock_days: float = opt(
        -1.0, "initial on-hand in days of demand; -1 = lead time + 1 days (a warm start)"
    )
    threads: int = opt(0, "simulator threads; 0 = all cores")
    upstream_allocation: Literal["proportional", "fair", "priority"] = opt(
        "proportional", "supply networks: how a short upstream splits its on-hand among its locations' requests: "
        "proportional (to requests) | fair (max-min equal shares) | priority (ascending sku_id) (docs/networks.md)")
    network_reward: Literal["network", "location"] = opt(
        "network", "supply networks: each location's reward is its network's mean reward per location (a shared "
        "objective: an upstream's own reward is only its holding cost) or its own")
    upstream_shortage: Literal["backorder", "cancel"] = opt(
        "backorder", "supply networks: the unshipped part of a request stays owed by the upstream (backorder) "
        "or is dropped (cancel)")
    transfers: TransfersConfig = section(TransfersConfig, "supply networks: lateral transfers between the stores "
                                         "of one upstream (docs/networks.md)")

    def __post_init__(self) -> None:
        check(self.days >= 1, "sim.days", self.days, "an integer >= 1")
        check(self.review_days >= 1, "sim.review_days", self.review_days, "an integer >= 1")
        check(self.threads >= 0, "sim.threads", self.threads, "an integer >= 0")
        check(self.initial_stock_days == -1 or self.initial_stock_days >= 0,
              "sim.initial_stock_days", self.initial_stock_days, "-1 or a number >= 0")


@dataclass(frozen=True)
class PolicyConfig:
    actions: ActionsConfig = section(ActionsConfig, "the discrete action grid")
    hidden: list[int] = opt([256, 256], "hidden layer sizes of the policy and value networks")

    def __post_init__(self) -> None:
        check(len(self.hidden) >= 1 and all(h >= 1 for h in self.hidden), "policy.hidden", self.hidden,
              "a non-empty list of positive integers")


@dataclass(frozen=True)
class PPOConfig:
    epochs: int = opt(10, "PPO epochs (K) over each iteration's data")
    minibatch: int = opt(1024, "transitions per minibatch")
    lr: float = opt(3e-4, "Adam learning rate")
    clip: float = opt(0.2, "PPO ratio clip")
    gamma: float = opt(0.99, "discount per day")
    gae_lambda: float = opt(0.95, "GAE lambda")
    ent_coef: float = opt(0.01, "entropy bonus coefficient")
    vf_coef: float = opt(0.5, "value loss coefficient")
    max_grad_norm: float = opt(0.5, "gradient-norm clip (after the all-reduce)")
    sample_skus: int = opt(0, "train on this many sampled SKUs per iteration; 0 = all collected")
    normalize_obs: bool = opt(True, "running observation normalization")
    normalize_reward: bool = opt(True, "running reward scaling")
    lr_schedule: Literal["constant", "linear", "adaptive"] = opt(
        "linear", "learning rate over the run: constant | linear (decays to 0 at train.iterations) | "
        "adaptive (steered by each iteration's approx KL towards ppo.lr_kl; starts at ppo.lr)"
    )
    lr_kl: float = opt(0.01, "lr_schedule=adaptive: the approx KL per iteration the learning rate is steered to")
    amp: Literal["none", "bf16"] = opt(
        "none", "precision of the update: none (fp32) | bf16 (bf16 matmuls, fp32 master weights and loss; fast only on CPUs with native bf16 or on GPUs)"
    )
    side_by_side: bool = opt(
        True, "on CPU with 2+ torch threads, train the policy and value nets side by side, one "
        "thread each (minibatch ops are too small to split well over threads, and threads "
        "that wait for each other stall badly on a shared machine)")
    target_kl: float = opt(0.0, "stop an iteration's epochs early once approx KL exceeds this; 0 = never")
    reward_scale: Literal["global", "sku"] = opt(
        "global", "reward scaling: global (one running std of discounted returns) | sku (one per SKU, "
        "for catalogs whose money scales differ by orders of magnitude)"
    )
    ent_schedule: Literal["constant", "linear"] = opt(
        "constant", "entropy bonus over the run: constant | linear (decays to 0 at train.iterations)"
    )
    average_reward: bool = opt(
        False, "subtract the batch's mean reward per SKU-day before GAE (average-reward criterion: "
        "with gamma near 1, values stay relative; for long-run cost objectives)"
    )
    # sku: on a catalog of 28 textbook SKU types (benchmarks/hetero_train.py, configs/lost_sales.yaml,
    # 40 iterations) +0.21% against each type's best capped base-stock where one global mean left
    # +36% (the per-type drift of the centred rewards made PPO collapse); Zipkin's L2p9 unchanged
    # (+0.18% both).
    average_reward_by: Literal["global", "sku"] = opt(
        "sku", "with ppo.average_reward: subtract one mean reward over the whole batch (global) or "
        "each SKU's own mean over the batch's days (sku: a catalog mixing SKU types whose costs per day "
        "differ leaves no per-type drift for the value net to learn)"
    )
    stats_decay: float = opt(
        0.9, "weight kept by the history of the observation/reward statistics at each iteration "
        "(1 = plain running stats; < 1 forgets the early, untrained policy's states)"
    )
    vf_lambda: float = opt(
        -1.0, "lambda of the value net's TD(lambda) targets, apart from the advantages' gae_lambda "
        "(lower: less noisy targets, more bootstrapping); < 0 = the same as gae_lambda"
    )
    preserve_obs_norm: bool = opt(
        False, "when the running observation statistics change, adjust both nets' first layers so "
        "they compute the same function of the raw observation (only gradient steps change the "
        "policy; the statistics' drift does not)"
    )
    preserve_values: bool = opt(
        False, "when the running reward scale changes, rescale the value net's output layer so its "
        "predictions stay the same in money units (PopArt's output preservation; needs "
        "reward_scale=global)"
    )

    def __post_init__(self) -> None:
        check(self.epochs >= 1, "ppo.epochs", self.epochs, "an integer >= 1")
        check(self.minibatch >= 1, "ppo.minibatch", self.minibatch, "an integer >= 1")
        check(self.lr > 0, "ppo.lr", self.lr, "a number > 0")
        check(0 < self.gamma <= 1, "ppo.gamma", self.gamma, "(0, 1]")
        check(0 <= self.gae_lambda <= 1, "ppo.gae_lambda", self.gae_lambda, "[0, 1]")
        check(self.clip > 0, "ppo.clip", self.clip, "a number > 0")
        check(self.max_grad_norm > 0, "ppo.max_grad_norm", self.max_grad_norm, "a number > 0")
        check(self.sample_skus >= 0, "ppo.sample_skus", self.sample_skus, "an integer >= 0")
        check(self.target_kl >= 0, "ppo.target_kl", self.target_kl, "a number >= 0")
        check(0 < self.stats_decay <= 1, "ppo.stats_decay", self.stats_decay, "a number in (0, 1]")
        check(self.lr_kl > 0, "ppo.lr_kl", self.lr_kl, "a number > 0")
        check(self.vf_lambda <= 1, "ppo.vf_lambda", self.vf_lambda, "a number <= 1 (< 0: gae_lambda)")
        check(not (self.preserve_values and self.reward_scale == "sku"), "ppo.preserve_values",
              self.preserve_values, "false with ppo.reward_scale=sku (one value head cannot follow per-SKU scales)")


@dataclass(frozen=True)
class TrainConfig:
    iterations: int = opt(50, "training iterations (collect + learn + publish)")
    algo: Literal["ppo", "dcl"] = opt(
        "ppo", "how an iteration improves the policy: ppo = collect rollouts and take PPO steps; dcl = "
        "Deep Controlled Learning (docs/dcl.md): label sampled states with their best action by "
        "common-random-number rollouts (settings: dcl.*) and fit the policy to the labels"
    )
    seed: int = opt(0, "run seed: demand draws, network init, sampling")
    checkpoint_every: int = opt(5, "iterations between checkpoints")
    eval_every: int = opt(5, "iterations between evaluations on held-out seeds")
    device: str = opt("auto", "learner device: auto | cpu | cuda | cuda:N")
    torch_threads: int = opt(0, "torch intra-op threads; 0 = all cores")
    compile: bool = opt(
        False, "torch.compile the learner's per-minibatch loss and its gradient into fused kernels "
        "(compiles on the first update; needs a C++ compiler on CPU). Off by default: not bit-identical "
        "to the default update, whose arithmetic is autograd's own (docs/performance.md)"
    )
    keep_checkpoints: int = opt(3, "checkpoints kept in RUN_DIR/checkpoints (older ones are deleted)")
    keep_best: bool = opt(
        False, "the run's result is the evaluated policy with the best objective on a validation seed "
        "(never a held-out one), kept in RUN_DIR/best: the final eval.json and `skurl eval --run` use it"
    )
    warm_start: Literal["none", "base-stock", "capped-base-stock", "s-S", "constant", "forecast-base-stock",
                         "forecast-s-S", "echelon-base-stock"] = opt(
        "none", "before PPO, tune this baseline on the training SKUs and clone it into the policy net "
        "(behaviour cloning on its decisions); none = start from random weights"
    )
    warm_start_episodes: int = opt(2, "training episodes of the tuned baseline recorded for cloning")
    warm_start_skus: int = opt(4096, "at most this many SKUs' decisions recorded per cloning episode")
    warm_start_steps: int = opt(1000, "minibatch steps (2048 decisions each) of the cloning fit")
    warm_start_smoothing: float = opt(
        0.2, "probability the cloned policy puts on the two actions next to the baseline's (half "
        "each): a clone that never deviates gives PPO nothing to compare"
    )
    warm_start_critic: int = opt(
        3, "after cloning, PPO iterations that train only the value net (the policy stays the clone "
        "until its advantages come from a critic of it, not from random weights)"
    )

    def __post_init__(self) -> None:
        check(self.iterations >= 0, "train.iterations", self.iterations, "an integer >= 0")
        check_seed(self.seed, "train.seed")
        check(DEVICE_PATTERN.fullmatch(self.device) is not None, "train.device", self.device,
              "auto, cpu, cuda or cuda:N")
        check(self.checkpoint_every >= 1, "train.checkpoint_every", self.checkpoint_every, ">= 1")
        check(self.eval_every >= 0, "train.eval_every", self.eval_every, "an integer >= 0 (0 = only at the end)")
        check(self.keep_checkpoints >= 1, "train.keep_checkpoints", self.keep_checkpoints, "an integer >= 1")
        check(self.torch_threads >= 0, "train.torch_threads", self.torch_threads, "an integer >= 0")
        check(self.warm_start_episodes >= 1, "train.warm_start_episodes", self.warm_start_episodes, "an integer >= 1")
        check(self.warm_start_skus >= 1, "train.warm_start_skus", self.warm_start_skus, "an integer >= 1")
        check(self.warm_start_steps >= 0, "train.warm_start_steps", self.warm_start_steps, "an integer >= 0")
        check(0.0 <= self.warm_start_smoothing < 1.0, "train.warm_start_smoothing", self.warm_start_smoothing,
              "a number in [0, 1)")
        check(self.warm_start_critic >= 0, "train.warm_start_critic", self.warm_start_critic, "an integer >= 0")


@dataclass(frozen=True)
class EvalConfig:
    days: int = opt(200, "days simulated per evaluation episode (after warm-up)")
    warmup: int = opt(50, "days simulated before costs are counted")
    seed: int = opt(10_000, "first held-out seed for evaluation (training never uses it)")
    skus: int = opt(0, "SKUs evaluated; 0 = the whole catalog")
    tune_sku_days: int = opt(
        2_000_000, "SKU-days simulated per candidate when a baseline is tuned per SKU (replicas of a small "
        "catalog, up to 16 per 2,000,000): each SKU's pick is made on its own simulation, so fewer "
        "SKU-days pick more on noise (docs/dcl.md: 4,400 SKUs, 2 M: +1.95% against per-type tuning, 8 M: +0.75%)"
    )
    tune_max_skus: int = opt(
        50_000, "a baseline tuned per SKU on a larger catalog is tuned on a stratified sample of about this many "
        "SKUs (whole substitution groups), and every other SKU takes the median knob of the tuned SKUs most like "
        "it (policy/tuning_sample.py); 0 = tune every SKU"
    )
    network_tuning: str = opt(
        "per-network", "how echelon-base-stock and installation-base-stock are tuned on a catalog with supply "
        "networks: per-network (one safety factor per network and echelon index, each network's pick checked on "
        "fresh episodes against the shared one) or per-echelon (one factor per echelon index shared by every "
        "network; docs/networks.md, Baselines)"
    )
    baselines: list[str] = opt(
        ["forecast-base-stock", "capped-base-stock", "forecast-s-S"], "baselines tuned per SKU and evaluated "
        "beside the trained policy (training reports compare with each; 'best baseline' is the best of them on "
        "the catalog): any of base-stock, capped-base-stock, s-S, constant, forecast-base-stock, forecast-s-S "
        "(skipped where no SKU has an order cost: it is forecast-base-stock there)"
    )

    def __post_init__(self) -> None:
        for name in self.baselines:
            check(name in POLICY_NAMES, "eval.baselines", list(self.baselines),
                  f"a list of distinct names out of {', '.join(POLICY_NAMES)}")
        check(len(set(self.baselines)) == len(self.baselines), "eval.baselines", list(self.baselines),
              "a list of distinct baseline names")
        check(self.days >= 1, "eval.days", self.days, "an integer >= 1")
        check(self.warmup >= 0, "eval.warmup", self.warmup, "an integer >= 0")
        check(self.skus >= 0, "eval.skus", self.skus, "an integer >= 0 (0 = the whole catalog)")
        check(1 <= self.tune_sku_days <= 10**10, "eval.tune_sku_days", self.tune_sku_days,
              "an integer from 1 to 10,000,000,000")
        check(self.network_tuning in ("per-network", "per-echelon"), "eval.network_tuning", self.network_tuning,
              "per-network or per-echelon")
        check(self.tune_max_skus >= 0, "eval.tune_max_skus", self.tune_max_skus, "an integer >= 0 (0 = every SKU)")
        check_seed(self.seed, "eval.seed")


@dataclass(frozen=True)
class Config:
    catalog: CatalogConfig = section(CatalogConfig, "which SKUs are simulated")
    sim: SimConfig = section(SimConfig, "simulator semantics")
    policy: PolicyConfig = section(PolicyConfig, "policy network and action grid")
    ppo: PPOConfig = section(PPOConfig, "PPO learner")
    train: TrainConfig = section(TrainConfig, "the training loop")
    collect: CollectConfig = section(CollectConfig, "the collectors: SKUs per iteration, inference, near-on-policy staleness")
    dcl: DclConfig = section(DclConfig, "train.algo=dcl: state sampling and rollout Q estimates")
    eval: EvalConfig = section(EvalConfig, "evaluation on held-out seeds")
    sync: SyncConfig = section(SyncConfig, "weight sync between learner and collectors")
    store: StoreConfig = section(StoreConfig, "rollout store (local directory or S3)")
    rpc: RpcConfig = section(RpcConfig, "gRPC transport: message limits, keepalive, deadlines")
    deploy: DeployConfig = section(DeployConfig, "decoupled deployment: servers, collectors, addresses")
    ray: RayConfig = section(RayConfig, "--mode ray: simulator and collector actors, resources")
    tracking: TrackingConfig = section(TrackingConfig, "experiment tracking and model registry (MLflow)")

    def __post_init__(self) -> None:
        check(self.train.algo == "ppo" or self.collect.staleness == 0, "collect.staleness", self.collect.staleness,
              "0 with train.algo=dcl (its states come from the learner's own policy)")


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Config from an optional YAML file plus `a.b=value` overrides, validated."""
    data: dict[str, Any] = read_yaml(path) if path else {}
    refuse_moved(data, list(overrides or []))
    data = apply_overrides(data, list(overrides or []), Config)
    return build(Config, data)


def config_to_dict(cfg: Config) -> dict[str, Any]:
    return to_dict(cfg)
