"""`skurl recommend`: an inventory snapshot -> tomorrow's orders, one row per SKU.

Pipeline: read the snapshot (Parquet), validate it against the model's widths and the
catalog (serve/validate.py), build the observations with the simulator's feature function
(serve/features.py), run the decision (ONNX or the run's torch module, in batches) and
write sku_id, order_units, action, probability, policy_version atomically. With an A/B
groups file, the SKUs of group B get the orders of a second model or a tuned baseline; on a
network snapshot each group is a set of whole networks (ab_networks).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from skurl.catalog.schema import Catalog
from skurl.errors import UserError
from skurl.policy.actions import CoverParams
from skurl.serve.features import observations
from skurl.serve.models import ModelInfo, OnnxModel, TorchModel
from skurl.serve.snapshot import Snapshot, SnapshotError, write_parquet
from skurl.serve.validate import catalog_rows, snapshot_from_table
from skurl.sim.layout import schema_for

ORDER_COLUMNS = ("sku_id", "order_units", "action", "probability", "policy_version")
Model = OnnxModel | TorchModel


@dataclass
class Orders:
    """Orders of snapshot rows, in snapshot order."""

    sku_id: np.ndarray
    order_units: np.ndarray  # float64, whole units
    action: np.ndarray  # int64; -1 where a baseline ordered
    probability: np.ndarray  # float32; NaN where a baseline ordered
    policy_version: np.ndarray  # str
    group: np.ndarray | None = None  # str 'A'/'B' under --ab


@dataclass
class Timings:
    """Wall seconds per stage, and CPU seconds (all threads) since the previous stage ended:
    on a shared machine the CPU figure is the one other load does not inflate."""

    stages: dict[str, float] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)
    _cpu_mark: float = field(default_factory=time.process_time)

    def add(self, name: str, since: float) -> float:
        now, cpu = time.perf_counter(), time.process_time()
        self.stages[name] = self.stages.get(name, 0.0) + now - since
        self.cpu[name] = self.cpu.get(name, 0.0) + cpu - self._cpu_mark
        self._cpu_mark = cpu
        return now


def check_schema(info: ModelInfo) -> None:
    """The model's observation schema must be the one this skurl's feature function writes."""
    ours = schema_for(info.widths.expiring, info.widths.pipeline, info.network).names()
    if ours != info.obs_names:
        k = next((i for i, (a, b) in enumerate(zip(ours, info.obs_names, strict=False)) if a != b),
                 min(len(ours), len(info.obs_names)))
        theirs = info.obs_names[k] if k < len(info.obs_names) else "(none)"
        raise UserError(f"{info.source}: model schema mismatch at observation column {k}: the model has '{theirs}', "
                        f"this skurl's feature function writes '{ours[k] if k < len(ours) else '(none)'}' "
                        "(export the run again with this skurl)")


def decode_inputs(s: Snapshot, rows: Catalog, obs: np.ndarray, info: ModelInfo) -> dict[str, np.ndarray]:
    """Every input a decision graph may take (decision.INPUTS), for snapshot rows `s`."""
    grid, sim = info.grid, info.cfg.sim
    out = {"obs": obs, "forecast": np.ascontiguousarray(s.forecast, np.float32),
           "on_hand": s.on_hand, "pipeline": np.ascontiguousarray(s.pipeline), "backlog": s.backlog, "day": s.day}
    if grid["kind"] == "cover":
        if grid["z_center"] == "tuned" and info.center is None:
            raise UserError(f"{info.source}: policy.actions.z_center=tuned but no tuned grid centre "
                            "(expected RUN_DIR/grid_center.safetensors, which `skurl export` embeds)")
        cover = CoverParams.of(rows, int(grid["review_days"]), grid["z_center"], sim.reward, info.center)
        out.update(cover_days=cover.cover_days.astype(np.int64), demand_dist=cover.dist.astype(np.int64),
                   dispersion=cover.dispersion.astype(np.float64), z_center=cover.z0.astype(np.float64),
                   lot=cover.lots(len(s)).astype(np.float64))
        if info.decode == "echelon-cover":
            out.update(echelon_inputs(s, cover, info.source))
    return out


def echelon_inputs(s: Snapshot, cover: CoverParams, source: str) -> dict[str, np.ndarray]:
    """echelon_mean and echelon_position (float64 [N]) of snapshot rows `s` (whole networks),
    by the training grid's own EchelonCover.moments, so the graph's table is the simulator's."""
    from skurl.sim.api import RawState

    if cover.echelon is None:
        raise UserError(f"{source}: the model decodes on the echelon position but its grid centre is not an "
                        "echelon centre (expected the grid_center.safetensors of a run with "
                        "policy.actions.center_policy=echelon-base-stock)")
    raw = RawState(s.on_hand, s.pipeline, s.backlog, s.forecast, 0, s.owed)  # the position reads no day
    mean, _, position = cover.moments(raw, slice(None))
    return {"echelon_mean": np.ascontiguousarray(mean, np.float64),
            "echelon_position": np.ascontiguousarray(position, np.float64)}


