"""Planner heuristics as Policies: base-stock, capped base-stock, (s, S), constant order,
forecast-driven base-stock and forecast-driven (s, S). Vectorized over SKUs; every parameter
is a per-SKU array.

All of them work on the inventory position IP = on hand + pipeline - backlog (docs/architecture.md, Simulator semantics:
the order placed on day t is sold from day t + L), so stock already ordered is never
ordered twice, and backorders are covered before new demand. Orders are whole units
(float64 holding integers), never negative.

More: docs/internals.md (policy/baselines.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from skurl.catalog.schema import Catalog
from skurl.config import POLICY_NAMES, SimConfig
from skurl.errors import UserError
from skurl.policy.newsvendor import critical_ratio, default_z
from skurl.policy.newsvendor import norm_ppf as norm_ppf  # re-exported: the baselines' quantile
from skurl.policy.protection import cover_moments, position
from skurl.sim.api import Obs, RawState

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

Params = dict[str, np.ndarray]


class UnknownPolicyError(UserError):
    """An unknown baseline name (the message lists the valid ones)."""


# ---------------------------------------------------------------------------- helpers

def inventory_position(raw: RawState) -> np.ndarray:
    """on hand + everything in the pipeline - backlog (float64 [N])."""
    return position(raw.on_hand, raw.pipeline, raw.backlog)


def daily_variance(mean: np.ndarray, dist: np.ndarray, dispersion: np.ndarray) -> np.ndarray:
    """Variance of one day's demand with mean `mean` under each SKU's distribution:
    Poisson m, geometric m + m^2, negative binomial m + m^2 / r. Broadcasts over a trailing
    day axis when `mean` is [N, H] and dist/dispersion are [N, 1]."""
    m = np.asarray(mean, dtype=np.float64)
    extra = np.where(dist == 1, m * m, np.where(dist == 2, m * m / dispersion, 0.0))
    return m + extra


def long_run_mean(catalog: Catalog) -> np.ndarray:
    """Average daily demand without trend: base rate x (1 + promo uplift x promo share).
    The weekly season has mean 1 per row, so it drops out of the average."""
    period = catalog.promo_period.astype(np.float64)
    share = np.divide(catalog.promo_length, period, out=np.zeros_like(period), where=period > 0)
    return catalog.demand_mean.astype(np.float64) * (1.0 + catalog.promo_uplift * np.minimum(share, 1.0))


def protection_days(catalog: Catalog, review_days: int) -> np.ndarray:
    """L_i + R: days between placing an order and the arrival of the next one."""
    return catalog.lead_time.astype(np.int64) + int(review_days)


def mean_delay(catalog: Catalog) -> np.ndarray:
    """Expected supplier delay: 1..delay_max days, uniform, with probability delay_prob."""
    return catalog.delay_prob.astype(np.float64) * (catalog.delay_max.astype(np.float64) + 1.0) / 2.0


def static_level(catalog: Catalog, sim_cfg: SimConfig, z: np.ndarray | float) -> np.ndarray:
    """Whole-unit order-up-to level ceil(mu + z sigma) of the protection period (L + R days
    plus the expected supplier delay), with a long-run daily mean and the SKU's daily
    variance (days independent)."""
    days = protection_days(catalog, sim_cfg.review_days) + mean_delay(catalog)
    m = long_run_mean(catalog)
    var = daily_variance(m, catalog.demand_dist, catalog.dispersion) * days
    level = np.ceil(m * days + np.asarray(z, dtype=np.float64) * np.sqrt(var) - 1e-9)
    return np.maximum(level, 0.0)


def protection_moments(forecast: np.ndarray, cover_days: np.ndarray, dist: np.ndarray,
                       dispersion: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and variance (float64 [N]) of the demand over each SKU's next cover_days days
    (forecast [N, H] of daily means; days independent, see daily_variance)."""
    width = int(cover_days.max(initial=1))
    if forecast.shape[1] < width:
        raise ValueError(f"forecast has {forecast.shape[1]} days, policy needs {width} (lead + review)")
    if cover_days.size and int(cover_days.min()) < 1:
        raise ValueError(f"cover days {int(cover_days.min())}, expected >= 1")
    return cover_moments(forecast, np.ascontiguousarray(cover_days, dtype=np.int64), dist,
                         np.asarray(dispersion, dtype=np.float64))


