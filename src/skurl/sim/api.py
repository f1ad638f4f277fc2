"""The environment contract every simulator backend follows (in-process, gRPC shard, Ray actor).

A batch env simulates N SKU-locations in lock step, one day per `step`. Actions are
order quantities in units (float or int, finite, >= 0); the discrete action grids of
learned policies live in `skurl.policy.actions` and map indices to units first, so
baselines and learned policies drive the same env the same way.

Observation: `Obs.features` is the concatenation of the named fields in `Obs.schema`
(float32 [N, D], quantities scaled by the SKU's demand rate); `Obs.raw` holds the
exact integer state and forecasts in units that heuristics need. Both are views into
preallocated arrays that the next `step` overwrites: copy what you keep.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Protocol, runtime_checkable

import numpy as np
from numba import njit

from skurl.errors import UserError


class ActionError(UserError):
    """Orders passed to `step` are malformed (shape, dtype, NaN, negative, too large)."""


class EnvStateError(UserError):
    """`step` called before `reset` or after the episode's last day."""


# Random-number streams: a draw is a pure function of (seed, episode, sku_id, day, stream, k).
STREAM_DEMAND = 0
STREAM_SUBSTITUTION = 1
STREAM_DELAY = 2
STREAM_FORECAST = 3
STREAM_FAILURE = 4
STREAM_ACTION = 5  # policy sampling: u(seed, iteration, sku_id, day) drawn by collectors


@dataclass(frozen=True)
class ObsSchema:
    """Named column slices of the feature matrix, in order: name -> (start, width)."""

    fields: tuple[tuple[str, int], ...]

    @property
    def dim(self) -> int:
        return sum(w for _, w in self.fields)

    def slices(self) -> dict[str, slice]:
        out, start = {}, 0
        for name, width in self.fields:
            out[name] = slice(start, start + width)
            start += width
        return out

    def names(self) -> list[str]:
        """One name per feature column, e.g. pipeline[3]."""
        cols = []
        for name, width in self.fields:
            cols.extend([name] if width == 1 else [f"{name}[{k}]" for k in range(width)])
        return cols


@dataclass
class RawState:
    """Exact state in units, for heuristics; arrays of length N unless noted."""

    on_hand: np.ndarray  # int64, total units on hand after today's arrivals
    pipeline: np.ndarray  # int64 [N, P], pipeline[:, k-1] = units arriving on day t+k
    backlog: np.ndarray  # int64, backordered units (0 under lost sales)
    forecast: np.ndarray  # float32 [N, H] mean-demand forecast for days t..t+H-1
    day: int  # today's day index within the episode
    owed: np.ndarray | None = None  # int64, units the upstream owes each row (supply networks only)


@dataclass
class Obs:
    features: np.ndarray  # float32 [N, schema.dim]
    raw: RawState
    schema: ObsSchema


@dataclass
class DayMetrics:
    """Per-SKU quantities of the day just simulated (float64 [N] unless noted)."""

    demand: np.ndarray
    sales: np.ndarray
    lost: np.ndarray  # unmet today (lost, or newly backordered)
    substituted: np.ndarray  # units of this SKU's unmet demand served by substitutes
    waste: np.ndarray
    ordered: np.ndarray
    arrived: np.ndarray
    on_hand_end: np.ndarray
    holding_cost: np.ndarray
    penalty_cost: np.ndarray
    purchase_cost: np.ndarray
    order_cost: np.ndarray
    waste_cost: np.ndarray
    revenue: np.ndarray
    # Supply networks only (docs/networks.md); None at init = zeros, so backends and fakes
    # written before these fields build DayMetrics as they did.
    ship_cost: np.ndarray = None  # type: ignore[assignment]  # per unit shipped to the row by its upstream
    transfer_cost: np.ndarray = None  # type: ignore[assignment]  # per unit the row sent to a sibling store
    transferred: np.ndarray = None  # type: ignore[assignment]  # units the row sent to sibling stores
    # Not a field: the first fields as the columns of one row-major [N, K] block, when a
    # backend keeps them so (VectorEnv; K < M where the later fields are all zeros: a
    # network-free env leaves out the supply-network ones). Summing a strided column reads
    # every cache line of the block, so M column sums cost ~M block reads; one pass costs one.
    block = None  # type: np.ndarray | None

    def __post_init__(self) -> None:
        for name in ("ship_cost", "transfer_cost", "transferred"):
            if getattr(self, name) is None:
                setattr(self, name, np.zeros(np.shape(self.demand)))

    def sums(self) -> np.ndarray:
        """float64 [M]: each field summed over SKUs, in field order."""
        if self.block is not None:
            out = np.zeros(len(fields(self)))
            out[:self.block.shape[1]] = _row_sums(self.block)
            return out
        return np.array([getattr(self, f.name).sum(dtype=np.float64) for f in fields(self)])


@njit(cache=True, nogil=True)
def _row_sums(block: np.ndarray) -> np.ndarray:
    out = np.zeros(block.shape[1], np.float64)
    for i in range(block.shape[0]):
        for k in range(block.shape[1]):
            out[k] += block[i, k]
    return out


@dataclass
class StepResult:
    obs: Obs
    reward: np.ndarray  # float32 [N]
    done: bool  # True when the episode's last day was simulated (a truncation, not a terminal)
    metrics: DayMetrics
    failed: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # SKUs isolated at run time


@runtime_checkable
class Env(Protocol):
    """A batch of SKUs simulated in lock step. Shard-invariant: a SKU's trajectory does not
    depend on which other SKUs are simulated with it (its substitution group aside)."""

    @property
    def num_skus(self) -> int: ...

    @property
    def schema(self) -> ObsSchema: ...

    @property
    def sku_ids(self) -> np.ndarray:
        """int64 [N]: the catalog SKU id of each row; collectors key per-SKU random draws on
        them, so a SKU draws the same numbers whichever shard or mode simulates it."""
        ...

    def reset(self, seed: int, episode: int = 0) -> Obs: ...

    def step(self, orders: np.ndarray) -> StepResult: ...

    def info(self) -> dict: ...

    def close(self) -> None: ...
