"""VectorEnv: the in-process batch simulator of one shard of SKUs (sim/api.Env).

Usage:
    env = VectorEnv(catalog, cfg.sim)
    obs = env.reset(seed=0, episode=0)
    while True:
        res = env.step(orders_in_units)   # float or int [N], >= 0
        if res.done: break

More: docs/internals.md (sim/env.py)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numba
import numpy as np

from skurl.catalog.schema import Catalog
from skurl.config import SimConfig
from skurl.errors import CatalogError
from skurl.sim.allocation import RULES
from skurl.sim.api import (
    ActionError,
    DayMetrics,
    EnvStateError,
    Obs,
    ObsSchema,
    RawState,
    StepResult,
)
from skurl.sim.clone import (
    Expansion,
    clone_keys,
    clone_network,
    copy_rows,
    group_expansion,
    network_expansion,
)
from skurl.sim.kernel import first_bad_order, reset_kernel, step_kernel
from skurl.sim.layout import NETWORK_FIELDS, Layout, layout_for
from skurl.sim.network import Network, network_features_kernel, network_for, network_step_kernel
from skurl.sim.rng import MAX_DAY, run_key
from skurl.sim.state import (
    FAIL_REASONS,
    METRIC_FIELDS,
    S_BACKLOG,
    S_FAIL,
    S_KEY,
    S_ON_HAND,
    S_PIPE,
    make_outputs,
    make_params,
    make_state,
)
from skurl.sim.state_snapshot import N_COUNTS, snapshot_state
from skurl.sim.transfers import check_transfer_lead, transfer_rule

if TYPE_CHECKING:
    from collections.abc import Callable

    from numpy.typing import ArrayLike

MAX_ORDER = 1e9  # units per SKU per day; larger orders are surely a unit/scale bug
# Work items (chunks of ~512 rows, sim/chunks.py) a thread takes at a time. numba's default
# splits the prange into one static block per thread: on a shared machine a thread that
# loses its core leaves the other waiting at the end of the day. Small dynamic blocks keep
# both busy; which thread runs a chunk changes no result (each SKU is one thread's).
PARALLEL_CHUNK_ITEMS = 4


def dynamic_blocks(kernel: Callable[..., object], *args: object) -> None:
    """Run a parallel numba kernel with small dynamic work items (PARALLEL_CHUNK_ITEMS)."""
    previous = numba.set_parallel_chunksize(PARALLEL_CHUNK_ITEMS)
    try:
        kernel(*args)
    finally:
        numba.set_parallel_chunksize(previous)


def check_structure(catalog: Catalog) -> None:
    """The fields that size or index the state arrays must be sane, else CatalogError (the
    kernel would index out of bounds). Other bad values isolate the SKU at run time."""
    n = len(catalog)
    if n == 0:
        raise CatalogError("catalog: no SKUs (expected at least one row)")
    for name, lo, hi in (("lead_time", 1, 60), ("delay_max", 0, 30), ("shelf_life", 0, 365),
                         ("demand_dist", 0, 2), ("promo_period", 0, 10_000)):
        arr = getattr(catalog, name)
        if arr.shape[0] != n:
            raise CatalogError(f"catalog field '{name}': {arr.shape[0]} rows, expected {n}")
        bad = (arr < lo) | (arr > hi)
        if name == "lead_time":  # a link from an upstream location may take 0 days
            bad &= ~((arr == 0) & (catalog.upstream >= 0))
        if bad.any():
            i = int(np.argmax(bad))
            raise CatalogError(f"catalog SKU {int(catalog.sku_id[i])}: field '{name}' = {arr[i]!r}, "
                               f"expected an integer in [{lo}, {hi}]")


def _read_only(arr: np.ndarray) -> np.ndarray:
    view = arr.view()
    view.flags.writeable = False
    return view


class VectorEnv:
    """N SKUs simulated in lock step by numba kernels; see the module docstring."""

    def __init__(self, catalog: Catalog, sim_cfg: SimConfig | None = None,
                 min_widths: tuple[int, int] = (0, 0), network: Network | None = None) -> None:
        check_structure(catalog)
        self.cfg = sim_cfg or SimConfig()
        self.catalog = catalog
        # min_widths: (A, P) of the whole catalog when `catalog` is a subset (layout_for)
        self.layout: Layout = layout_for(catalog, self.cfg.review_days, min_widths)
        self._params = make_params(catalog, self.cfg.substitution)
        # network: a clone's topology (its sku_ids repeat, so the catalog's upstream ids cannot give it)
        self._net = network if network is not None else network_for(catalog, self.cfg)
        if self._net is not None:
            check_transfer_lead(self.cfg, self.layout.pipeline)
        self._transfers = transfer_rule(self.cfg)
        self._state = make_state(catalog, self.layout)
        self._out = make_outputs(len(catalog), self.layout, self._net is not None)
        self._kout = self._out  # what the kernels write: without the network columns
        if self._net is not None:
            self._owed_view = _read_only(self._net.owed)
            self._net_base = self.layout.dim - len(NETWORK_FIELDS)
            self._kout = self._out._replace(features=self._out.features[:, :self._net_base])
        self.threads = self._thread_count(self.cfg.threads)
        st = self._state.st
        npipe = self.layout.pipeline
        self._raw_views = (_read_only(st[:, S_ON_HAND]), _read_only(st[:, S_PIPE:S_PIPE + npipe]),
                           _read_only(st[:, S_BACKLOG]), _read_only(self._state.forecast))
        acc = self._out.acc
        self._nm = (acc.shape[1] - 1) // 2  # metrics the kernels write; the rest read as zeros
        zeros = _read_only(np.zeros(len(catalog)))
        self._metrics = DayMetrics(**{name: _read_only(acc[:, k]) if k < self._nm else zeros
                                      for k, name in enumerate(METRIC_FIELDS)})
        self._metrics.block = _read_only(acc[:, :self._nm])
        self._failed_view = _read_only(self._state.failed)
        self._features_view = _read_only(self._out.features)
        self._blind_view = self._features_view[:, :0]  # what observe_features(False) shows
        self._features_next = self._features_on = True
        self._day = -1
        self._seed: int | None = None
        self._episode = 0
        self.cloned: Expansion | None = None  # set on a clone: its rows' clones (VectorEnv.clone)

    @staticmethod
    def _thread_count(threads: int) -> int:
        available = int(numba.config.NUMBA_NUM_THREADS)
        return available if threads <= 0 else min(threads, available)

    @property
    def num_skus(self) -> int:
        return len(self.catalog)

    @property
    def schema(self) -> ObsSchema:
        return self.layout.schema

    @property
    def sku_ids(self) -> np.ndarray:
        return self.catalog.sku_id

    @property
    def day(self) -> int:
        """Day of the current observation (-1 before reset)."""
        return self._day

    @property
    def done(self) -> bool:
        return self._day >= self.cfg.days

    def _obs(self) -> Obs:
        on_hand, pipeline, backlog, forecast = self._raw_views
        owed = None if self._net is None else self._owed_view
        raw = RawState(on_hand, pipeline, backlog, forecast, self._day, owed)
        features = self._features_view if self._features_on else self._blind_view
        return Obs(features, raw, self.layout.schema)

    def observe_features(self, on: bool) -> None:
        """From the next reset on, write the feature rows each day (the default) or not: a
        decision rule that reads only `obs.raw` (a baseline) runs ~1.3x faster without them
        (`skurl bench sim`'s kernel, 200k SKUs). Off, observations carry features of width 0,
        so a rule that does read them fails at once."""
        self._features_next = bool(on)

    def observe(self) -> Obs:
        """Today's observation, as the last reset/step returned it (views)."""
        if self._day < 0:
            raise EnvStateError("observe: call reset() first")
        return self._obs()

    def reset(self, seed: int, episode: int = 0) -> Obs:
        """Day 0 of episode `episode` under run seed `seed` (ints >= 0)."""
        for name, v in (("seed", seed), ("episode", episode)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise EnvStateError(f"reset: {name} = {v!r}, expected an integer >= 0")
        if self.cfg.days + self.layout.horizon >= MAX_DAY:
            raise EnvStateError(f"sim.days = {self.cfg.days}: too many days for the day counter")
        self._seed, self._episode = int(seed), int(episode)
        self._features_on = self._features_next  # from a reset: a day's rows update the day before's
        numba.set_num_threads(self.threads)
        init_days = float(self.cfg.initial_stock_days)
        dynamic_blocks(reset_kernel, self._params, self._state, self._kout,
                    run_key(self._seed, self._episode), init_days, np.int64(self.layout.pipeline))
        if self._net is not None:
            self._net.owed[:] = 0
            dynamic_blocks(network_features_kernel, self._params, self._state, self._net, self._out.features,
                        np.int64(self._net_base))
        self._day = 0
        return self._obs()

    def _check_orders(self, orders: ArrayLike) -> np.ndarray:
        arr = np.asarray(orders)
        n = self.num_skus
        if arr.ndim != 1 or arr.shape[0] != n:
            raise ActionError(f"orders: shape {arr.shape}, expected ({n},) (one order per SKU)")
        if arr.dtype.kind not in "iuf":
            raise ActionError(f"orders: dtype {arr.dtype}, expected a numeric (int or float) array")
        arr = np.ascontiguousarray(arr, dtype=np.float64)
        i = int(first_bad_order(arr, MAX_ORDER))
        if i >= 0:
            raise ActionError(
                f"orders: SKU {int(self.catalog.sku_id[i])} (row {i}) = {arr[i]!r}, "
                f"expected a finite number of units in [0, {MAX_ORDER:g}]"
            )
        return arr

    def step(self, orders: np.ndarray) -> StepResult:
        """Simulate today with these orders (units, >= 0, rounded half up); next day's obs."""
        if self._day < 0:
            raise EnvStateError("step: call reset() first")
        if self.done:
            raise EnvStateError(f"step: the episode ended after day {self.cfg.days - 1}; call reset()")
        arr = self._check_orders(orders)
        numba.set_num_threads(self.threads)
        cfg = self.cfg
        if self._net is None:
            dynamic_blocks(step_kernel, self._params, self._state, self._out, arr,
                        np.int64(self.layout.pipeline), np.int64(self._day), cfg.backorders,
                        cfg.issuing == "lifo", cfg.reward == "cost", self._features_on)
        else:
            dynamic_blocks(network_step_kernel, self._params, self._state, self._kout, self._out.features,
                        np.int64(self._net_base), self._net, arr,
                        np.int64(self.layout.pipeline), np.int64(self._day), cfg.backorders,
                        cfg.issuing == "lifo", cfg.reward == "cost", np.int64(RULES[cfg.upstream_allocation]),
                        cfg.upstream_shortage == "cancel", cfg.network_reward == "network", self._transfers,
                        self._features_on)
        self._day += 1
        return StepResult(self._obs(), self._out.reward, self.done, self._metrics, self._failed_view)

    def clone(self, rows: np.ndarray, episodes: np.ndarray | None = None, seed: int | None = None,
              days: int | None = None, whole_groups: bool = False) -> VectorEnv:
        """A new env whose clone j is a copy of row rows[j] today (sim/clone.py): it replays
        that row's future when `episodes` is None, else the future of episode episodes[j]
        under run seed `seed` (default this env's). It runs until day `days` (default
        sim.days); its totals start at zero. `whole_groups`: a grouped row's members come
        along as a group of the clone's own, a network row's whole network as a network of
        the clone's own (faithful); else clones are simulated alone, which a network row
        cannot be (a store alone has no supplier): refused there. The new env's `cloned`
        maps its rows to the clones (sim/clone.Expansion)."""
        if self._day < 0 or self._seed is None:
            raise EnvStateError("clone: call reset() first")
        if self._net is not None and not whole_groups:
            raise EnvStateError("clone: a row of a supply network is simulated with its whole network only "
                                "(docs/networks.md); expected whole_groups=True")
        idx = np.ascontiguousarray(rows, dtype=np.int64)
        if idx.ndim != 1 or idx.size == 0 or idx.min() < 0 or idx.max() >= self.num_skus:
            raise ValueError(f"clone: rows must be a non-empty 1-d array of rows in [0, {self.num_skus})")
        last = self.cfg.days if days is None else int(days)
        if last <= self._day:
            raise EnvStateError(f"clone: days = {last}, expected more than today ({self._day})")
        if episodes is not None:
            episodes = np.asarray(episodes, dtype=np.int64)
            if episodes.shape != idx.shape or episodes.min() < 0:
                raise ValueError(f"clone: episodes must be {idx.shape[0]} integers >= 0 (one per row)")
        run_seed = self._seed if seed is None else int(seed)
        p = self._params
        grouped = whole_groups and self.cfg.substitution
        ex, net = self._expansion(idx, grouped)
        cfg = dataclasses.replace(self.cfg, days=last, substitution=grouped)
        catalog = dataclasses.replace(self.catalog.subset(ex.src), group=ex.group)
        env = VectorEnv(catalog, cfg, (self.layout.expiring, self.layout.pipeline), net)
        keys = clone_keys(self._state.st[ex.src, S_KEY], self.catalog.sku_id[ex.src], run_seed,
                          None if episodes is None else episodes[ex.owner])
        numba.set_num_threads(self.threads)
        copy_rows(p, self._state, self._out, ex.src, keys, env._params, env._state, env._out)
        env._day, env._seed, env._episode, env.cloned = self._day, run_seed, self._episode, ex
        env._features_on = env._features_next = self._features_on  # its copied rows are as current as these
        return env

    def _expansion(self, rows: np.ndarray, grouped: bool) -> tuple[Expansion, Network | None]:
        """The clone env's rows for clones of `rows`, and its networks (None without)."""
        if self._net is not None:
            ex = network_expansion(self._net, self.num_skus, rows)
            return ex, clone_network(self._net, ex, self.catalog.sku_id)
        p = self._params
        return group_expansion(p.group_start, p.group_rows if grouped else p.group_rows[:0], self.num_skus, rows), None

    def state_snapshot(self) -> dict[str, np.ndarray]:
        """Today's state as inventory-snapshot arrays (new arrays; serve/snapshot.py names
        them): expiring [N, A], pipeline [N, P], forecast [N, H], counts [N, 5]
        (state_snapshot.N_COUNTS), promo [N, 2] bool."""
        if self._day < 0:
            raise EnvStateError("state_snapshot: call reset() first")
        n, lay = self.num_skus, self.layout
        out = {"expiring": np.zeros((n, lay.expiring), np.int64), "pipeline": np.zeros((n, lay.pipeline), np.int64),
               "counts": np.zeros((n, N_COUNTS), np.int64), "promo": np.zeros((n, 2), np.bool_)}
        snapshot_state(self._params.par, self._state.st, self._state.stock, np.int64(self._day),
                       out["expiring"], out["pipeline"], out["counts"], out["promo"])
        out["forecast"] = self._state.forecast.copy()
        return out

    def totals(self) -> dict[str, np.ndarray]:
        """Per-SKU float64 sums of every DayMetrics field (and reward) since reset or
        reset_totals() (copies)."""
        acc, nm = self._out.acc, self._nm
        out = {name: acc[:, nm + k].copy() if k < nm else np.zeros(acc.shape[0])
               for k, name in enumerate(METRIC_FIELDS)}
        out["reward"] = acc[:, 2 * nm].copy()
        return out

    def reset_totals(self) -> None:
        """Start the sums again (e.g. after an evaluation warm-up)."""
        self._out.acc[:, self._nm:] = 0.0

    def failed_ids(self) -> np.ndarray:
        return self.catalog.sku_id[self._state.failed].copy()

    def info(self) -> dict[str, Any]:
        failed = np.flatnonzero(self._state.failed)
        reasons = self._state.st[failed, S_FAIL]
        return {
            "backend": "vector",
            "num_skus": self.num_skus,
            "obs_dim": self.layout.dim,
            "schema": [[name, width] for name, width in self.layout.schema.fields],
            "pipeline_days": self.layout.pipeline,
            "expiring_days": self.layout.expiring,
            "forecast_days": self.layout.horizon,
            "days": self.cfg.days,
            "day": self._day,
            "seed": self._seed,
            "episode": self._episode,
            "threads": self.threads,
            "failed_sku_ids": [int(x) for x in self.catalog.sku_id[failed]],
            "failed_reasons": {FAIL_REASONS[int(r)]: int((reasons == r).sum()) for r in np.unique(reasons)},
        }

    def close(self) -> None:
        """Nothing to release beyond memory; present for the Env protocol."""
        self._day = -1
