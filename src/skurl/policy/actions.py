"""Discrete action grids: action index -> order quantity in units (docs/architecture.md, Simulator semantics).

`multiplier` and `units` need only today's forecast. `cover` is an order-up-to action:
index k orders what ForecastBaseStock (baselines.py) orders with z = z_k, max(0, ceil(F +
z_k sigma) - IP) over the SKU's lead + review days, so the grid contains every per-SKU
constant-z base-stock policy and the network learns when to deviate. Centred on a tuned
forecast-s-S (grid_center.py), an action that orders at all orders the SKU's lot Q more;
with policy.actions.lot_factors each action is a (lot factor f, offset) pair ordering
round(f Q) more, so the lot can follow the state (docs/headroom.md). It needs per-SKU lead
times and demand distributions (`bind(catalog)`) and the full raw state in each observation."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

import numpy as np

from skurl.catalog.schema import Catalog
from skurl.config import ActionsConfig, SimConfig
from skurl.errors import ConfigError
from skurl.policy.baselines import (
    default_z,
    inventory_position,
    order_up_to_level,
    protection_days,
    protection_moments,
)
from skurl.policy.echelon_cover import EchelonCover
from skurl.policy.grid_center import GridCenter
from skurl.sim.api import RawState
from skurl.sim.env import MAX_ORDER

SKIP = -np.inf  # cover grid safety factor of "order nothing" (policy.actions.skip)


@dataclass(frozen=True)
class CoverParams:
    """Per-SKU inputs of the cover grid, row-aligned with the env's SKUs."""

    cover_days: np.ndarray  # int64 [N]: L_i + R
    dist: np.ndarray  # int8 [N]
    dispersion: np.ndarray  # float64 [N]
    z0: np.ndarray  # float64 [N]: added to every safety factor (policy.actions.z_center)
    lot: np.ndarray | None = None  # float64 [N]: units added to an order (a forecast-s-S centre)
    echelon: EchelonCover | None = None  # an echelon-base-stock centre: levels on the echelon position

    @classmethod
    def of(cls, catalog: Catalog, review_days: int, center: str = "zero", reward: str = "profit",
           tuned: GridCenter | None = None) -> CoverParams:
        lot = None
        if center in ("newsvendor", "tuned"):
            z0 = default_z(catalog, SimConfig(review_days=review_days, reward=reward))  # type: ignore[arg-type]
            if center == "tuned":
                if tuned is None:
                    raise ConfigError("policy.actions.z_center=tuned: the grid has no tuned centre (expected "
                                      "ActionGrid.with_center(...) before bind; see policy/grid_center.py)")
                z0 = tuned.lookup(catalog.sku_id, z0)  # SKUs it does not list keep the newsvendor factor
                lot = None if tuned.lot is None else tuned.lots(catalog.sku_id)
        else:
            z0 = np.zeros(len(catalog))
        echelon = EchelonCover.of(catalog) if tuned is not None and tuned.echelon and center == "tuned" else None
        return cls(protection_days(catalog, review_days), np.asarray(catalog.demand_dist),
                   catalog.dispersion.astype(np.float64), z0, lot, echelon)

    def moments(self, raw: RawState, rows: slice | np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(mean, variance, position) float64 [B] of rows `rows`: the demand over the protection
        days and the inventory position, or their echelon versions (echelon_cover.py)."""
        if self.echelon is not None:
            return self.echelon.moments(raw, rows)
        mean, var = protection_moments(raw.forecast[rows], self.cover_days[rows], self.dist[rows],
                                       self.dispersion[rows])
        return mean, var, inventory_position(_rows(raw, rows))

    def lots(self, n: int) -> np.ndarray:
        """The lot of every row (zeros without a forecast-s-S centre)."""
        return np.zeros(n) if self.lot is None else self.lot


@dataclass(frozen=True)
class ActionGrid:
    """`multiplier`: order = round(m_k x max(forecast x review_days, 1)); the floor of one
    unit lets slow movers (forecast << 1/day) order at all. `units`: order = k x step.
    `cover`: order up to forecast + z_k sigma over lead + review days (module docstring)."""

    kind: str
    values: np.ndarray  # float64 [n]: multipliers, units or safety factors per index
    review_days: int = 1
    cover: CoverParams | None = None  # kind=cover, after bind()
    z_center: str = "zero"  # kind=cover: policy.actions.z_center
    reward: str = "profit"  # sim.reward (the newsvendor centre's underage cost depends on it)
    tuned: GridCenter | None = None  # z_center=tuned: the run's tuned factors (with_center)
    lot_scale: np.ndarray | None = None  # float64 [n]: lot factor per index (lot_factors); None: 1

    @classmethod
    def from_config(cls, cfg: ActionsConfig, review_days: int = 1, catalog: Catalog | None = None,
                    reward: str = "profit") -> ActionGrid:
        if cfg.kind == "multiplier":
            values = np.linspace(0.0, cfg.max, cfg.n)
        elif cfg.kind == "cover":
            z = cfg.cover_z()
            values = np.concatenate([[SKIP], z]) if cfg.skip else z
        else:
            values = np.arange(cfg.n, dtype=np.float64) * cfg.step
        scale = None
        if cfg.kind == "cover" and len(cfg.lot_factors):
            values, scale = joint_values(cfg.cover_z(), np.asarray(cfg.lot_factors, np.float64), cfg.skip)
        grid = cls(kind=cfg.kind, values=values, review_days=review_days, z_center=cfg.z_center, reward=reward,
                   lot_scale=scale)
        return grid if catalog is None else grid.bind(catalog)

    @property
    def n(self) -> int:
        return int(self.values.shape[0])

    @property
    def needs_catalog(self) -> bool:
        """True for a cover grid not yet bound to the SKUs it will order for."""
        return self.kind == "cover" and self.cover is None

    @property
    def neutral_index(self) -> int | None:
        """The cover grid's action nearest offset (or safety factor) 0, where the warm start
        breaks ties between actions that order the same; None for the other grids."""
        if self.kind != "cover":
            return None
        offset = np.where(self.values == SKIP, np.inf, np.abs(self.values))
        if self.lot_scale is None:
            return int(np.argmin(offset))
        return int(np.lexsort((np.abs(self.lot_scale - 1.0), offset))[0])  # of those, the lot nearest 1 x

    @property
    def needs_center(self) -> bool:
        """True for a cover grid centred on tuned factors it does not have yet."""
        return self.kind == "cover" and self.z_center == "tuned" and self.tuned is None

    def with_center(self, tuned: GridCenter | None) -> ActionGrid:
        """This grid with the run's tuned centre (policy.actions.z_center=tuned; else unchanged)."""
        if self.kind != "cover" or self.z_center != "tuned":
            return self
        return dataclasses.replace(self, tuned=tuned, cover=None)

    def bind(self, catalog: Catalog) -> ActionGrid:
        """This grid for `catalog`'s SKUs, in its row order (a no-op for multiplier/units)."""
        if self.kind != "cover":
            return self
        cover = CoverParams.of(catalog, self.review_days, self.z_center, self.reward, self.tuned)
        if self.lot_scale is not None and cover.lot is None:
            raise ConfigError("policy.actions.lot_factors: the tuned grid centre has no lots (expected "
                              "policy.actions.center_policy=forecast-s-S and its grid_center.safetensors)")
        return dataclasses.replace(self, cover=cover)

    def to_orders(self, index: np.ndarray, forecast_today: np.ndarray) -> np.ndarray:
        """Units (float64 [N]) for action indices [N] given today's forecast [N]."""
        idx = np.asarray(index)
        if idx.ndim != 1 or idx.shape != forecast_today.shape:
            raise ValueError(f"actions: shape {idx.shape}, expected ({forecast_today.shape[0]},)")
        if idx.size and (idx.min() < 0 or idx.max() >= self.n):
            raise ValueError(f"actions: indices must lie in [0, {self.n - 1}]")
        return self.to_orders_checked(idx, forecast_today)[0]

    def to_orders_checked(self, index: np.ndarray, forecast_today: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Units (float64 [N]) and the mask of SKUs whose order was clipped into [0, MAX_ORDER]:
        a forecast that exploded (or is NaN) must not make the env reject the whole batch
        (docs/architecture.md, Simulator semantics: a failing SKU is isolated and reported). NaN orders become 0.
        multiplier/units only: a cover grid needs the whole state (orders_for)."""
        if self.kind == "cover":
            raise ValueError("actions: the cover grid needs the raw state: call orders_for(index, raw)")
        v = self.values[np.asarray(index)]
        if self.kind == "units":
            return v, np.zeros(v.shape[0], bool)
        base = np.maximum(forecast_today.astype(np.float64) * self.review_days, 1.0)
        with np.errstate(invalid="ignore", over="ignore"):
            units = np.floor(v * base + 0.5)
        return clip_orders(units)

    def orders_for(self, index: np.ndarray, raw: RawState) -> tuple[np.ndarray, np.ndarray]:
        """Units (float64 [N]) and the clipped mask for action indices [N] in state `raw`
        (every kind; what collectors and LearnedPolicy call)."""
        if self.kind != "cover":
            return self.to_orders_checked(index, raw.forecast[:, 0])
        idx = np.asarray(index)
        table = self.unit_table(raw, slice(0, idx.shape[0]), idx[:, None])
        return clip_orders(table[:, 0])

    def unit_table(self, raw: RawState, rows: slice | np.ndarray, index: np.ndarray | None = None) -> np.ndarray:
        """Cover grid: orders (float64 [B, A]) of SKU rows `rows` for every action (or for
        action indices `index` [B, 1]); zeros off review days, as ForecastBaseStock."""
        cover = self.bound_cover(raw)
        zz = (self.values[None, :] if index is None else self.values[index]) + cover.z0[rows, None]
        if self.review_days > 1 and raw.day % self.review_days:
            return np.zeros((raw.forecast[rows].shape[0], zz.shape[1]))
        mean, var, position = cover.moments(raw, rows)
        with np.errstate(invalid="ignore", over="ignore"):
            level = order_up_to_level(mean[:, None], np.sqrt(var)[:, None], zz)
            units = np.maximum(0.0, level - position[:, None])
            if cover.lot is not None:  # below the level: up to level + lot (forecast-s-S)
                units = units + np.where(units > 0.0, self._lots(cover.lot[rows, None], index), 0.0)
        return np.where(zz == SKIP, 0.0, units)  # up to -inf: nothing (-inf x 0 would be NaN)

    def _lots(self, lot: np.ndarray, index: np.ndarray | None) -> np.ndarray:
        """Each action's lot [B, 1 or A] from the SKUs' lots [B, 1]: round(f_k x lot) on a joint grid."""
        if self.lot_scale is None:
            return lot
        scale = self.lot_scale[None, :] if index is None else self.lot_scale[index]
        return np.floor(scale * lot + 0.5)

    def bound_cover(self, raw: RawState) -> CoverParams:
        if self.cover is None:
            raise ConfigError("policy.actions.kind=cover: the action grid is not bound to the catalog's SKUs "
                              "(lead times, demand distributions); expected ActionGrid.bind(catalog)")
        n, width = raw.forecast.shape[0], int(self.cover.cover_days.max(initial=1))
        if self.cover.cover_days.shape[0] != n:
            raise ValueError(f"actions: cover grid bound to {self.cover.cover_days.shape[0]} SKUs, "
                             f"the observation has {n}")
        if self.cover.echelon is None and raw.forecast.shape[1] < width:
            raise ConfigError(f"policy.actions.kind=cover: observations carry {raw.forecast.shape[1]} forecast "
                              f"day(s), the grid needs {width} (lead + review) and the full raw state; lean "
                              "remote env replies do not carry it (expected --mode colocated)")
        return self.cover


def joint_values(offsets: np.ndarray, factors: np.ndarray, skip: bool) -> tuple[np.ndarray, np.ndarray]:
    """(offset, lot factor) per index of the joint grid: one block of `offsets` per factor, in
    the factors' order (index = 1 x skip + block x len(offsets) + offset index)."""
    values = np.tile(offsets, factors.size)
    scale = np.repeat(factors, offsets.size)
    if skip:
        return np.concatenate([[SKIP], values]), np.concatenate([[0.0], scale])
    return values, scale


def _rows(raw: RawState, rows: slice | np.ndarray) -> RawState:
    return RawState(raw.on_hand[rows], raw.pipeline[rows], raw.backlog[rows], raw.forecast[rows], raw.day)


def clip_orders(units: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    bad = ~((units >= 0.0) & (units <= MAX_ORDER))  # NaN fails both
    if bad.any():
        units[bad] = np.where(units[bad] > MAX_ORDER, MAX_ORDER, 0.0)
    return units, bad


def bind_to_env(grid: ActionGrid, env: object, catalog: Catalog | None = None) -> ActionGrid:
    """`grid` bound to the SKUs of `env` when it needs them: to `catalog` (its rows in the
    env's row order: remote envs, modes/decoupled/remote_grid.py) or else the env's own `catalog`."""
    if not grid.needs_catalog:
        return grid
    catalog = catalog if catalog is not None else getattr(env, "catalog", None)
    if catalog is None:
        raise ConfigError(f"policy.actions.kind=cover: env {type(env).__name__} does not expose its catalog "
                          "and no catalog rows were given for its SKUs (expected a collector built with "
                          "them, or policy.actions.kind=multiplier)")
    return grid.bind(catalog)


def report_clipped(log: logging.Logger, bad: np.ndarray, sku_ids: np.ndarray | None, day: int) -> int:
    """Log the SKUs whose orders were clipped (first few ids); returns how many."""
    count = int(bad.sum())
    if count:
        rows = np.flatnonzero(bad)[:5]
        ids = rows if sku_ids is None else np.asarray(sku_ids)[rows]
        log.warning("day %d: %d SKU order(s) clipped into [0, %g] (forecast not finite or too "
                    "large), SKU ids %s%s", day, count, MAX_ORDER, ids.tolist(), " ..." if count > 5 else "")
    return count
