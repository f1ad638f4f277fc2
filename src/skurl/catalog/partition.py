"""Split a catalog's rows across shards (simulator servers, Ray workers, collectors).

A substitution group moves demand between its members the same day, and a supply network
(catalog/network.py) stock between its locations, so each is one unit, never split. Methods:

More: docs/internals.md (catalog/partition.py)."""

from __future__ import annotations

import heapq
from typing import Literal

import numba
import numpy as np

from skurl.catalog.schema import Catalog
from skurl.errors import CatalogError, UserError

Method = Literal["round_robin_cost", "equal", "lpt"]
METHODS: tuple[str, ...] = ("round_robin_cost", "equal", "lpt")


def sku_cost(catalog: Catalog) -> np.ndarray:
    """Expected relative simulation cost per SKU (float64 [N]); see the module docstring."""
    mantissa, exponent = np.frexp(1.0 + catalog.demand_mean.astype(np.float64))
    log2_rate = exponent + (2.0 * mantissa - 2.0)  # exact at powers of two, linear between
    pipeline = catalog.lead_time.astype(np.float64) + catalog.delay_max
    return (
        1.0
        + 0.25 * log2_rate
        + 0.0625 * catalog.shelf_life
        + 0.03125 * pipeline
        + 0.5 * (catalog.group >= 0)
    )


def units(catalog: Catalog) -> np.ndarray:
    """Unit id per row (int64 [N]): one per substitution group, one per supply network, one
    per other SKU, numbered in order of each unit's first row."""
    g = catalog.group.astype(np.int64)
    n = g.shape[0]
    if catalog.has_network:  # network rows are in no group (validate_network): key = root row
        from skurl.catalog.network import echelons

        return _first_seen_rank(np.where(g >= 0, g, g.max(initial=0) + 1 + echelons(catalog)[1]))
    # Fast path: members of each group adjacent (the synthetic generator's layout).
    starts = np.ones(n, dtype=bool)
    starts[1:] = (g[1:] != g[:-1]) | (g[1:] < 0)
    run_groups = g[starts]
    run_groups = run_groups[run_groups >= 0]
    if np.unique(run_groups).shape[0] == run_groups.shape[0]:
        return np.cumsum(starts) - 1
    return _first_seen_rank(np.where(g >= 0, g, g.max() + 1 + np.arange(n)))


def _first_seen_rank(key: np.ndarray) -> np.ndarray:
    """Per row, the rank of its key among the keys ordered by first occurrence."""
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    rank = np.empty(first.shape[0], dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.shape[0])
    return rank[inverse.reshape(-1)]


