"""The collector-loss rule, one policy for every mode: when collectors die during an
iteration and their SKUs are at most deploy.max_lost_share of the iteration's SKUs, the
iteration trains without them (logged, counted); above it, or when nothing is left, the
lost shares are collected again once the collectors are back (restarted or replaced)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from skurl.telemetry.metrics import get_metrics

log = logging.getLogger("skurl.collect")


@dataclass
class Loss:
    """What an iteration lost to dead collectors (empty when none died)."""

    collectors: list[str] = field(default_factory=list)
    skus: int = 0
    share: float = 0.0
    waited: bool = False  # the lost shares were collected again

    def scalars(self) -> dict[str, float]:
        """What was lost (re-collected or not: `waited` says which)."""
        return {"lost_collectors": float(len(self.collectors)), "lost_skus": float(self.skus),
                "lost_share": self.share, "lost_recollected": float(self.waited)}


def judge_loss(lost: dict[str, int], total_skus: int, threshold: float, what: str, unit: str = "SKUs") -> Loss:
    """The rule for `lost` (collector -> its SKUs, or other `unit`s) of `total_skus`: proceed
    without them, or wait to collect them again (one warning line either way; proceeding is
    counted)."""
    if not lost:
        return Loss()
    skus = sum(lost.values())
    share = skus / max(total_skus, 1)
    waited = share > threshold or skus >= total_skus  # nothing left to train on
    loss = Loss(sorted(lost), skus, share, waited)
    line = (f"collectors {', '.join(loss.collectors)} died collecting {what}: {skus} of {total_skus} {unit} "
            f"({100 * share:.1f}%, deploy.max_lost_share {100 * threshold:g}%)")
    if waited:
        log.warning("%s; waiting for them to collect their shares again", line)
    else:
        log.warning("%s; the iteration proceeds without them", line)
        metrics = get_metrics()
        metrics.collector_shares_lost_total.inc(len(lost))
        metrics.collector_lost_skus_total.inc(skus)
    return loss
