"""The tuned centre of the cover grid (policy.actions.z_center=tuned): offset 0 orders exactly
what the per-SKU-tuned forecast-base-stock orders; unlisted SKUs fall back to the newsvendor
factor; the saved centre round-trips, and a damaged file is one clear line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save

from skurl.catalog import Catalog, load_catalog
from skurl.cli import main
from skurl.collect.evaluate import make_env
from skurl.config import ActionsConfig, Config, load_config
from skurl.errors import ConfigError, UserError
from skurl.learn.imitate import record
from skurl.policy.baselines import default_z, make_policy
from skurl.policy.grid_center import (
    CENTER_FILE,
    GridCenter,
    ensure_center,
    load_center,
    save_center,
    tune_center,
)
from skurl.policy.learned import grid_for
from skurl.policy.tuning import tune

DAYS = 10
SETTINGS = ["catalog.skus=90", f"sim.days={DAYS}", "eval.warmup=5", "policy.actions.kind=cover",
            "policy.actions.z_center=tuned", "policy.actions.n=7", "policy.actions.z_min=-1.5",
            "policy.actions.z_max=1.5"]


def config(*extra: str) -> Config:
    return load_config(None, [*SETTINGS, *extra])


@pytest.fixture(scope="module")
def tuned() -> tuple[Config, Catalog, GridCenter]:
    cfg = config()
    catalog = load_catalog(cfg.catalog)
    return cfg, catalog, tune_center(cfg, catalog)


def test_offset_zero_orders_what_the_tuned_baseline_orders(tuned: tuple[Config, Catalog, GridCenter]) -> None:
    cfg, catalog, center = tuned
    tuned = tune("forecast-base-stock", catalog, cfg.sim, eval_seed=cfg.eval.seed, days=cfg.eval.days,
                 warmup=cfg.eval.warmup)
    assert center.objective == tuned.objective and np.all(np.diff(center.sku_id) > 0)
    grid = grid_for(cfg).with_center(center).bind(catalog)
    middle = int(np.flatnonzero(grid.values == 0.0)[0])
    assert grid.cover is not None
    np.testing.assert_array_equal(grid.cover.z0, tuned.params["z"])
    baseline = make_policy("forecast-base-stock", catalog, cfg.sim, tuned.params)
    env = make_env(catalog, cfg.sim)
    obs = env.reset(seed=3, episode=0)
    ordered = 0.0
    for _ in range(DAYS):
        expected = baseline.orders(obs)
        got, clipped = grid.orders_for(np.full(len(catalog), middle), obs.raw)
        np.testing.assert_array_equal(got, expected)
        assert not clipped.any()
        ordered += float(expected.sum())
        obs = env.step(expected).obs
    assert ordered > 0


def test_the_warm_start_labels_every_decision_of_the_tuned_baseline_offset_zero(
        tuned: tuple[Config, Catalog, GridCenter]) -> None:
    cfg, catalog, center = tuned
    grid = grid_for(cfg).with_center(center).bind(catalog)
    assert grid.neutral_index == 3 and grid.values[3] == 0.0
    teacher = make_policy("forecast-base-stock", catalog, cfg.sim, {"z": center.lookup(catalog.sku_id, np.zeros(len(catalog)))})
    demos = record(make_env(catalog, cfg.sim), teacher, grid, seed=1, episodes=1, max_skus=len(catalog))
    # Some days several offsets order the same (nothing, when stock is high): offset 0 is
    # still the label, so a constant action clones the baseline exactly.
    assert demos.exact == 1.0 and np.all(demos.labels == 3)


def test_skus_the_centre_does_not_list_use_their_newsvendor_factor() -> None:
    cfg = config()
    catalog = load_catalog(cfg.catalog)
    ids = np.sort(catalog.sku_id.astype(np.int64))
    listed = ids[::2]
    center = GridCenter(listed, np.full(listed.size, 7.0), 0.0)
    grid = grid_for(cfg).with_center(center).bind(catalog)
    assert grid.cover is not None
    newsvendor = default_z(catalog, cfg.sim)
    is_listed = np.isin(catalog.sku_id, listed)
    assert is_listed.any() and (~is_listed).any()
    np.testing.assert_array_equal(grid.cover.z0[is_listed], 7.0)
    np.testing.assert_array_equal(grid.cover.z0[~is_listed], newsvendor[~is_listed])
    empty = GridCenter(np.zeros(0, np.int64), np.zeros(0), 0.0)
    np.testing.assert_array_equal(empty.lookup(catalog.sku_id, newsvendor), newsvendor)


def test_a_changed_catalog_tunes_only_the_skus_the_centre_lacks(tmp_path: Path) -> None:
    cfg = config()
    catalog = load_catalog(cfg.catalog)
    old = np.sort(catalog.sku_id.astype(np.int64))[::3]
    save_center(tmp_path, GridCenter(old, np.full(old.size, 7.0), -1.0))
    center = ensure_center(cfg, tmp_path, catalog)
    new_rows = np.flatnonzero(~np.isin(catalog.sku_id, old))
    alone = tune_center(cfg, catalog.subset(new_rows))
    np.testing.assert_array_equal(center.sku_id, np.sort(catalog.sku_id))
    np.testing.assert_array_equal(center.lookup(old, np.zeros(old.size)), 7.0)  # kept, as the policy learned them
    np.testing.assert_array_equal(center.lookup(alone.sku_id, np.zeros(alone.sku_id.size)), alone.z)
    assert center.objective == -1.0
    back = load_center(tmp_path)
    assert back is not None and np.array_equal(back.z, center.z)
    assert ensure_center(cfg, tmp_path, catalog.subset(new_rows[:5])).sku_id.size == center.sku_id.size


def test_an_unset_centre_is_refused_and_other_grids_ignore_it() -> None:
    cfg = config()
    grid = grid_for(cfg)
    assert grid.needs_center
    with pytest.raises(ConfigError, match="z_center=tuned"):
        grid.bind(load_catalog(cfg.catalog))
    with pytest.raises(ConfigError, match="include offset 0"):  # -1, 0.25, 1.5: the baseline is off the grid
        ActionsConfig(kind="cover", z_center="tuned", z_min=-1.0, z_max=1.5, n=3)
    ActionsConfig(kind="cover", z_center="tuned", z_min=-1.0, z_max=2.0, n=5, skip=True)  # skip, then -1, 0, 1, 2
    # n counts the skip action: the message's example does too
    with pytest.raises(ConfigError, match=r"n=21, the skip action besides; e.g. z_min=-1.5 z_max=1.5 n=22\)"):
        ActionsConfig(kind="cover", z_center="tuned", z_min=-1.5, z_max=1.5, n=21, skip=True)
    # `--set policy.actions.kind=multiplier` over defaults that centre a cover grid: no centre
    multiplier = grid_for(load_config(None, [*SETTINGS, "policy.actions.kind=multiplier"]))
    assert not multiplier.needs_center and multiplier.with_center(None) is multiplier


def test_the_centre_round_trips_through_its_file(tmp_path: Path) -> None:
    assert load_center(tmp_path) is None
    center = GridCenter(np.array([3, 8, 20], np.int64), np.array([-1.0, 2.5, 0.125]), -9.75)
    save_center(tmp_path, center)
    back = load_center(tmp_path)
    assert back is not None and back.objective == -9.75
    np.testing.assert_array_equal(back.sku_id, center.sku_id)
    np.testing.assert_array_equal(back.z, center.z)
    assert [p.name for p in tmp_path.iterdir()] == [CENTER_FILE]  # no temporaries left


@pytest.mark.parametrize(("tensors", "message"), [
    (None, "not a readable safetensors file"),
    ({"sku_id": np.array([1, 2], np.int64), "z": np.array([0.5])}, "expected tensors"),
    ({"sku_id": np.array([1, 2], np.int32), "z": np.zeros(2), "objective": np.zeros(1)}, "int64"),
    ({"sku_id": np.array([2, 1], np.int64), "z": np.zeros(2), "objective": np.zeros(1)}, "ascending"),
    ({"sku_id": np.array([1, 2], np.int64), "z": np.array([0.0, np.nan]), "objective": np.zeros(1)}, "SKU 2"),
])
def test_a_damaged_centre_file_is_one_clear_line(tmp_path: Path, tensors: dict | None, message: str) -> None:
    data = b"\x00garbage" if tensors is None else save(tensors)
    (tmp_path / CENTER_FILE).write_bytes(data)
    with pytest.raises(UserError, match=message) as err:
        load_center(tmp_path)
    assert CENTER_FILE in str(err.value) and len(str(err.value).splitlines()) == 1


def test_config_show_rejects_a_tuned_grid_without_offset_zero(capsys: pytest.CaptureFixture[str]) -> None:
    grid = ("policy.actions.kind=cover", "policy.actions.z_center=tuned", "policy.actions.z_min=-1",
            "policy.actions.z_max=4", "policy.actions.n=20")
    args = ["config", "show"] + [a for kv in grid for a in ("--set", kv)]
    assert main(args) == 2  # the key defaults' z_min..z_max (-1..4 in 20 steps) miss 0
    err = capsys.readouterr().err.strip()
    assert "policy.actions.z_min" in err and "offset 0" in err and len(err.splitlines()) == 1