def model_orders(model: Model, s: Snapshot, catalog: Catalog, timings: Timings) -> Orders:
    """The model's orders for snapshot `s` (validated against `catalog` first)."""
    info = model.info
    t = time.perf_counter()
    rows = catalog_rows(s, catalog, info.widths, int(info.grid["review_days"]))
    obs = observations(s, rows)
    inputs = decode_inputs(s, rows, obs, info)
    t = timings.add("features", t)
    units, action, prob = model.run(inputs)
    timings.add("inference", t)
    version = np.full(len(s), info.policy_version, dtype=object)
    return Orders(s.sku_id, units, action, prob, version)


def baseline_orders(name: str, s: Snapshot, catalog: Catalog, info: ModelInfo) -> Orders:
    """A baseline tuned on these SKUs (policy/tuning.py: the run's tuning seeds and horizon)."""
    from skurl.policy.baselines import make_policy
    from skurl.policy.tuning import tune
    from skurl.sim.api import Obs, RawState

    cfg = info.cfg
    rows = catalog_rows(s, catalog, info.widths, cfg.sim.review_days)
    days = np.unique(s.day)
    if days.shape[0] > 1:
        raise SnapshotError(f"snapshot column 'day': {days.shape[0]} different days; a baseline orders for one day")
    check_baseline_fits(name, s)
    result = tune(name, rows, cfg.sim, eval_seed=cfg.eval.seed, days=cfg.eval.days, warmup=cfg.eval.warmup,
                  sku_days=cfg.eval.tune_sku_days, max_skus=cfg.eval.tune_max_skus,
                  network_tuning=cfg.eval.network_tuning)
    policy = make_policy(name, rows, cfg.sim, result.params)
    raw = RawState(s.on_hand, s.pipeline, s.backlog, s.forecast, int(days[0]) if days.size else 0, owed=s.owed)
    obs = Obs(observations(s, rows), raw, schema_for(s.widths.expiring, s.widths.pipeline, s.has_network))
    units = np.asarray(policy.orders(obs), np.float64)
    n = len(s)
    return Orders(s.sku_id, units, np.full(n, -1, np.int64), np.full(n, np.nan, np.float32),
                  np.full(n, f"baseline:{name}", dtype=object))


def check_baseline_fits(name: str, s: Snapshot) -> None:
    """A network baseline (echelon/installation base-stock) needs a network snapshot."""
    from skurl.policy.network_baselines import NETWORK_POLICIES

    if name in NETWORK_POLICIES and not s.has_network:
        raise UserError(f"--policy-a/--policy-b {name}: a baseline of supply networks; the snapshot has none "
                        "(expected a network-free baseline, e.g. forecast-base-stock)")


def read_groups(path: Path, s: Snapshot) -> np.ndarray:
    """Group ('A' or 'B') of every snapshot row from an `skurl ab assign` file."""
    if not Path(path).is_file():
        raise UserError(f"--ab {path}: no such file (expected the groups file of `skurl ab assign`)")
    table = pq.read_table(path)
    for name in ("sku_id", "group", "stratum"):
        if name not in table.column_names:
            raise UserError(f"--ab {path}: column '{name}' missing (expected sku_id, group, stratum)")
    ids = table.column("sku_id").to_numpy()
    groups = np.asarray(table.column("group").to_pylist(), dtype=object)
    bad = ~np.isin(groups, ["A", "B"])
    if bad.any():
        i = int(np.argmax(bad))
        raise UserError(f"--ab {path}: SKU {int(ids[i])} column 'group' = {groups[i]!r}, expected 'A' or 'B'")
    order = np.argsort(ids, kind="stable")
    pos = np.minimum(np.searchsorted(ids[order], s.sku_id), max(ids.shape[0] - 1, 0))
    hit = ids[order][pos] == s.sku_id if ids.size else np.zeros(len(s), bool)
    if not hit.all():
        i = int(np.argmin(hit))
        raise UserError(f"--ab {path}: snapshot SKU {int(s.sku_id[i])} column 'sku_id': not in the groups file")
    return groups[order][pos]


