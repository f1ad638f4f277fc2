"""Settings the collectors read (the `collect` section): SKUs per iteration, inference
batches and precision, recorded values, and near-on-policy collection (staleness, its
circuit breaker and V-trace's truncations). Part of `skurl.config`; these keys lived under
`train.` before, and the old names give a one-line error naming the new one (MOVED)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from skurl.config.loader import check, opt
from skurl.errors import ConfigError

# old key -> its new name: `--set train.staleness=1` is one line naming collect.staleness
MOVED = {f"train.{old}": f"collect.{new}" for old, new in (
    ("collect_skus", "skus"), ("chunk", "chunk"), ("infer_dtype", "infer_dtype"), ("collect_values", "values"),
    ("staleness", "staleness"), ("staleness_mode", "staleness_mode"), ("max_lag", "max_lag"),
    ("staleness_correction", "staleness_correction"), ("staleness_clip", "staleness_clip"),
    ("collect_ahead", "ahead"), ("vtrace_rho_bar", "vtrace_rho_bar"), ("vtrace_c_bar", "vtrace_c_bar"))}


@dataclass(frozen=True)
class CollectConfig:
    skus: int = opt(0, "SKUs simulated per iteration; 0 = the whole catalog")
    chunk: int = opt(4096, "SKUs per inference batch in the collector")
    infer_dtype: Literal["auto", "float32", "bfloat16"] = opt(
        "auto", "collector inference precision: auto (bfloat16 where the CPU has native bf16) | float32 | bfloat16"
    )
    values: bool = opt(
        False, "collectors also record value estimates; the learner recomputes values of rollouts "
        "at its own version in fp32, so only stale rollouts need them (halves collector inference)"
    )
    staleness: int = opt(
        0, "policy versions collectors may run behind the learner (near-on-policy training, "
        "docs/near_on_policy.md); 0 = the sync barrier: every rollout comes from the newest weights"
    )
    staleness_mode: Literal["fixed", "bounded"] = opt(
        "fixed", "with collect.staleness > 0: fixed = iteration k trains on rollouts of exactly version "
        "max(0, k - staleness) (deterministic); bounded = collectors use the newest weights they hold "
        "and the learner trains the oldest rollout at most collect.staleness versions old, refusing older ones "
        "(not reproducible: versions follow timing)"
    )
    max_lag: int = opt(
        0, "circuit breaker: collectors pause while they lag more than this many versions; "
        "0 = collect.staleness, else an integer >= collect.staleness"
    )
    staleness_correction: Literal["vtrace", "none"] = opt(
        "vtrace", "stale rollouts: vtrace = V-trace value targets and advantages (truncated importance "
        "weights, Espeholt et al. 2018) and PPO's ratio corrected as collect.staleness_clip says; none = "
        "no correction: GAE and PPO as if the learner's policy had collected them"
    )
    staleness_clip: Literal["proximal", "behaviour"] = opt(
        "proximal", "PPO's ratio on stale rollouts (with staleness_correction=vtrace): proximal = clipped "
        "around the learner's policy at the update's start, each row weighted by its pi/mu truncated at "
        "collect.vtrace_rho_bar (decoupled PPO, Hilton et al. 2021); behaviour = clipped around the "
        "recorded behaviour log-probs mu (use it at staleness > 2 with a fast-moving policy: proximal "
        "diverged there, docs/near_on_policy.md)"
    )
    ahead: bool = opt(
        True, "with collect.staleness >= 1 (fixed): a background thread collects iteration k + 1 while "
        "the learner trains on k (its version is fixed by k, not by timing: results are unchanged)"
    )
    vtrace_rho_bar: float = opt(1.0, "V-trace truncation of the importance weight on each TD error (rho-bar > 0)")
    vtrace_c_bar: float = opt(1.0, "V-trace truncation of the trace-cutting weights c (c-bar > 0, <= rho-bar)")

    def __post_init__(self) -> None:
        check(self.chunk >= 1, "collect.chunk", self.chunk, "an integer >= 1")
        check(self.skus >= 0, "collect.skus", self.skus, "an integer >= 0 (0 = the whole catalog)")
        check(self.staleness >= 0, "collect.staleness", self.staleness, "an integer >= 0 (0 = the sync barrier)")
        check(self.max_lag == 0 or self.max_lag >= self.staleness, "collect.max_lag", self.max_lag,
              f"0 or an integer >= collect.staleness ({self.staleness})")
        check(self.vtrace_rho_bar > 0, "collect.vtrace_rho_bar", self.vtrace_rho_bar, "a number > 0")
        check(0 < self.vtrace_c_bar <= self.vtrace_rho_bar, "collect.vtrace_c_bar", self.vtrace_c_bar,
              f"a number in (0, collect.vtrace_rho_bar = {self.vtrace_rho_bar}]")


def refuse_moved(data: dict[str, object], overrides: list[str]) -> None:
    """One line for a key of MOVED in a config file's `train:` section or a --set."""
    train = data.get("train")
    olds = [f"train.{k}" for k in train] if isinstance(train, dict) else []
    olds += [item.split("=", 1)[0].strip() for item in overrides]
    for old in olds:
        if old in MOVED:
            raise ConfigError(f"config key '{old}' moved to '{MOVED[old]}'; expected {MOVED[old]}=...")
