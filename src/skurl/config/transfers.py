"""Lateral transfers between the stores of one upstream (sim.transfers; docs/networks.md)."""

from __future__ import annotations

from dataclasses import dataclass

from skurl.config.loader import check, opt

MAX_TRANSFER_LEAD = 60  # the catalog's lead_time bound (columns.COLUMNS)


@dataclass(frozen=True)
class TransfersConfig:
    enabled: bool = opt(False, "supply networks: move stock between the stores of one upstream each day, after "
                               "shipments and before customer demand (docs/networks.md); false = none")
    lead_time: int = opt(1, "days a transfer travels (0 = on hand the same day, before demand); at most the "
                            "catalog's longest lead time + supplier delay")
    cost: float = opt(0.0, "money per unit transferred, charged to the sending store (plus cost_share)")
    cost_share: float = opt(0.0, "per unit transferred, this share of the sending store's unit_cost (on top "
                                 "of cost: for catalogs whose items differ in value)")
    above: float = opt(7.0, "a store whose cover (on hand / demand_mean, in days) exceeds this sends stock")
    target: float = opt(3.0, "cover in days a sender keeps and a receiver is filled up to")
    below: float = opt(1.0, "a store whose cover is under this receives stock")

    def __post_init__(self) -> None:
        check(0 <= self.lead_time <= MAX_TRANSFER_LEAD, "sim.transfers.lead_time", self.lead_time,
              f"an integer in [0, {MAX_TRANSFER_LEAD}]")
        check(0.0 <= self.cost <= 1e9, "sim.transfers.cost", self.cost, "a number in [0, 1e9]")
        check(self.below >= 0.0, "sim.transfers.below", self.below, "a number of days >= 0")
        check(self.below <= self.target, "sim.transfers.target", self.target,
              f"a number of days >= sim.transfers.below ({self.below})")
        check(self.target <= self.above, "sim.transfers.above", self.above,
              f"a number of days >= sim.transfers.target ({self.target})")
