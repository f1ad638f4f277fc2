"""Settings of Deep Controlled Learning (train.algo=dcl, learn/dcl.py): how states are
sampled and their actions' Q estimated by common-random-number rollouts. Part of
`skurl.config`, apart only to keep each file to one responsibility."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from skurl.columns.strata import strata_expected, strata_names, strata_problem
from skurl.config.loader import check, opt


@dataclass(frozen=True)
class DclConfig:
    states: int = opt(20_000, "states labelled per iteration (SKU rows on sampled days of the policy's episode)")
    horizon: int = opt(
        0, "days per rollout, the fixed first order's included; 0 = 4 x (each SKU's lead time + "
        "supplier delay + 1), at least 8: an order's effect plays out over its lead time and the cycles after"
    )
    budget: int = opt(800, "rollouts per state, spent over the candidates by sequential halving")
    window: int = opt(
        3, "candidates: the policy's own action +- this many on the grid (0 = every action); a "
        "budget spread over the whole grid leaves each action too few rollouts to rank"
    )
    stratify: str = opt(
        "category", "strata each sampled day's states are spread over equally (comma-separated integer "
        "catalog columns or velocity, the demand-rate tercile; as `skurl ab assign --strata`); '' = "
        "uniformly over the SKUs, where a type of 1% of them gets 1% of the labels of the shared net"
    )
    warmup: int = opt(20, "days of the policy's episode before the first sampled day (its state distribution)")
    spread: int = opt(20, "sampled days the states are spread over (fewer rows per day: less correlated states)")
    every: int = opt(1, "days between sampled days")
    fit_steps: int = opt(1500, "cross-entropy minibatch steps (2048 states each) fitting the policy to the labels")
    temperature: float = opt(
        0.0, "0 = fit each state's Q-best action; > 0 = soft targets: softmax of Q / (this x the "
        "state's standard error of Q), so actions within the noise share the weight"
    )
    confirm: int = opt(
        0, "0 = label each state with the halving's winner; >= 2 = test a winner that differs from "
        "the policy's own action on this many fresh paired rollouts, and keep the own action unless "
        "the gain passes dcl.confirm_z (the halving's winner beats it by noise alone near the optimum)"
    )
    confirm_z: float = opt(2.0, "with dcl.confirm: the t-statistic of the gain a changed label needs")
    check_episodes: int = opt(
        4, "episodes of the training shard both the fitted candidate and the policy it came from run "
        "(common random numbers) before the candidate is accepted; 0 = accept every fit unchecked"
    )
    check_z: float = opt(
        2.0, "a candidate whose mean reward per SKU-day is below its predecessor's by more than this "
        "many standard errors is corrected (dcl.corrections), else the iteration keeps the old policy"
    )
    corrections: int = opt(
        3, "labellings of a rejected candidate's own states (Q of the old policy, as before) added to "
        "the fit before it is checked again: the labels must be right where the new policy goes "
        "(L10 p4 needed 2; a candidate that passes at once costs none)"
    )

    label_timeout_s: float = opt(
        3600.0, "longest a collector may take over its part of one labelling or check (decoupled and ray "
        "modes, where the collectors label their own SKUs); a collector still silent after it is taken as lost"
    )

    def __post_init__(self) -> None:
        check(math.isfinite(self.label_timeout_s) and self.label_timeout_s > 0, "dcl.label_timeout_s",
              self.label_timeout_s, "a number of seconds > 0")
        for key in ("states", "budget", "spread", "every", "fit_steps"):
            value = getattr(self, key)
            check(value >= 1, f"dcl.{key}", value, "an integer >= 1")
        for key in ("horizon", "window", "warmup", "check_episodes", "corrections"):
            value = getattr(self, key)
            check(value >= 0, f"dcl.{key}", value, "an integer >= 0")
        for key in ("budget", "confirm"):  # replications are numbered within 2**24 episodes a day (learn/dcl.py)
            value = getattr(self, key)
            check(value <= 1_000_000, f"dcl.{key}", value, "at most 1,000,000 rollouts per state")
        check(self.confirm != 1 and self.confirm >= 0, "dcl.confirm", self.confirm, "0 or an integer >= 2")
        check(math.isfinite(self.confirm_z), "dcl.confirm_z", self.confirm_z, "a finite number")
        check(math.isfinite(self.check_z) and self.check_z >= 0, "dcl.check_z", self.check_z, "a number >= 0")
        names = strata_names(self.stratify)
        check(strata_problem(names) is None, "dcl.stratify", self.stratify, f"{strata_expected()} ('' = none)")
        check(self.temperature >= 0, "dcl.temperature", self.temperature, "a number >= 0 (0 = hard labels)")


def auto_horizon(lead_time: np.ndarray) -> np.ndarray:
    """dcl.horizon=0's rollout days (int64, elementwise) for SKUs of lead time plus supplier
    delay `lead_time`."""
    return np.maximum(8, 4 * (np.asarray(lead_time, np.int64) + 1))