def _check(catalog: Catalog, n_shards: int, method: str, cost: np.ndarray | None) -> np.ndarray | None:
    if method not in METHODS:
        raise UserError(f"partition method '{method}': expected one of {' | '.join(METHODS)}")
    if n_shards < 1:
        raise UserError(f"partition: {n_shards} shards, expected an integer >= 1")
    if cost is None:
        return None
    cost = np.asarray(cost, dtype=np.float64)
    if cost.shape != (len(catalog),):
        raise CatalogError(f"partition cost: shape {cost.shape}, expected ({len(catalog)},), one per SKU")
    bad = ~np.isfinite(cost) | (cost < 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise CatalogError(
            f"partition cost of SKU {int(catalog.sku_id[i])}: {cost[i]!r}, expected a finite number >= 0"
        )
    return cost


@numba.njit(cache=True)
def _lpt_assign(order: np.ndarray, cost: np.ndarray, n_shards: int) -> np.ndarray:
    """Shard per unit: in `order`, each unit goes to the least loaded shard (lowest index on ties)."""
    heap = [(0.0, s) for s in range(n_shards)]
    shard = np.empty(order.shape[0], dtype=np.int64)
    for u in order:
        load, s = heapq.heappop(heap)
        shard[u] = s
        heapq.heappush(heap, (load + cost[u], s))
    return shard


COST_BITS = 24  # cost resolution of the sort: 2^-24 of the largest unit cost


def _most_expensive_first(unit_cost: np.ndarray) -> np.ndarray:
    """Unit ids by descending cost, ties (at 2^-24 of the top cost) by id.

    Packing (quantized cost, id) into unique int64 keys lets numpy's fastest sort run
    (several times faster than a stable float argsort at 10^7 units) while the order
    stays identical on every machine, whatever sort algorithm it picks.
    """
    n = unit_cost.shape[0]
    top = unit_cost.max(initial=0.0)
    id_bits = max(int(n - 1).bit_length(), 1)
    if top <= 0 or id_bits + COST_BITS > 62:
        return np.argsort(-unit_cost, kind="stable")
    scaled = np.floor(unit_cost / top * (1 << COST_BITS)).astype(np.int64)
    key = (((1 << COST_BITS) - scaled) << id_bits) | np.arange(n, dtype=np.int64)
    return np.sort(key) & ((1 << id_bits) - 1)


def _unit_shards(unit: np.ndarray, n_shards: int, method: str, row_cost: np.ndarray | None) -> np.ndarray:
    """Shard of each unit."""
    n_units = int(unit[-1]) + 1 if unit.shape[0] else 0
    if method == "equal":
        size = np.bincount(unit, minlength=n_units)
        rows_before = np.cumsum(size) - size
        return rows_before * n_shards // unit.shape[0]
    unit_cost = np.bincount(unit, weights=row_cost, minlength=n_units)
    order = _most_expensive_first(unit_cost)
    if method == "lpt":
        return _lpt_assign(order, unit_cost, n_shards)
    position = np.arange(n_units)
    lap, seat = np.divmod(position, n_shards)
    shard = np.empty(n_units, dtype=np.int64)
    shard[order] = np.where(lap % 2 == 0, seat, n_shards - 1 - seat)  # serpentine
    return shard


def partition(
    catalog: Catalog, n_shards: int, method: Method = "round_robin_cost", cost: np.ndarray | None = None
) -> list[np.ndarray]:
    """`n_shards` arrays of row indices (int64, ascending) covering every row exactly once.

    `cost` (float [N], per SKU) replaces the cost model for "round_robin_cost" and "lpt".
    """
    row_cost = _check(catalog, n_shards, method, cost)
    n = len(catalog)
    if n == 0:
        return [np.empty(0, dtype=np.int64) for _ in range(n_shards)]
    unit = units(catalog)
    if row_cost is None and method != "equal":
        row_cost = sku_cost(catalog)
    shard_of_row = _unit_shards(unit, n_shards, method, row_cost)[unit]
    # Grouped by shard, ascending within; small integer keys get numpy's O(n) radix sort.
    key = shard_of_row.astype(np.int16) if n_shards <= np.iinfo(np.int16).max else shard_of_row
    rows = np.argsort(key, kind="stable")
    counts = np.bincount(shard_of_row, minlength=n_shards)
    return np.split(rows.astype(np.int64), np.cumsum(counts)[:-1])


def parse_shard(spec: str) -> tuple[int, int]:
    """'i/n' -> (i, n) with 0 <= i < n, or a one-line UserError."""
    parts = str(spec).strip().split("/")
    try:
        i, n = (int(p) for p in parts)
    except ValueError:
        raise UserError(f"--shard '{spec}': expected i/n, e.g. 0/4 (shard i of n, 0 <= i < n)") from None
    _check_index(i, n)
    return i, n


def _check_index(i: int, n: int) -> None:
    if n < 1 or not 0 <= i < n:
        raise UserError(f"--shard {i}/{n}: expected i/n with n >= 1 and 0 <= i < n")


def shard_of(
    catalog: Catalog,
    i: int | str,
    n: int | None = None,
    method: Method = "round_robin_cost",
    cost: np.ndarray | None = None,
) -> np.ndarray:
    """Row indices of shard i of n; `i` may be the '--shard i/n' text itself (then n=None)."""
    if isinstance(i, str):
        if n is not None:
            raise UserError(f"--shard '{i}': give either 'i/n' text or integers i and n")
        i, n = parse_shard(i)
    if n is None:
        raise UserError(f"--shard {i}: expected i/n, e.g. 0/4")
    _check_index(i, n)
    return partition(catalog, n, method, cost)[i]
