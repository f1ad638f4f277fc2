"""What one decoupled iteration's collection went through, as metrics.jsonl scalars.

Kept apart from the learner loop (modes/decoupled/grpc_collectors.py): pure functions of the
CollectReport the loop fills in, the assembled rollout and the publish times.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from skurl.buffer.rollout import Rollout
from skurl.collect.collectors import reward_spread
from skurl.collect.lost_share import Loss


@dataclass
class CollectReport:
    """What one iteration's collection went through (scalars for metrics.jsonl)."""

    metas: dict[str, dict[str, Any]] = field(default_factory=dict)  # collector -> manifest meta
    rpc_seconds: dict[str, float] = field(default_factory=dict)
    corrupt: int = 0
    recollected: int = 0
    republished: int = 0
    from_store: int = 0
    collect_wall: float = 0.0
    loss: Loss = field(default_factory=Loss)  # collectors found dead (collect/lost_share.py)


def rollout_scalars(rollout: Rollout, report: CollectReport) -> dict[str, float]:
    """Reward figures over every collected SKU, and collection throughput."""
    # Summed day by day as the co-located collector does, so the figures are equal.
    reward_sum = sum(float(rollout.rewards[d].sum(dtype=np.float64)) for d in range(rollout.days))
    transitions = rollout.transitions
    return {"reward_mean": reward_sum / max(transitions, 1), "transitions": float(transitions),
            "transitions_per_s": transitions / max(report.collect_wall, 1e-9), **reward_spread(rollout.rewards)}


def report_scalars(report: CollectReport, publish_unix: Mapping[int, float]) -> dict[str, float]:
    """Barrier, weights lag, collector stage times and fault counts of an iteration's
    collection;
    `publish_unix`: wire version -> when the learner published it."""
    metas = report.metas.values()

    def most(key: str) -> float:
        return max((float(m.get(key) or 0.0) for m in metas), default=0.0)

    lags = [m["weights_received_unix"] - publish_unix[m["policy_version"]]
            for m in metas if m.get("weights_received_unix") is not None
            and m.get("policy_version") in publish_unix]
    busy = max(report.rpc_seconds.values(), default=0.0)
    barrier = most("barrier_wait_s")
    return {
        "barrier_wait_s": barrier, "collector_busy_s": busy,
        "weights_lag_s": max(lags, default=float("nan")),
        "collector_collect_s": most("collect_s"), "collector_simulate_s": most("simulate_s"),
        "collector_infer_s": most("infer_s"),
        "collector_store_s": max((report.rpc_seconds[c] - float(m.get("collect_s", 0.0))
                                  - float(m.get("barrier_wait_s", 0.0))
                                  for c, m in report.metas.items() if c in report.rpc_seconds),
                                 default=0.0),
        "corrupt_shards": float(report.corrupt), "recollected_shares": float(report.recollected),
        "republished_weights": float(report.republished), "shards_from_store": float(report.from_store),
        "sim_replays": float(sum(int(m.get("sim_replays", 0)) for m in metas)),
    }
