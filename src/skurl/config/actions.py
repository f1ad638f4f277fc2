"""The discrete action grid's settings (policy.actions; policy/actions.py decodes them)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from skurl.config.loader import check, opt

MAX_LOT_FACTORS = 8  # lot blocks of the joint grid: the action count is n times this
# One logit per action: beyond a few thousand a grid only costs memory, and the checks below
# build the grid's offsets (n = 10^10 would ask for 80 GB before any error could be said).
MAX_ACTIONS = 4096


@dataclass(frozen=True)
class ActionsConfig:
    kind: Literal["multiplier", "units", "cover"] = opt(
        "multiplier", "multiplier: order = round(m_k x forecast x review days); units: order = k x step units; "
        "cover: order up to the forecast over lead + review days + z_k x its std dev (z_k in z_min..z_max)"
    )
    n: int = opt(20, f"number of discrete actions (2..{MAX_ACTIONS})")
    max: float = opt(
        4.75, "largest multiplier (multiplier grid 0..max, evenly spaced); ignored for units"
    )
    step: int = opt(1, "units per action step for the units grid (order = k x step)")
    z_min: float = opt(-1.0, "smallest safety factor of the cover grid (z_min..z_max, evenly spaced)")
    z_max: float = opt(4.0, "largest safety factor of the cover grid")
    z_center: Literal["zero", "newsvendor", "tuned"] = opt(
        "zero", "cover grid: z_min..z_max are safety factors (zero) or offsets from each SKU's newsvendor "
        "factor Phi^-1(cu / (cu + co)) (newsvendor) or from the factor of the per-SKU-tuned "
        "policy.actions.center_policy (tuned: offset 0 orders exactly what that baseline orders; tuned once per run "
        "and kept in RUN_DIR/grid_center.safetensors); other grids ignore it"
    )
    center_policy: Literal["forecast-base-stock", "forecast-s-S", "echelon-base-stock"] = opt(
        "forecast-base-stock", "z_center=tuned: the per-SKU-tuned baseline offset 0 reproduces: "
        "forecast-base-stock (a safety factor per SKU) or forecast-s-S (a factor and a lot: below the "
        "level, every action orders up to its level + the SKU's lot, so orders carry a fixed cost in batches) "
        "or, on supply networks, echelon-base-stock (offsets in standard deviations of the demand over the "
        "echelon protection days from the tuned echelon level, on the echelon inventory position)"
    )
    skip: bool = opt(
        False, "cover grid: action 0 orders nothing and the other n - 1 span z_min..z_max (lets the policy "
        "batch orders where each order has a fixed cost)"
    )
    lot_factors: list[float] = opt(
        [], "cover grid centred on a tuned forecast-s-S: [] keeps one lot per SKU; a list of factors f makes "
        "the actions joint (lot factor, level offset) pairs, lot = round(f x the SKU's tuned lot), f = 0 "
        "ordering up to the level only (n x len actions, the skip action once; docs/headroom.md)"
    )

    def __post_init__(self) -> None:
        check(2 <= self.n <= MAX_ACTIONS, "policy.actions.n", self.n, f"an integer in 2..{MAX_ACTIONS}")
        check(self.z_max > self.z_min, "policy.actions.z_max", self.z_max,
              f"a number > policy.actions.z_min ({self.z_min})")
        check(self.max > 0, "policy.actions.max", self.max, "a number > 0")
        check(self.step >= 1, "policy.actions.step", self.step, "an integer >= 1")
        if self.kind == "cover" and self.z_center == "tuned":
            # Offset 0 (the tuned baseline's own order) must be on the grid, or the policy
            # cannot start from that baseline.
            offsets = self.cover_z()
            check(bool(np.any(offsets == 0.0)), "policy.actions.z_min", self.z_min,
                  f"z_min..z_max in {len(offsets)} even steps to include offset 0 with z_center=tuned "
                  f"(z_max={self.z_max}, n={self.n}{', the skip action besides' if self.skip else ''}; "
                  f"e.g. z_min=-1.5 z_max=1.5 n={22 if self.skip else 21})")
        self._check_lot_factors()

    def _check_lot_factors(self) -> None:
        f = tuple(self.lot_factors)
        if not f:
            return
        key = "policy.actions.lot_factors"
        check(len(f) <= MAX_LOT_FACTORS and all(math.isfinite(x) and x >= 0 for x in f), key, list(f),
              f"at most {MAX_LOT_FACTORS} finite numbers >= 0")
        check(len(set(f)) == len(f), key, list(f), "distinct factors")
        check(self.kind == "cover" and self.z_center == "tuned" and self.center_policy == "forecast-s-S", key,
              list(f), "[] unless policy.actions.kind=cover, z_center=tuned and center_policy=forecast-s-S "
              "(the lot each factor scales is the tuned forecast-s-S's)")

    def cover_z(self) -> np.ndarray:
        """The cover grid's safety factors (or offsets), z_min..z_max evenly spaced, one per
        action besides the skip action."""
        return np.linspace(self.z_min, self.z_max, self.n - 1 if self.skip else self.n)
