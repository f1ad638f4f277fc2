"""A/B tests of replenishment policies on SKUs: the stratified split and its groups file.

`assign` splits a catalog's SKUs into group A (control: the policy in use) and group B
(treatment: the new one) within strata, so each stratum holds the share of B SKUs asked
for, up to one SKU: in a stratum of n SKUs, floor(share x n + v) go to B, v uniform in
[0, 1) drawn from the stratum's name and the seed (so small strata do not all round the
same way), and the B SKUs are those with the smallest hash of (seed, sku_id). The split is a
pure function of (catalog, strata, share, seed): the same SKU lands in the same group
whatever the catalog's row order. On a catalog with supply networks the unit is the
network (every location of one the same group; assign_networks).

More: docs/internals.md (serve/ab.py)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from skurl import atomic
from skurl.catalog.network import echelons
from skurl.catalog.schema import Catalog
from skurl.columns.strata import strata_expected, strata_labels, strata_names, strata_problem
from skurl.errors import UserError

GROUPS_SCHEMA = pa.schema([("sku_id", pa.int64()), ("group", pa.string()), ("stratum", pa.string())])
# Catalogs with supply networks: also each row's network, the sku_id of its root location.
NETWORK_GROUPS_SCHEMA = GROUPS_SCHEMA.append(pa.field("network", pa.int64()))
_SALT = 0x5EED_AB  # keeps the split's hashes apart from the simulator's draws


@dataclass(frozen=True)
class Groups:
    """A split: per SKU its group (True = B) and stratum label."""

    sku_id: np.ndarray  # int64 [N]
    is_b: np.ndarray  # bool [N]
    stratum: np.ndarray  # str [N]
    network: np.ndarray | None = None  # int64 [N]: sku_id of the row's network root (networks only)

    def table(self) -> pa.Table:
        group = np.where(self.is_b, "B", "A")
        columns = [pa.array(self.sku_id, pa.int64()), pa.array(group, pa.string()),
                   pa.array(self.stratum.astype(str), pa.string())]
        if self.network is None:
            return pa.table(columns, schema=GROUPS_SCHEMA)
        return pa.table([*columns, pa.array(self.network, pa.int64())], schema=NETWORK_GROUPS_SCHEMA)


def parse_strata(text: str) -> list[str]:
    """--strata "category,velocity" -> ["category", "velocity"]; one line for a bad name."""
    names = strata_names(text)
    problem = strata_problem(names)
    if problem:
        raise UserError(f"--strata {text!r}: {problem}; expected {strata_expected()}")
    return names


def check_share(share: float) -> float:
    if not 0.0 < share < 1.0:  # also false for NaN
        raise UserError(f"--share {share}: expected the share of SKUs in group B, a number in (0, 1)")
    return float(share)


def sku_hash(sku_id: np.ndarray, seed: int) -> np.ndarray:
    """A uniform number in (0, 1) per SKU from (seed, sku_id): the counter-based generator
    the simulator uses (sim/rng.py), keyed apart from its draws."""
    from skurl.sim.rng import run_key, sku_keys

    keys = sku_keys(run_key(int(seed), _SALT), np.ascontiguousarray(sku_id, dtype=np.int64))
    return ((keys >> np.uint64(11)).astype(np.float64) + 0.5) / 2.0**53


def _stratum_offset(label: str, seed: int) -> float:
    digest = hashlib.sha256(f"{seed}\x00{label}".encode()).digest()
    return int.from_bytes(digest[:8], "little") / 2.0**64


def assign(catalog: Catalog, *, share: float, strata: list[str], seed: int) -> Groups:
    """The stratified split (module docstring): vectorized over SKUs, a loop over strata only."""
    check_share(share)
    if len(catalog) == 0:
        raise UserError("skurl ab assign: the catalog has no SKUs; expected at least one")
    if catalog.has_network:
        return assign_networks(catalog, share=share, strata=strata, seed=seed)
    labels = strata_labels(catalog, strata)
    is_b = stratified_split(catalog.sku_id, labels, share, seed)
    return Groups(sku_id=np.asarray(catalog.sku_id, dtype=np.int64), is_b=is_b, stratum=labels)


def stratified_split(unit_id: np.ndarray, labels: np.ndarray, share: float, seed: int) -> np.ndarray:
    """B mask of units (SKUs, or networks by their root's sku_id) with stratum `labels`:
    floor(share x n + v) units of each stratum, those of smallest sku_hash."""
    names, code, counts = np.unique(labels.astype(str), return_inverse=True, return_counts=True)
    code = code.ravel()
    offsets = np.array([_stratum_offset(str(n), seed) for n in names])
    k_b = np.floor(share * counts + offsets).astype(np.int64)
    order = np.lexsort((sku_hash(unit_id, seed), code))
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rank = np.empty(len(unit_id), dtype=np.int64)
    rank[order] = np.arange(len(unit_id)) - starts[code[order]]
    return rank < k_b[code]


def assign_networks(catalog: Catalog, *, share: float, strata: list[str], seed: int) -> Groups:
    """The split of a catalog with supply networks: networks, not rows, are split within
    strata (a group's policy orders for all of a network's locations, so a network cannot
    serve two), `share` is the share of networks in B. A network's strata are those of one
    row standing for it (network_units): its root's integer columns, its stores' demand."""
    root_id = network_ids(catalog)
    units = network_units(catalog, root_id)
    labels = strata_labels(units, strata)
    is_b = stratified_split(units.sku_id, labels, share, seed)
    net_of = np.searchsorted(units.sku_id, root_id)
    return Groups(sku_id=np.asarray(catalog.sku_id, dtype=np.int64), is_b=is_b[net_of], stratum=labels[net_of],
                  network=root_id)


def network_ids(catalog: Catalog) -> np.ndarray:
    """Each row's network: the sku_id of its root (the location the outside supplier serves)."""
    _, root, _ = echelons(catalog)
    return np.asarray(catalog.sku_id, np.int64)[root]


def network_units(catalog: Catalog, root_id: np.ndarray) -> Catalog:
    """One row per network (ascending root sku_id), for the strata: the root's row (its
    integer columns: category, lead time from the supplier, ...) with demand_mean the sum of
    the network's stores' (the customer demand it serves), so `velocity` is the tercile of
    the networks' demand."""
    from skurl.policy.network_baselines import Topology

    roots, net_of = np.unique(root_id, return_inverse=True)
    ids = np.asarray(catalog.sku_id, np.int64)
    order = np.argsort(ids, kind="stable")
    units = catalog.subset(order[np.searchsorted(ids, roots, sorter=order)])
    store_demand = np.where(Topology.of(catalog).store, catalog.demand_mean.astype(np.float64), 0.0)
    units.demand_mean = np.bincount(net_of.ravel(), weights=store_demand, minlength=roots.size).astype(
        units.demand_mean.dtype)
    return units


def split_networks(network: np.ndarray, is_b: np.ndarray) -> np.ndarray:
    """Mask of the rows whose network (ids per row) has rows in both groups."""
    _, net_of = np.unique(network, return_inverse=True)
    net_of = net_of.ravel()
    rows = np.bincount(net_of)
    in_b = np.bincount(net_of, weights=is_b, minlength=rows.size)
    return ((in_b > 0) & (in_b < rows))[net_of]


def check_networks_whole(where: str, sku_id: np.ndarray, network: np.ndarray, is_b: np.ndarray) -> None:
    """One line naming a network split between the groups, if any (`where`: the flag and file)."""
    split = split_networks(network, is_b)
    if not split.any():
        return
    net = network[np.argmax(split)]
    mine = network == net
    a, b = sku_id[mine & ~is_b][0], sku_id[mine & is_b][0]
    raise UserError(f"{where}: network {int(net)} is split: SKU {int(a)} in group A, SKU {int(b)} in group B "
                    f"({int(np.unique(network[split]).size)} such networks); expected every location of a "
                    "network in one group (`skurl ab assign` on the network catalog)")


def write_table(table: pa.Table, path: str | Path) -> Path:
    """A Parquet file written whole or not at all (temp file, then rename)."""
    path = Path(path)
    if path.parent and not path.parent.is_dir():
        raise UserError(f"--out {path}: directory {path.parent} does not exist; expected an existing directory")
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    atomic.write_bytes(path, sink.getvalue().to_pybytes())
    return path


def read_parquet(path: str | Path, flag: str, required: dict[str, str]) -> pa.Table:
    """A Parquet table with `required` columns {name: what is expected}; one line otherwise."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{flag} {path}: no such file; expected a Parquet file")
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise UserError(f"{flag} {path}: not a readable Parquet file ({str(exc).splitlines()[0]})") from None
    check_columns(table, path, flag, required)
    return table


def check_columns(table: pa.Table, path: str | Path, flag: str, required: dict[str, str]) -> None:
    """One line for the first of `required` columns {name: what is expected} that is
    missing or has empty values."""
    for name, what in required.items():
        if name not in table.column_names:
            raise UserError(f"{flag} {path}: missing column '{name}'; expected {what}")
        if table.column(name).null_count:
            raise UserError(f"{flag} {path}: column '{name}' has empty values; expected {what} in every row")


def read_groups(path: str | Path) -> Groups:
    """GROUPS.parquet back as Groups, checked: sku_id integer and unique, group 'A' or 'B'."""
    table = read_parquet(path, "--groups", {"sku_id": "integer SKU ids", "group": "'A' or 'B'",
                                            "stratum": "stratum labels (strings)"})
    sku = table.column("sku_id")
    if not pa.types.is_integer(sku.type):
        raise UserError(f"--groups {path}: column 'sku_id' is {sku.type}; expected integer SKU ids")
    sku_id = sku.to_numpy().astype(np.int64)
    group = table.column("group").to_numpy(zero_copy_only=False).astype(object)
    bad = ~np.isin(group, ["A", "B"])
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise UserError(f"--groups {path}: SKU {sku_id[i]}: group {group[i]!r}; expected 'A' or 'B'")
    unique, counts = np.unique(sku_id, return_counts=True)
    if (counts > 1).any():
        raise UserError(f"--groups {path}: SKU {unique[counts > 1][0]} appears more than once; expected one row per SKU")
    stratum = table.column("stratum").to_numpy(zero_copy_only=False).astype(str).astype(object)
    network = _network_column(table, path)
    if network is not None:
        check_networks_whole(f"--groups {path}", sku_id, network, group == "B")
    return Groups(sku_id=sku_id, is_b=group == "B", stratum=stratum, network=network)


def _network_column(table: pa.Table, path: str | Path) -> np.ndarray | None:
    """The optional `network` column (catalogs with supply networks) as int64, checked."""
    if "network" not in table.column_names:
        return None
    what = "integer network ids (each row's root sku_id)"
    check_columns(table, path, "--groups", {"network": what})
    column = table.column("network")
    if not pa.types.is_integer(column.type):
        raise UserError(f"--groups {path}: column 'network' is {column.type}; expected {what}")
    return column.to_numpy().astype(np.int64)
