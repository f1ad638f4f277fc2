"""The cover action grid in collectors over remote envs (--mode decoupled and ray).

The cover grid orders up to forecast + (z0_i + z_k) sigma (policy/actions.py), so a
collector needs what an in-process env gives for free:
- its SKUs' catalog rows (lead times, demand distributions, the newsvendor factor z0_i):
  collectors load the run's catalog from the config, as sim servers do, and take their rows;
- the raw state in every observation: lean env replies with raw=true (rpc/env_wire.py);
- with policy.actions.z_center=tuned, the run's tuned centre (policy/grid_center.py): the
  learner tunes it once, puts it into the rollout store as a blob named by its sha256 and
  names that blob in every Collect; a collector fetches it once, checks the hash and binds.
All three are the very inputs of the co-located collector, so the orders are bit-identical.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import numpy as np

from skurl.catalog.schema import Catalog
from skurl.config import Config
from skurl.errors import UserError
from skurl.policy.grid_center import GridCenter, center_bytes, center_from_bytes

if TYPE_CHECKING:
    from skurl.store.api import RolloutStore

CENTER_BLOB_DIR = "grid_center"


def needs_raw(cfg: Config) -> bool:
    """True when the run's grid reads the raw state (collectors ask for raw replies)."""
    return cfg.policy.actions.kind == "cover"


def publish_center(store: RolloutStore, center: GridCenter | None) -> tuple[str, str]:
    """Put `center` into the rollout store; (blob name, sha256 hex), or ("", "") for none."""
    if center is None:
        return "", ""
    data = center_bytes(center)
    sha = hashlib.sha256(data).hexdigest()
    name = f"{CENTER_BLOB_DIR}/{sha}.safetensors"
    store.put_blob(name, data)  # named by its content: writing it again changes nothing
    return name, sha


def fetch_center(store: RolloutStore, name: str, sha: str) -> GridCenter:
    """The centre in blob `name` of the rollout store, checked against `sha` (hex)."""
    try:
        data = store.get_blob(name)
    except KeyError:
        raise UserError(f"grid centre blob {name!r} is not in the rollout store (the learner writes it "
                        "before the first Collect; same store.url for learner and collectors?)") from None
    got = hashlib.sha256(data).hexdigest()
    if got != sha:
        raise UserError(f"grid centre blob {name!r}: sha256 {got[:16]}.., expected {sha[:16]}.. "
                        "(damaged in the store)")
    return center_from_bytes(data, f"grid centre blob {name!r}", "restart the learner to write it again")


def catalog_rows_for(catalog: Catalog, sku_ids: np.ndarray, where: str) -> Catalog:
    """`catalog`'s rows of `sku_ids`, in that order; ids it lacks are one UserError."""
    ids = np.asarray(sku_ids, np.int64)
    order = np.argsort(catalog.sku_id, kind="stable")
    pos = np.minimum(np.searchsorted(catalog.sku_id, ids, sorter=order), max(len(catalog) - 1, 0))
    rows = order[pos] if len(catalog) else pos
    missing = ids[catalog.sku_id[rows] != ids] if len(catalog) else ids
    if missing.size:
        raise UserError(f"{where}: SKU {int(missing[0])} is not in the catalog of catalog.* "
                        f"({missing.size} such SKU(s); same catalog config for every role?)")
    return catalog.subset(rows)