def order_up_to_level(mean: np.ndarray, sigma: np.ndarray, z: np.ndarray | float) -> np.ndarray:
    """Whole-unit level max(0, ceil(mean + z sigma)); broadcasts (e.g. [N, 1] with z [A])."""
    return np.maximum(0.0, np.ceil(mean + z * sigma - 1e-9))


def reorder_point(level: np.ndarray) -> np.ndarray:
    """(s, S)'s s for an order-up-to level: level - 1, so it orders once the position is
    below the level; -1 (never order: the position of a SKU nobody buys stays >= 0) where
    the level is 0, e.g. a SKU without demand."""
    return np.maximum(level - 1.0, -1.0)


def eoq(catalog: Catalog) -> np.ndarray:
    """Economic order quantity sqrt(2 K m / h) in whole units >= 1 (Harris 1913)."""
    m = long_run_mean(catalog)
    h = np.maximum(catalog.holding_cost.astype(np.float64), 1e-9)
    return np.maximum(1.0, np.round(np.sqrt(2.0 * catalog.order_cost * m / h)))


def within_limit(units: np.ndarray) -> np.ndarray:
    """Orders capped at the simulator's per-day limit (sim/env.py MAX_ORDER): a valid level
    can exceed it (demand 1e7/day over lead 60 + review 100 days), and is then reached over
    several days instead of the env refusing the whole batch."""
    from skurl.sim.env import MAX_ORDER  # lazily: the vectorized env is a sibling part

    return np.minimum(units, MAX_ORDER)


def _review_mask(obs: Obs, review_days: int) -> bool:
    return review_days <= 1 or obs.raw.day % review_days == 0


def _as_array(value: ArrayLike, n: int | None = None) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float64)
    if n is not None and arr.ndim == 0:
        arr = np.full(n, float(arr))
    return arr


def summarize(values: np.ndarray) -> float | dict[str, float]:
    """One number when every SKU has the same value, else quantiles (for reports/JSON)."""
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size == 0:
        return float("nan")
    if np.all(v == v[0]):
        return float(v[0])
    q = np.quantile(v, [0.0, 0.1, 0.5, 0.9, 1.0])
    return {"min": float(q[0]), "p10": float(q[1]), "p50": float(q[2]), "p90": float(q[3]),
            "max": float(q[4]), "mean": float(v.mean())}


# --------------------------------------------------------------------------- policies

@dataclass
class BaseStock:
    """Order up to S: order = max(0, S - IP)."""

    S: np.ndarray
    review_days: int = 1
    name: str = "base-stock"
    raw_only: ClassVar[bool] = True  # reads obs.raw only (sim/episode.py DecisionRule)

    def orders(self, obs: Obs) -> np.ndarray:
        if not _review_mask(obs, self.review_days):
            return np.zeros(obs.raw.on_hand.shape[0])
        return within_limit(np.maximum(0.0, self.S - inventory_position(obs.raw)))

    def params(self) -> dict[str, Any]:
        return {"S": self.S}


@dataclass
class CappedBaseStock:
    """Order up to S, at most r units a day: min(r, max(0, S - IP)) (Xin 2021, Oper. Res.
    69(1), "Understanding the performance of capped base-stock policies in lost-sales
    inventory models")."""

    S: np.ndarray
    r: np.ndarray
    review_days: int = 1
    name: str = "capped-base-stock"
    raw_only: ClassVar[bool] = True  # reads obs.raw only (sim/episode.py DecisionRule)

    def orders(self, obs: Obs) -> np.ndarray:
        if not _review_mask(obs, self.review_days):
            return np.zeros(obs.raw.on_hand.shape[0])
        return within_limit(np.minimum(self.r, np.maximum(0.0, self.S - inventory_position(obs.raw))))

    def params(self) -> dict[str, Any]:
        return {"S": self.S, "r": self.r}


@dataclass
class SS:
    """(s, S): when IP <= s order S - IP, else nothing."""

    s: np.ndarray
    S: np.ndarray
    review_days: int = 1
    name: str = "s-S"
    raw_only: ClassVar[bool] = True  # reads obs.raw only (sim/episode.py DecisionRule)

    def orders(self, obs: Obs) -> np.ndarray:
        if not _review_mask(obs, self.review_days):
            return np.zeros(obs.raw.on_hand.shape[0])
        ip = inventory_position(obs.raw)
        return within_limit(np.where(ip <= self.s, np.maximum(0.0, self.S - ip), 0.0))

    def params(self) -> dict[str, Any]:
        return {"s": self.s, "S": self.S}


