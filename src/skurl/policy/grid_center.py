"""The tuned centre of the cover grid (policy.actions.z_center=tuned).

With this centre, action k of SKU i orders up to forecast + (z_i + z_k) sigma, z_i being the
safety factor the per-SKU-tuned forecast-base-stock chose for SKU i. With
policy.actions.center_policy=forecast-s-S the tuned baseline is forecast-driven (s, S) and
each SKU also has a lot Q_i: below its level, action k orders up to that level + Q_i. The
grid's offset 0 is then that baseline's own order, exactly: a policy on it starts from the
planner's heuristic (the warm start clones it without loss) and learns where to deviate, instead of learning the
baseline's per-SKU levels from features first (a clone on a zero-centred grid lost 5-11% of
the baseline's profit).

More: docs/internals.md (policy/grid_center.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load, save

from skurl import atomic
from skurl.catalog.schema import Catalog
from skurl.config import Config
from skurl.errors import UserError

CENTER_FILE = "grid_center.safetensors"


@dataclass(frozen=True)
class GridCenter:
    """Per-SKU safety factors and lots by SKU id (sorted ids, unique). The lot is forecast-s-S's
    (policy.actions.center_policy): 0 for every SKU of a forecast-base-stock centre."""

    sku_id: np.ndarray  # int64 [M], ascending
    z: np.ndarray  # float64 [M]
    objective: float  # the tuner's objective per SKU-day (lower is better)
    lot: np.ndarray | None = None  # float64 [M] whole units; None = no lots (all 0)
    echelon: bool = False  # tuned echelon base-stock: z places the echelon level (policy/echelon_cover.py)

    def lookup(self, ids: np.ndarray, fallback: np.ndarray) -> np.ndarray:
        """Factors of SKUs `ids` (float64), `fallback`'s value where an id is not listed."""
        return self._lookup(self.z, ids, fallback)

    def lots(self, ids: np.ndarray) -> np.ndarray:
        """Lots of SKUs `ids` (float64), 0 where an id is not listed."""
        zeros = np.zeros(np.shape(ids)[0])
        return zeros if self.lot is None else self._lookup(self.lot, ids, zeros)

    def _lookup(self, values: np.ndarray, ids: np.ndarray, fallback: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        out = np.array(fallback, dtype=np.float64)
        if self.sku_id.size == 0:
            return out
        pos = np.minimum(np.searchsorted(self.sku_id, ids), self.sku_id.size - 1)
        hit = self.sku_id[pos] == ids
        out[hit] = values[pos[hit]]
        return out

    def merged(self, other: GridCenter) -> GridCenter:
        """These factors plus `other`'s for the SKUs these do not list (this objective)."""
        extra = ~np.isin(other.sku_id, self.sku_id)
        ids = np.concatenate([self.sku_id, other.sku_id[extra]])
        order = np.argsort(ids, kind="stable")
        lot = None
        if self.lot is not None or other.lot is not None:
            mine = self.lot if self.lot is not None else np.zeros(self.sku_id.size)
            theirs = other.lot if other.lot is not None else np.zeros(other.sku_id.size)
            lot = np.concatenate([mine, theirs[extra]])[order]
        return GridCenter(ids[order], np.concatenate([self.z, other.z[extra]])[order], self.objective, lot,
                          self.echelon)


def tune_center(cfg: Config, catalog: Catalog) -> GridCenter:
    """Tune the teacher per SKU on `catalog` with the baseline's tuner, seeds and horizon
    (eval.days, eval.warmup: the run is compared with that baseline, so its offset 0 must be
    that baseline's order; tuned over sim.days instead, the clone of a 20-day run scored
    6.9% below the baseline it was said to be)."""
    from skurl.policy.tuning import tune

    teacher = cfg.policy.actions.center_policy
    if teacher == "echelon-base-stock":
        return _tune_echelon(cfg, catalog)
    result = tune(teacher, catalog, cfg.sim, eval_seed=cfg.eval.seed, days=cfg.eval.days, warmup=cfg.eval.warmup,
                  sku_days=cfg.eval.tune_sku_days, max_skus=cfg.eval.tune_max_skus,
                  network_tuning=cfg.eval.network_tuning)
    ids = np.asarray(catalog.sku_id, dtype=np.int64)
    order = np.argsort(ids, kind="stable")

    def per_sku(key: str) -> np.ndarray:  # uniform catalogs tune one value for all SKUs (a scalar)
        return np.broadcast_to(np.asarray(result.params[key], dtype=np.float64), ids.shape)[order].copy()

    lot = per_sku("lot") if "lot" in result.params else None
    return GridCenter(ids[order], per_sku("z"), float(result.objective), lot)


def _tune_echelon(cfg: Config, catalog: Catalog) -> GridCenter:
    """Echelon base-stock tuned on `catalog` (eval.network_tuning, the baseline's horizon), as
    the per-row factors whose cover-grid level is the tuned level (echelon_cover.py)."""
    from skurl.policy.echelon_cover import POLICY, EchelonCover, center_factors
    from skurl.policy.tuning import tune

    EchelonCover.of(catalog)  # a catalog without networks: the one-line error before tuning
    result = tune(POLICY, catalog, cfg.sim, eval_seed=cfg.eval.seed, days=cfg.eval.days, warmup=cfg.eval.warmup,
                  sku_days=cfg.eval.tune_sku_days, max_skus=cfg.eval.tune_max_skus,
                  network_tuning=cfg.eval.network_tuning)  # warm_start.py's arguments: one tuning (tune's memo)
    ids = np.asarray(catalog.sku_id, dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    z = center_factors(catalog, np.asarray(result.params["S"], np.float64))
    return GridCenter(ids[order], z[order], float(result.objective), None, echelon=True)


def center_bytes(center: GridCenter) -> bytes:
    """The centre as safetensors bytes (the run dir's file; the blob remote collectors read)."""
    # Contiguous copies: safetensors writes a strided view's underlying buffer, not its values.
    tensors = {"sku_id": np.ascontiguousarray(center.sku_id, dtype=np.int64),
               "z": np.ascontiguousarray(center.z, dtype=np.float64), "objective": np.array([center.objective])}
    if center.echelon:
        tensors["echelon"] = np.ones(1)
    if center.lot is not None:
        tensors["lot"] = np.ascontiguousarray(center.lot, dtype=np.float64)
    return save(tensors)


def center_from_bytes(data: bytes, where: str, fix: str = "delete it to tune the centre again") -> GridCenter:
    """The centre in safetensors `data` from `where`; anything else is a one-line UserError
    naming `where` and what was expected (then `fix`)."""
    try:
        t = load(data)
    except (SafetensorError, ValueError) as e:
        raise UserError(f"{where}: not a readable safetensors file ({e}); {fix}") from e
    ids, z, obj = t.get("sku_id"), t.get("z"), t.get("objective")
    if ids is None or z is None or obj is None or ids.ndim != 1 or z.shape != ids.shape or obj.shape != (1,):
        raise UserError(f"{where}: expected tensors sku_id [M], z [M] and objective [1]; {fix}")
    if ids.dtype != np.int64 or z.dtype != np.float64:
        raise UserError(f"{where}: sku_id must be int64 and z float64, got {ids.dtype} and {z.dtype}")
    if ids.size and np.any(np.diff(ids) <= 0):
        raise UserError(f"{where}: sku_id must be strictly ascending (one factor per SKU)")
    if not np.all(np.isfinite(z)):
        raise UserError(f"{where}: z holds a non-finite safety factor (SKU {int(ids[~np.isfinite(z)][0])})")
    lot = t.get("lot")  # absent: a forecast-base-stock centre (and every file before lots)
    if lot is not None:
        if lot.shape != ids.shape or lot.dtype != np.float64:
            raise UserError(f"{where}: expected lot as float64 [M] beside sku_id, got {lot.dtype} {list(lot.shape)}")
        bad = ~(np.isfinite(lot) & (lot >= 0) & (lot == np.round(lot)))
        if bad.any():
            raise UserError(f"{where}: lot must hold whole units >= 0 (SKU {int(ids[bad][0])}: {float(lot[bad][0])})")
    return GridCenter(ids, z, float(obj[0]), lot, echelon="echelon" in t)


def save_center(run_dir: str | Path, center: GridCenter) -> None:
    atomic.write_bytes(Path(run_dir) / CENTER_FILE, center_bytes(center))


def load_center(run_dir: str | Path) -> GridCenter | None:
    """The run's centre, None when it has none yet; a damaged file is a one-line UserError."""
    path = Path(run_dir) / CENTER_FILE
    if not path.is_file():
        return None
    return center_from_bytes(path.read_bytes(), str(path))


def ensure_center(cfg: Config, run_dir: str | Path, catalog: Catalog) -> GridCenter:
    """The run's saved centre (a resumed run), or one tuned on `catalog` and saved. SKUs the
    saved centre does not list (a run continued on a changed catalog) are tuned, on their
    own, and added; the SKUs it lists keep their factors, as the policy learned them."""
    center = load_center(run_dir)
    if center is None:
        center = tune_center(cfg, catalog)
    else:
        check_center_policy(center, cfg.policy.actions.center_policy, str(Path(run_dir) / CENTER_FILE))
        new = np.flatnonzero(~np.isin(catalog.sku_id, center.sku_id))
        if new.size == 0:
            return center
        center = center.merged(tune_center(cfg, catalog.subset(new)))
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    save_center(run_dir, center)
    return center


def check_center_policy(center: GridCenter, policy: str, where: str) -> None:
    """A saved centre has lots exactly when it was tuned for forecast-s-S: a run resumed with
    another policy.actions.center_policy would change what every action orders."""
    saved = ("echelon-base-stock" if center.echelon else "forecast-s-S" if center.lot is not None
             else "forecast-base-stock")
    if saved != policy:
        raise UserError(f"policy.actions.center_policy: {policy}, but {where} was tuned for {saved} "
                        f"(expected {saved}, as the run was started, or a new run dir)")
