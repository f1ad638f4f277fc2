"""A slow scalar reference simulator, written from docs/architecture.md (Simulator semantics) independently of the
kernels: plain Python loops over SKUs and days, stock as a list of (arrival day, units)
batches, the pipeline as a dict {due day: units}. It shares only the random numbers
(rng.py, demand.py samplers) with VectorEnv, and exists to be stepped side by side with it
in tests (tests/sim/test_reference*.py): every feature, raw array, reward and metric must
agree exactly. It assumes no run-time failures (valid catalogs).

Formulas, in the order both implementations evaluate them (float64, cast at the end):
  mean(t)     = demand_mean * season[t % 7] * exp(trend * t) * (1 + uplift if promo day)
  forecast(d) = demand_mean * season[d % 7] * exp(trend * d + (s z - 0.5 (s s)))
                * (1 + uplift if promo day), s = forecast_noise, z ~ N(0,1) at (sku, d)
  features    = quantity * (1 / max(demand_mean, 0.1)), stored as float32"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from skurl.catalog.schema import Catalog
from skurl.config import SimConfig
from skurl.sim.api import (
    STREAM_DELAY,
    STREAM_DEMAND,
    STREAM_FORECAST,
    STREAM_SUBSTITUTION,
    Obs,
    RawState,
)
from skurl.sim.demand import DIST_GEOMETRIC, DIST_NEGBIN, normal, sample_demand
from skurl.sim.layout import layout_for
from skurl.sim.reference_network import (
    network_costs,
    network_day,
    network_features,
    shared_reward,
    topology,
)
from skurl.sim.rng import run_key, sku_key, uniform
from skurl.sim.state import METRIC_FIELDS


@dataclass
class _Sku:
    """Everything the reference knows about one SKU."""

    p: dict  # catalog row as Python scalars
    key: np.uint64 = field(default_factory=lambda: np.uint64(0))
    batches: list = field(default_factory=list)  # [arrival day, units], oldest first
    pipeline: dict = field(default_factory=dict)  # due day -> units
    backlog: int = 0
    sales: list = field(default_factory=list)  # sales of days 0..t-1
    lost_yday: int = 0
    arrived_today: int = 0
    known_forecasts: dict = field(default_factory=dict)  # day -> forecast made before a re-key

    def forecast(self, day: int) -> float:
        if day in self.known_forecasts:
            return self.known_forecasts[day]
        return _forecast(self.p, self.key, day)

    def on_hand(self) -> int:
        return sum(u for _, u in self.batches)


def _is_promo(p: dict, day: int) -> bool:
    return p["promo_period"] > 0 and (day - p["promo_offset"]) % p["promo_period"] < p["promo_length"]


def _log_dispersion(p: dict) -> float:
    """log(variance / mean) of the SKU's demand at its base mean (layout.dispersion_feature)."""
    m = max(p["demand_mean"], 0.0)
    if p["demand_dist"] == DIST_GEOMETRIC:
        return math.log1p(m)
    return math.log1p(m / p["dispersion"]) if p["demand_dist"] == DIST_NEGBIN else 0.0


def _mean(p: dict, day: int) -> float:
    m = p["demand_mean"] * p["season"][day % 7] * math.exp(p["trend"] * day)
    return m * (1.0 + p["promo_uplift"]) if _is_promo(p, day) else m


def _forecast(p: dict, key: np.uint64, day: int) -> float:
    s = p["forecast_noise"]
    noise = 0.0
    if s > 0.0:
        z = normal(key, day, STREAM_FORECAST, 0)[0]
        noise = s * z - 0.5 * (s * s)
    m = p["demand_mean"] * p["season"][day % 7] * math.exp(p["trend"] * day + noise)
    return m * (1.0 + p["promo_uplift"]) if _is_promo(p, day) else m


def _take(sku: _Sku, units: int, lifo: bool) -> None:
    """Remove units from the batches, oldest first (fifo) or newest first (lifo)."""
    order = range(len(sku.batches) - 1, -1, -1) if lifo else range(len(sku.batches))
    for b in order:
        take = min(units, sku.batches[b][1])
        sku.batches[b][1] -= take
        units -= take
    sku.batches = [b for b in sku.batches if b[1] > 0]
    assert units == 0