@dataclass
class Constant:
    """Order c units every day, whatever the state (Reiman 2004; asymptotically optimal
    for long lead times: Goldberg et al. 2016, Math. Oper. Res. 41(3)). A fractional c is
    spread over days as floor((t + 1) c) - floor(t c), so the long-run rate is exactly c."""

    c: np.ndarray
    name: str = "constant"
    raw_only: ClassVar[bool] = True  # reads obs.raw only (sim/episode.py DecisionRule)

    def orders(self, obs: Obs) -> np.ndarray:
        t = float(obs.raw.day)
        return within_limit(np.floor((t + 1.0) * self.c + 1e-9) - np.floor(t * self.c + 1e-9))

    def params(self) -> dict[str, Any]:
        return {"c": self.c}


@dataclass
class ForecastBaseStock:
    """Dynamic order-up-to: S_t = sum of forecasts over days t .. t+L+R-1 + z sigma_t, sigma_t^2
    = sum over those days of the daily variance at the forecast mean (see daily_variance);
    what a planner uses under promotions, seasonality and trend. Level rounded up to a unit."""

    z: np.ndarray
    cover_days: np.ndarray  # int64 [N]: L_i + R
    dist: np.ndarray  # int8 [N]
    dispersion: np.ndarray  # float64 [N]
    review_days: int = 1
    name: str = "forecast-base-stock"
    raw_only: ClassVar[bool] = True  # reads obs.raw only (sim/episode.py DecisionRule)

    def level(self, raw: RawState) -> np.ndarray:
        mean, var = protection_moments(raw.forecast, self.cover_days, self.dist, self.dispersion)
        return order_up_to_level(mean, np.sqrt(var), self.z)

    def orders(self, obs: Obs) -> np.ndarray:
        if not _review_mask(obs, self.review_days):
            return np.zeros(obs.raw.on_hand.shape[0])
        return within_limit(np.maximum(0.0, self.level(obs.raw) - inventory_position(obs.raw)))

    def params(self) -> dict[str, Any]:
        return {"z": self.z}


@dataclass
class ForecastSS:
    """Forecast-driven (s, S): when IP is below the forecast base-stock level s_t (`base`'s),
    order up to s_t + lot, else nothing. The lot batches orders where a fixed cost per order
    outweighs holding (default: the EOQ, 0 for a SKU without order cost, so that SKU orders
    exactly as forecast-base-stock)."""

    base: ForecastBaseStock
    lot: np.ndarray  # float64 [N], whole units >= 0
    name: str = "forecast-s-S"
    raw_only: ClassVar[bool] = True  # reads obs.raw only (sim/episode.py DecisionRule)

    def orders(self, obs: Obs) -> np.ndarray:
        if not _review_mask(obs, self.base.review_days):
            return np.zeros(obs.raw.on_hand.shape[0])
        level = self.base.level(obs.raw)
        ip = inventory_position(obs.raw)
        return within_limit(np.where(ip < level, level + self.lot - ip, 0.0))

    def params(self) -> dict[str, Any]:
        return {"z": self.base.z, "lot": self.lot}


def lot_size(catalog: Catalog, mult: np.ndarray | float) -> np.ndarray:
    """forecast-s-S's lot: round(mult x EOQ) whole units, the EOQ sqrt(2 K m / h) without
    eoq()'s floor of one unit (0 where there is no order cost), and at most the demand of
    the shelf life for a perishable (a bigger lot expires before it sells) or of
    MAX_LOT_DAYS (a SKU without holding cost would otherwise order an unbounded lot)."""
    m = long_run_mean(catalog)
    h = np.maximum(catalog.holding_cost.astype(np.float64), 1e-9)
    q = np.asarray(mult, dtype=np.float64) * np.sqrt(2.0 * catalog.order_cost.astype(np.float64) * m / h)
    life = catalog.shelf_life.astype(np.float64)
    q = np.minimum(np.where(life > 0, np.minimum(q, m * life), q), m * MAX_LOT_DAYS)
    return np.round(np.minimum(q, MAX_LOT))


