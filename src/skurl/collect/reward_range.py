"""Plausible reward range per SKU, checked on every collected day before the rollout keeps it.

A day's reward is revenue - costs, each term a unit price or cost times units the SKU can
plausibly move: its demand (peak season, promotion, trend over the episode) or the largest
order its action grid places, times the days a backlog or stock can build up, plus the
fixed order cost. A reward beyond RANGE_FACTOR times that (or NaN / infinite) is a unit or
scale bug in the catalog or a simulator fault, not a signal: the collector counts it
(collector_reward_out_of_range_total), logs the SKU ids and refuses the shard, since a
Rollout carries no per-transition mask the learner would honour (GAE, the normalizers and
PPO's minibatches read every cell), so masking would mean training on a made-up value.
"""

from __future__ import annotations

import logging

import numpy as np

from skurl.catalog.schema import DIST_CODES, Catalog
from skurl.errors import UserError
from skurl.policy.actions import ActionGrid

RANGE_FACTOR = 10.0  # slack on top of the scale: only values no policy could earn are flagged
log = logging.getLogger("skurl.collect")


class RewardRangeError(UserError):
    """A collected reward lies outside its SKU's plausible range; the shard is refused."""


def reward_bounds(catalog: Catalog, days: int, grid: ActionGrid) -> np.ndarray:
    """float64 [N]: the largest |reward| of one SKU-day that is plausible for each SKU of
    `catalog` (rows in the env's order) collected with `grid` over `days` days."""
    f64 = {k: np.asarray(getattr(catalog, k), np.float64) for k in
           ("price", "unit_cost", "holding_cost", "lost_sale_cost", "waste_cost", "order_cost",
            "demand_mean", "promo_uplift", "trend", "lead_time", "delay_max", "dispersion", "forecast_noise")}
    money = f64["price"] + f64["unit_cost"] + f64["holding_cost"] + f64["lost_sale_cost"] + f64["waste_cost"]
    peak = (f64["demand_mean"] * catalog.season.max(axis=1).astype(np.float64) * (1.0 + f64["promo_uplift"])
            * np.exp(np.abs(f64["trend"]) * days))
    # One day's demand far in the tail (~1e-15): Poisson near its mean; geometric and negbin
    # (size r) decay like a geometric of mean peak / r.
    size = np.where(catalog.demand_dist == DIST_CODES["negbin"], f64["dispersion"],
                    np.where(catalog.demand_dist == DIST_CODES["geometric"], 1.0, np.inf))
    demand = 40.0 + 2.0 * peak + 10.0 * np.sqrt(peak) + 35.0 * peak / size
    top = float(grid.values.max(initial=0.0)) if grid.kind != "cover" else 0.0
    if grid.kind == "multiplier":  # orders follow the forecast (lognormal error, 8 sigma)
        demand = np.maximum(demand, peak * np.exp(8.0 * f64["forecast_noise"]) * top * grid.review_days)
    units = np.maximum(demand, top if grid.kind == "units" else 0.0)
    horizon = days + f64["lead_time"] + f64["delay_max"] + grid.review_days + 1.0
    return RANGE_FACTOR * (money * units * horizon + f64["order_cost"])


def check_rewards(reward: np.ndarray, bound: np.ndarray, sku_ids: np.ndarray, day: int) -> None:
    """Raise RewardRangeError (after counting and logging) if any |reward| exceeds its bound."""
    bad = ~(np.abs(reward) <= bound)  # NaN fails too
    if not bad.any():
        return
    from skurl.telemetry.metrics import get_metrics

    rows = np.flatnonzero(bad)
    get_metrics().collector_reward_out_of_range_total.inc(int(rows.size))
    ids = np.asarray(sku_ids)[rows[:5]].tolist()
    log.error("day %d: %d reward(s) outside the plausible range, SKU ids %s%s", day, rows.size, ids,
              " ..." if rows.size > 5 else "")
    i = int(rows[0])
    raise RewardRangeError(
        f"collector: SKU {int(sku_ids[i])} day {day}: reward {float(reward[i])!r} outside its plausible "
        f"range +-{float(bound[i]):.4g} ({RANGE_FACTOR:g} x its price and cost scale), {rows.size} SKU(s) "
        "in all; the shard is refused (expected catalog prices and costs in one money unit)")