def merge(groups: np.ndarray, a: Orders, b: Orders, rows_a: np.ndarray, rows_b: np.ndarray) -> Orders:
    n = groups.shape[0]

    def put(name: str, dtype: object) -> np.ndarray:
        out = np.empty(n, dtype)  # type: ignore[call-overload]
        out[rows_a], out[rows_b] = getattr(a, name), getattr(b, name)
        return out
    ids = put("sku_id", np.int64)
    return Orders(ids, put("order_units", np.float64), put("action", np.int64), put("probability", np.float32),
                  put("policy_version", object), groups)


def write_orders(orders: Orders, path: Path) -> Path:
    """sku_id, order_units, action, probability, policy_version (and group under --ab),
    written to a temporary file beside `path` and renamed over it."""
    cols = {"sku_id": pa.array(orders.sku_id, pa.int64()), "order_units": pa.array(orders.order_units, pa.float64()),
            "action": pa.array(orders.action, pa.int64()), "probability": pa.array(orders.probability, pa.float32()),
            "policy_version": pa.array(orders.policy_version.astype(str), pa.string())}
    if orders.group is not None:
        cols["group"] = pa.array(orders.group.astype(str), pa.string())
    return write_parquet(pa.table(cols), path)


def read_validated(state: Path, info: ModelInfo, timings: Timings) -> Snapshot:
    from skurl.serve.snapshot import read_table

    check_schema(info)
    t = time.perf_counter()
    table = read_table(state)
    snap = snapshot_from_table(table, info.widths, info.network)
    timings.add("read", t)
    return snap


def recommend(model: Model, state: Path, catalog: Catalog, *, ab: Path | None = None,
              model_b: Model | None = None, policy_b: str | None = None, policy_a: str | None = None,
              timings: Timings | None = None) -> Orders:
    """Orders for every SKU of snapshot `state` (A/B: each SKU its own group's). Under A/B,
    `model` serves group A and `model_b` or `policy_b` group B; or, with `policy_a` (the
    tuned baseline as control), `policy_a` serves A and `model` serves B."""
    timings = timings or Timings()
    snap = read_validated(state, model.info, timings)
    if ab is None:
        return model_orders(model, snap, catalog, timings)
    groups = read_groups(ab, snap)
    if snap.has_network:
        check_whole_networks(ab, snap, groups, catalog, model.info)
    rows_a, rows_b = np.flatnonzero(groups == "A"), np.flatnonzero(groups == "B")
    if policy_a is not None:
        control = baseline_orders(policy_a, snap.take(rows_a), catalog, model.info)
        return merge(groups, control, model_orders(model, snap.take(rows_b), catalog, timings), rows_a, rows_b)
    orders_a = model_orders(model, snap.take(rows_a), catalog, timings)
    other: Callable[[Snapshot], Orders]
    if model_b is not None:
        check_schema(model_b.info)
        if model_b.info.widths != model.info.widths:
            raise UserError(f"{model_b.info.source}: observation widths {model_b.info.widths} differ from "
                            f"{model.info.widths} of {model.info.source} (model schema mismatch: one snapshot "
                            "serves models of one catalog layout)")
        other = lambda part: model_orders(model_b, part, catalog, timings)  # noqa: E731
    elif policy_b is not None:
        other = lambda part: baseline_orders(policy_b, part, catalog, model.info)  # noqa: E731
    else:
        raise UserError("--ab: give --model-b FILE.onnx or --policy-b NAME for group B")
    return merge(groups, orders_a, other(snap.take(rows_b)), rows_a, rows_b)


def check_whole_networks(path: Path, s: Snapshot, groups: np.ndarray, catalog: Catalog, info: ModelInfo) -> None:
    """A network snapshot's groups (per row) keep every network in one group, so each
    group's part of the snapshot is whole networks (serve/network.py serves nothing else: a
    location's features read its upstream's row and its echelon position the rows below)."""
    from skurl.catalog.network import echelons
    from skurl.serve.ab import check_networks_whole

    rows = catalog_rows(s, catalog, info.widths, int(info.grid["review_days"]))  # whole snapshot checked first
    _, root, _ = echelons(rows)
    check_networks_whole(f"--ab {path}", s.sku_id, s.sku_id[root], groups == "B")
