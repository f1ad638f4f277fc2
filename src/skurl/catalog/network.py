"""Supply networks of a catalog: each row's upstream row, echelon index and network root.

A row with `upstream` = -1 orders from an outside supplier; otherwise from the row whose
sku_id is `upstream` (docs/networks.md). Networks are trees of depth <= MAX_DEPTH whose
rows share one item. All arrays are computed by pointer jumping (depth <= 3 hops), never by
a Python loop per row.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from skurl.errors import CatalogError


class NetworkColumns(Protocol):
    """The catalog columns a network is read from (catalog.schema.Catalog has them); a
    Protocol, so that this module does not import the Catalog that validates through it."""

    @property
    def sku_id(self) -> np.ndarray: ...
    @property
    def upstream(self) -> np.ndarray: ...
    @property
    def item(self) -> np.ndarray: ...
    @property
    def group(self) -> np.ndarray: ...

MAX_DEPTH = 3  # locations on the longest path from a store to the outside supplier


def parent_rows(sku_id: np.ndarray, upstream: np.ndarray) -> np.ndarray:
    """Row index of each row's upstream (-1 for an outside supplier); -2 where the upstream
    sku_id is not in the catalog."""
    order = np.argsort(sku_id, kind="stable")
    pos = np.searchsorted(sku_id, upstream, sorter=order)
    pos = np.minimum(pos, sku_id.shape[0] - 1)
    found = sku_id[order[pos]] == upstream
    return np.where(upstream < 0, -1, np.where(found, order[pos], -2)).astype(np.int64)


def _walk(parent: np.ndarray, hops: int) -> tuple[np.ndarray, np.ndarray]:
    """(row reached after up to `hops` steps up, steps taken) for every row."""
    cur = np.arange(parent.shape[0], dtype=np.int64)
    steps = np.zeros(parent.shape[0], np.int64)
    for _ in range(hops):
        up = parent[cur]
        moving = up >= 0
        cur = np.where(moving, up, cur)
        steps += moving
    return cur, steps


def _cycle_text(sku_id: np.ndarray, parent: np.ndarray, start: int) -> str | None:
    """'a -> b -> a' when the path from `start` loops (one walk, at most N + 1 steps)."""
    seen: dict[int, int] = {}
    path: list[int] = []
    row = start
    while row >= 0 and row not in seen:
        seen[row] = len(path)
        path.append(int(sku_id[row]))
        row = int(parent[row])
    if row < 0:
        return None
    loop = [*path[seen[row]:], int(sku_id[row])]
    return " -> ".join(str(x) for x in loop)


def validate_network(catalog: NetworkColumns) -> None:
    """CatalogError naming the first SKU whose `upstream` is missing, loops, is deeper than
    MAX_DEPTH, belongs to another item, or joins a substitution group."""
    sku_id, upstream, item = catalog.sku_id, catalog.upstream, catalog.item
    parent = parent_rows(sku_id, upstream)
    if (parent == -2).any():
        i = int(np.argmax(parent == -2))
        raise CatalogError(f"catalog SKU {int(sku_id[i])}: field 'upstream' = {int(upstream[i])}, "
                           "expected the sku_id of a SKU-location in the catalog or -1 (outside supplier)")
    top, _ = _walk(parent, MAX_DEPTH - 1)
    deep = parent[top] >= 0  # more than MAX_DEPTH locations on the way up: a cycle or too deep
    if deep.any():
        i = int(np.argmax(deep))
        loop = _cycle_text(sku_id, parent, i)
        if loop is not None:
            raise CatalogError(f"catalog SKU {int(sku_id[i])}: field 'upstream' forms a cycle ({loop}), "
                               "expected a chain that ends at an outside supplier (-1)")
        raise CatalogError(f"catalog SKU {int(sku_id[i])}: field 'upstream' gives a chain of more than "
                           f"{MAX_DEPTH} locations, expected depth <= {MAX_DEPTH}")
    linked = parent >= 0
    safe = np.where(linked, parent, 0)
    other = linked & (item >= 0) & (item[safe] >= 0) & (item != item[safe])
    if other.any():
        i = int(np.argmax(other))
        raise CatalogError(f"catalog SKU {int(sku_id[i])}: field 'upstream' = {int(upstream[i])} is a location "
                           f"of item {int(item[parent[i]])}, expected one of its own item {int(item[i])}")
    in_net = linked | np.isin(np.arange(len(sku_id)), parent[linked])
    grouped = in_net & (catalog.group >= 0)
    if grouped.any():
        i = int(np.argmax(grouped))
        raise CatalogError(f"catalog SKU {int(sku_id[i])}: field 'group' = {int(catalog.group[i])}, expected -1 "
                           "for a SKU-location of a supply network (substitution within networks is not supported)")


def echelons(catalog: NetworkColumns) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(parent row or -1, root row of the network, echelon index: 1 at rows nobody orders
    from (stores), 1 + the largest index below otherwise) for a validated catalog."""
    parent = parent_rows(catalog.sku_id, catalog.upstream)
    root, _ = _walk(parent, MAX_DEPTH)
    echelon = np.ones(parent.shape[0], np.int64)
    for _ in range(MAX_DEPTH - 1):  # a row's index is 1 + max over its children
        linked = parent >= 0
        np.maximum.at(echelon, parent[linked], echelon[linked] + 1)
    return parent, root, echelon