class ReferenceSim:
    """Same constructor, reset and step as VectorEnv; step returns (obs, reward, done, metrics
    as a dict of float64 arrays)."""

    def __init__(self, catalog: Catalog, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.layout = layout_for(catalog, cfg.review_days)
        cols = catalog.columns()
        self.skus = []
        for i in range(len(catalog)):
            p = {k: v[i].item() for k, v in cols.items()}
            p["season"] = [float(x) for x in catalog.season[i]]
            p["ship_cost"] = float(catalog.ship_cost[i])  # float32 -> float, as the kernel reads it
            for k in ("demand_mean", "sub_frac", "dispersion", "trend", "promo_uplift",
                      "delay_prob", "holding_cost", "lost_sale_cost", "order_cost", "unit_cost",
                      "waste_cost", "price", "forecast_noise"):
                p[k] = float(np.float32(p[k]))
            self.skus.append(_Sku(p))
        self.groups: dict[int, list[int]] = {}
        self.network = catalog.has_network
        if self.network:
            self.topology = topology(self.skus)
            self.owed = [0] * len(self.skus)
        if cfg.substitution and not self.network:
            for i in sorted(range(len(catalog)), key=lambda i: self.skus[i].p["sku_id"]):
                if self.skus[i].p["group"] >= 0:
                    self.groups.setdefault(self.skus[i].p["group"], []).append(i)
        self.day = 0
        self.seed = 0

    def reset(self, seed: int, episode: int = 0) -> Obs:
        self.seed = seed
        key = run_key(seed, episode)
        for sku in self.skus:
            p = sku.p
            sku.key = np.uint64(sku_key(key, p["sku_id"]))
            k = self.cfg.initial_stock_days
            days = k if k >= 0 else p["lead_time"] + 1
            init = math.floor(days * p["demand_mean"] + 0.5)
            sku.batches = [[0, init]] if init > 0 else []
            sku.pipeline, sku.backlog, sku.sales = {}, 0, []
            sku.lost_yday = sku.arrived_today = 0
        if self.network:
            self.owed = [0] * len(self.skus)
        self.day = 0
        return self._obs()

    def clone(self, rows: list[int], episodes: list[int] | None = None, seed: int | None = None,
              days: int | None = None) -> ReferenceSim:
        """VectorEnv.clone: SKU j of the result is a deep copy of SKU rows[j], keeping its
        key, or taking the key of (seed, episodes[j], its sku_id); no substitution. The
        forecasts already made (days t..t+H-1) are part of the state and kept."""
        out = copy.copy(self)
        out.cfg = dataclasses.replace(self.cfg, days=self.cfg.days if days is None else days,
                                      substitution=False)
        out.skus = [copy.deepcopy(self.skus[r]) for r in rows]
        out.groups = {}
        out.seed = self.seed if seed is None else seed
        if episodes is not None:
            for sku, episode in zip(out.skus, episodes, strict=True):
                window = range(self.day, self.day + self.layout.horizon)
                sku.known_forecasts = {d: sku.forecast(d) for d in window}
                sku.key = np.uint64(sku_key(run_key(out.seed, int(episode)), sku.p["sku_id"]))
        return out

    def step(self, orders: np.ndarray) -> tuple[Obs, np.ndarray, bool, dict[str, np.ndarray]]:
        t, cfg = self.day, self.cfg
        if self.network:
            return self._network_step(orders)
        lifo = cfg.issuing == "lifo"
        day_vals = [self._own_demand(sku, t, float(o), lifo) for sku, o in zip(self.skus, orders, strict=True)]
        for members in self.groups.values():
            self._substitute(members, day_vals, lifo)
        metrics = {name: np.zeros(len(self.skus)) for name in METRIC_FIELDS}
        reward = np.zeros(len(self.skus), np.float32)
        for i, sku in enumerate(self.skus):
            reward[i] = self._settle(sku, t, day_vals[i], metrics, i)
        self.day = t + 1
        return self._obs(), reward, self.day >= cfg.days, metrics

    def _network_step(self, orders: np.ndarray) -> tuple[Obs, np.ndarray, bool, dict[str, np.ndarray]]:
        """A day of a catalog with supply networks (reference_network.py, docs/networks.md)."""
        t, cfg = self.day, self.cfg
        vals = network_day(self, orders, _take, _mean)
        metrics = {name: np.zeros(len(self.skus)) for name in METRIC_FIELDS}
        reward = np.zeros(len(self.skus), np.float32)
        for i, sku in enumerate(self.skus):
            v, p = vals[i], sku.p
            waste = 0
            if p["shelf_life"] > 0:
                waste = sum(u for a, u in sku.batches if a + p["shelf_life"] - 1 <= t)
                sku.batches = [b for b in sku.batches if b[0] + p["shelf_life"] - 1 > t]
            costs = network_costs(self, i, v, waste)
            store = not self.topology[1][i]
            revenue = p["price"] * v["sales"] if store else 0.0
            cost = (costs["holding_cost"] + costs["penalty_cost"] + costs["purchase_cost"]
                    + costs["order_cost"] + costs["waste_cost"] + costs["ship_cost"] + costs["transfer_cost"])
            values = {"demand": v["demand"], "sales": v["sales"], "lost": v["lost"], "substituted": 0,
                      "transferred": max(v["sent"], 0),
                      "waste": waste, "ordered": v["q"], "arrived": sku.arrived_today,
                      "on_hand_end": sku.on_hand(), "revenue": revenue, **costs}
            for name, value in values.items():
                metrics[name][i] = value
            sku.sales.append(v["sales"])
            sku.lost_yday = v["lost"]
            arrival = sku.pipeline.pop(t + 1, 0)
            if arrival > 0:
                sku.batches.append([t + 1, arrival])
            sku.arrived_today = arrival
            reward[i] = np.float32(-cost if cfg.reward == "cost" else revenue - cost)
        if cfg.network_reward == "network":
            reward = shared_reward(self, reward)
        self.day = t + 1
        return self._obs(), reward, self.day >= cfg.days, metrics

    def _own_demand(self, sku: _Sku, t: int, order: float, lifo: bool) -> dict:
        p = sku.p
        q = math.floor(order + 0.5)
        if q > 0:
            extra = 0  # supplier delay: late with prob delay_prob, by 1..delay_max days
            late = p["delay_max"] > 0 and p["delay_prob"] > 0
            if late and uniform(sku.key, t, STREAM_DELAY, 0) < p["delay_prob"]:
                extra = min(1 + math.floor(uniform(sku.key, t, STREAM_DELAY, 1) * p["delay_max"]),
                            p["delay_max"])
            due = t + p["lead_time"] + extra
            sku.pipeline[due] = sku.pipeline.get(due, 0) + q
        demand = int(sample_demand(p["demand_dist"], _mean(p, t), p["dispersion"], sku.key, t,
                                   STREAM_DEMAND))
        need = sku.backlog + demand if self.cfg.backorders else demand
        own = min(need, sku.on_hand())
        _take(sku, own, lifo)
        backlog_served = min(sku.backlog, own) if self.cfg.backorders else 0
        unmet = demand - (own - backlog_served)
        spill = 0
        if self.cfg.substitution and p["group"] >= 0 and unmet > 0 and p["sub_frac"] > 0:
            u = uniform(sku.key, t, STREAM_SUBSTITUTION, 0)
            spill = min(math.floor(p["sub_frac"] * unmet + u), unmet)
        return {"q": q, "demand": demand, "own": own, "backlog_served": backlog_served,
                "unmet": unmet, "spill": spill, "served_for_others": 0, "credit": 0}

    def _substitute(self, members: list[int], day_vals: list[dict], lifo: bool) -> None:
        pool = sum(day_vals[i]["spill"] for i in members)
        left = pool
        for i in members:
            take = min(self.skus[i].on_hand(), left)
            if take > 0:
                _take(self.skus[i], take, lifo)
                day_vals[i]["served_for_others"] = take
                left -= take
        served = pool - left
        for i in members:
            credit = min(day_vals[i]["spill"], served)
            day_vals[i]["credit"] = credit
            served -= credit

    def _settle(self, sku: _Sku, t: int, v: dict, metrics: dict, i: int) -> np.float32:
        p, cfg = sku.p, self.cfg
        sales = v["own"] + v["served_for_others"]
        lost = v["unmet"] - v["credit"]
        if cfg.backorders:
            sku.backlog = sku.backlog - v["backlog_served"] + lost
        waste = 0
        if p["shelf_life"] > 0:  # a unit arriving on day a expires at the end of a + life - 1
            waste = sum(u for a, u in sku.batches if a + p["shelf_life"] - 1 <= t)
            sku.batches = [b for b in sku.batches if b[0] + p["shelf_life"] - 1 > t]
        on_hand = sku.on_hand()
        costs = {
            "holding_cost": p["holding_cost"] * on_hand,
            "penalty_cost": p["lost_sale_cost"] * (sku.backlog if cfg.backorders else lost),
            "purchase_cost": p["unit_cost"] * v["q"],
            "order_cost": p["order_cost"] if v["q"] > 0 else 0.0,
            "waste_cost": p["waste_cost"] * waste,
        }
        revenue = p["price"] * sales
        cost = (costs["holding_cost"] + costs["penalty_cost"] + costs["purchase_cost"]
                + costs["order_cost"] + costs["waste_cost"])
        values = {"demand": v["demand"], "sales": sales, "lost": lost, "substituted": v["credit"],
                  "waste": waste, "ordered": v["q"], "arrived": sku.arrived_today,
                  "on_hand_end": on_hand, "revenue": revenue, **costs}
        for name, value in values.items():
            metrics[name][i] = value
        sku.sales.append(sales)
        sku.lost_yday = lost
        arrival = sku.pipeline.pop(t + 1, 0)  # the next day starts with its arrivals
        if arrival > 0:
            sku.batches.append([t + 1, arrival])
        sku.arrived_today = arrival
        return np.float32(-cost if cfg.reward == "cost" else revenue - cost)

    def _obs(self) -> Obs:
        lay = self.layout
        n, t = len(self.skus), self.day
        feats = np.zeros((n, lay.dim), np.float32)
        raw = RawState(np.zeros(n, np.int64), np.zeros((n, lay.pipeline), np.int64),
                       np.zeros(n, np.int64), np.zeros((n, lay.horizon), np.float32), t,
                       np.array(self.owed, np.int64) if self.network else None)
        for i, sku in enumerate(self.skus):
            raw.on_hand[i] = sku.on_hand()
            raw.backlog[i] = sku.backlog
            for k in range(1, lay.pipeline + 1):
                raw.pipeline[i, k - 1] = sku.pipeline.get(t + k, 0)
            for d in range(lay.horizon):
                raw.forecast[i, d] = sku.forecast(t + d)
        for i, sku in enumerate(self.skus):
            feats[i] = self._features(sku, raw, i, t) + (network_features(self, i) if self.network else [])
        return Obs(feats, raw, lay.schema)

    def _features(self, sku: _Sku, raw: RawState, i: int, t: int) -> list[float]:
        p, lay = sku.p, self.layout
        inv = 1.0 / max(p["demand_mean"], 0.1)
        life, lead = p["shelf_life"], p["lead_time"]
        expiring = [0.0] * lay.expiring
        for k in range(min(life, lay.expiring)):  # arrived on t + k - life + 1
            expiring[k] = sum(u for a, u in sku.batches if a == t + k - life + 1) * inv
        week = sku.sales[-7:]
        fc = [float(x) for x in raw.forecast[i]]
        h, lost_cost, price = p["holding_cost"], p["lost_sale_cost"], p["price"]
        value = max(price, lost_cost + h, 1e-6)
        economics = [h / value, lost_cost / value, p["unit_cost"] / value, p["waste_cost"] / value,
                     price / value, p["order_cost"] / max(p["demand_mean"], 0.1) / value]
        dow = [0.0] * 7
        dow[t % 7] = 1.0
        return [
            raw.on_hand[i] * inv, *expiring, sku.backlog * inv,
            *[float(x) * inv for x in raw.pipeline[i]],
            fc[0] * inv, sum(fc[: lead + 1]) * inv,
            (sku.sales[-1] if sku.sales else 0) * inv,
            sum(week) / max(len(week), 1) * inv, sku.lost_yday * inv,
            float(lead), float(life), float(_is_promo(p, t)),
            float(any(_is_promo(p, d) for d in range(t + 1, t + lead + 1))),
            *dow, math.log(p["demand_mean"] + 1e-3), *economics, _log_dispersion(p),
        ]
