"""modes/decoupled/remote_grid.py: the tuned centre through the rollout store (named by its hash,
checked on the way back) and a collector's catalog rows in its env's order."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from skurl.catalog import load_catalog
from skurl.config import load_config
from skurl.errors import UserError
from skurl.modes.decoupled.remote_grid import catalog_rows_for, fetch_center, publish_center
from skurl.policy.grid_center import GridCenter
from skurl.store.local import LocalRolloutStore


def test_the_centre_goes_through_the_store_and_comes_back_checked(tmp_path: Path) -> None:
    store = LocalRolloutStore(tmp_path)
    center = GridCenter(np.array([3, 7, 9]), np.array([0.5, -1.25, 2.0]), 1.5)
    assert publish_center(store, None) == ("", "")
    name, sha = publish_center(store, center)
    assert name == f"grid_center/{sha}.safetensors" and publish_center(store, center) == (name, sha)
    back = fetch_center(store, name, sha)
    assert back.sku_id.tolist() == [3, 7, 9] and back.z.tolist() == [0.5, -1.25, 2.0] and back.objective == 1.5
    with pytest.raises(UserError, match="expected 0000"):
        fetch_center(store, name, "0" * 64)
    with pytest.raises(UserError, match="not in the rollout store"):
        fetch_center(store, "grid_center/missing.safetensors", sha)
    store.put_blob("grid_center/bad.safetensors", b"not safetensors")
    import hashlib

    with pytest.raises(UserError, match="not a readable safetensors"):
        fetch_center(store, "grid_center/bad.safetensors", hashlib.sha256(b"not safetensors").hexdigest())


def test_catalog_rows_come_in_the_env_order_and_unknown_ids_are_one_line() -> None:
    catalog = load_catalog(load_config(None, ["catalog.skus=50", "catalog.seed=4"]).catalog)
    ids = catalog.sku_id[[31, 2, 17, 40]]
    rows = catalog_rows_for(catalog, ids, "collector")
    assert rows.sku_id.tolist() == ids.tolist()
    np.testing.assert_array_equal(rows.lead_time, catalog.lead_time[[31, 2, 17, 40]])
    with pytest.raises(UserError, match="collector: SKU 999999 is not in the catalog"):
        catalog_rows_for(catalog, np.array([ids[0], 999999]), "collector")