# Two years of demand: the tuned lots of the embedded catalogs (seeds 0-2) reach 344-461
# days' demand for the slowest SKUs with an order cost, none 730 (session 27).
MAX_LOT_DAYS = 730.0
MAX_LOT = 1e9  # units: keeps a lot (and level + lot) finite for absurd catalog costs


# ----------------------------------------------------------------- build by name/params

def check_policy_name(name: str) -> str:
    if name not in POLICY_NAMES:
        raise UnknownPolicyError(f"unknown policy '{name}' (expected one of: {', '.join(POLICY_NAMES)})")
    return name


def applies(name: str, catalog: Catalog) -> bool:
    """Whether baseline `name` is a distinct heuristic on `catalog`: forecast-s-S is
    forecast-base-stock exactly (every lot 0) where no SKU pays a fixed cost per order."""
    if name in ("echelon-base-stock", "installation-base-stock"):
        return catalog.has_network
    return name != "forecast-s-S" or bool(np.any(catalog.order_cost > 0))


def default_params(name: str, catalog: Catalog, sim_cfg: SimConfig) -> Params:
    """Untuned per-SKU parameters of baseline `name` (see the module docstring)."""
    check_policy_name(name)
    if name in ("echelon-base-stock", "installation-base-stock"):
        return make_policy(name, catalog, sim_cfg).params()
    z = default_z(catalog, sim_cfg)
    if name == "base-stock":
        return {"S": static_level(catalog, sim_cfg, z)}
    if name == "capped-base-stock":
        return {"S": static_level(catalog, sim_cfg, z), "r": cap_from_multiplier(catalog, sim_cfg, 1.5)}
    if name == "s-S":
        s = reorder_point(static_level(catalog, sim_cfg, z))
        return {"s": s, "S": s + eoq(catalog)}
    if name == "forecast-s-S":
        return {"z": z, "lot": lot_size(catalog, 1.0)}
    if name == "constant":
        # Below the mean: ordering the mean makes lost-sales stock a driftless random walk
        # that keeps growing; the critical ratio trades holding against lost sales.
        return {"c": long_run_mean(catalog) * critical_ratio(catalog, sim_cfg)}
    return {"z": z}


def cap_from_multiplier(catalog: Catalog, sim_cfg: SimConfig, mult: np.ndarray | float) -> np.ndarray:
    """Order cap r = max(1, ceil(mult x mean x R)) whole units."""
    per_review = long_run_mean(catalog) * sim_cfg.review_days
    return np.maximum(1.0, np.ceil(np.asarray(mult, dtype=np.float64) * per_review - 1e-9))


def make_policy(name: str, catalog: Catalog, sim_cfg: SimConfig,
                params: Params | dict[str, float] | None = None) -> Any:
    """Baseline `name` for `catalog` with `params` (default_params when None). Scalars
    broadcast to every SKU."""
    check_policy_name(name)
    if name in ("echelon-base-stock", "installation-base-stock"):  # supply networks (network_baselines.py)
        from skurl.policy.network_baselines import make_network_policy

        return make_network_policy(name, catalog, sim_cfg, params)
    n = len(catalog)
    raw = default_params(name, catalog, sim_cfg) if params is None else params
    p = {k: _as_array(v, n) for k, v in raw.items()}
    for key, arr in p.items():
        if arr.shape != (n,):
            raise ValueError(f"policy parameter '{key}': shape {arr.shape}, expected ({n},)")
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"policy parameter '{key}': not finite")
    review = sim_cfg.review_days

    def forecast_base_stock() -> ForecastBaseStock:
        return ForecastBaseStock(z=p["z"], cover_days=protection_days(catalog, review), dist=catalog.demand_dist,
                                 dispersion=catalog.dispersion.astype(np.float64), review_days=review)

    builders: dict[str, Callable[[], Any]] = {
        "base-stock": lambda: BaseStock(S=p["S"], review_days=review),
        "capped-base-stock": lambda: CappedBaseStock(S=p["S"], r=p["r"], review_days=review),
        "s-S": lambda: SS(s=p["s"], S=np.maximum(p["S"], p["s"]), review_days=review),
        "constant": lambda: Constant(c=np.maximum(p["c"], 0.0)),
        "forecast-base-stock": forecast_base_stock,
        "forecast-s-S": lambda: ForecastSS(base=forecast_base_stock(), lot=np.maximum(np.round(p["lot"]), 0.0)),
    }
    return builders[name]()
