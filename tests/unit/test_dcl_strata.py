"""DCL's stratified state sample (learn/dcl.sample_rows, dcl.stratify) and the strata it
shares with the A/B split (columns/strata.py)."""

from __future__ import annotations

import numpy as np
import pytest
from test_dcl import Constant, _setup  # tests/unit is on sys.path

from skurl.columns.strata import strata_codes, strata_labels
from skurl.config import load_config
from skurl.errors import ConfigError
from skurl.learn.dcl import DclSpec, sample_rows, stratum_shares
from skurl.learn.dcl_parts import label_states
from skurl.sim import VectorEnv


def _water_fill(sizes: np.ndarray, k: int) -> np.ndarray:
    """The scalar definition: hand out k rows one at a time, each to a stratum with the
    fewest rows so far among those with rows left."""
    shares = np.zeros(sizes.size, np.int64)
    for _ in range(k):
        free = np.flatnonzero(shares < sizes)
        shares[free[np.argmin(shares[free])]] += 1
    return shares


@pytest.mark.parametrize("trial", range(200))
def test_shares_are_the_most_equal_split_the_sizes_allow(trial: int) -> None:
    rng = np.random.default_rng(trial)
    sizes = rng.integers(1, 40, size=rng.integers(2, 12))
    k = int(rng.integers(1, sizes.sum()))
    shares = stratum_shares(sizes, k, rng.random(sizes.size))
    assert shares.sum() == k and (shares <= sizes).all() and (shares >= 0).all()
    # water filling: a stratum with rows left is behind no other by two or more
    open_ = shares < sizes
    if open_.any():
        assert shares[open_].min() >= shares.max() - 1
    # the one-at-a-time definition, up to which strata get the rounding's units
    assert np.abs(shares - _water_fill(sizes, k)).max() <= 1


def test_shares_by_hand() -> None:
    tie = np.array([0.9, 0.1, 0.5, 0.3])
    assert stratum_shares(np.array([10, 10, 10, 10]), 8, tie).tolist() == [2, 2, 2, 2]
    assert stratum_shares(np.array([10, 10, 10, 10]), 9, tie).tolist() == [2, 3, 2, 2]  # smallest tiebreak
    assert stratum_shares(np.array([1, 100, 2, 100]), 50, tie).tolist() == [1, 24, 2, 23]
    assert stratum_shares(np.array([5, 5]), 10, tie[:2]).tolist() == [5, 5]


def test_a_rare_stratum_gets_its_equal_share_and_rows_stay_in_their_stratum() -> None:
    strata = np.repeat([0, 1, 2], [970, 20, 10])  # an equal 20 each caps the rare two
    rows = sample_rows(strata.size, 60, seed=1, iteration=2, day=3, strata=strata)
    assert rows.size == 60 and np.unique(rows).size == 60 and (np.diff(rows) > 0).all()
    assert np.bincount(strata[rows], minlength=3).tolist() == [30, 20, 10]  # all 20 and all 10 rare rows
    uniform = sample_rows(strata.size, 60, seed=1, iteration=2, day=3)
    assert np.bincount(strata[uniform], minlength=3)[2] <= 3  # about 60 x 1%


def test_the_sample_is_a_function_of_seed_iteration_and_day() -> None:
    strata = np.random.default_rng(0).integers(0, 5, 500)
    a = sample_rows(500, 100, 3, 1, 7, strata)
    assert np.array_equal(a, sample_rows(500, 100, 3, 1, 7, strata.copy()))
    assert not np.array_equal(a, sample_rows(500, 100, 3, 1, 8, strata))
    assert not np.array_equal(a, sample_rows(500, 100, 4, 1, 7, strata))


def test_one_stratum_draws_the_uniform_sample() -> None:
    # so a catalog of one category (Zipkin's instances) is labelled as before dcl.stratify
    one = np.zeros(300, np.int64)
    assert np.array_equal(sample_rows(300, 40, 5, 0, 2, one), sample_rows(300, 40, 5, 0, 2))
    assert np.array_equal(sample_rows(300, 300, 5, 0, 2, one), np.arange(300))


def test_label_states_spreads_the_states_over_the_strata() -> None:
    env, grid, rollout = _setup(skus=40)
    spec = DclSpec(states=24, horizon=4, budget=8, warmup=2, spread=2)
    strata = (np.arange(40) >= 36).astype(np.int64)  # 4 rare rows of 40
    out = label_states(env, Constant(5), rollout, grid, spec, seed=0, iteration=0, strata=strata)
    assert (strata[out.rows] == 1).sum() == 8  # 4 a day on two days: all the rare rows each day
    plain = label_states(VectorEnv(env.catalog, env.cfg), Constant(5), rollout, grid, spec, seed=0, iteration=0)
    assert (strata[plain.rows] == 1).sum() < 8


def test_codes_and_labels_name_the_same_strata() -> None:
    cfg = load_config(None, ["catalog.kind=synthetic", "catalog.skus=300"])
    from skurl.catalog import load_catalog

    catalog = load_catalog(cfg.catalog)
    for names in ([], ["category"], ["category", "velocity"], ["lead_time", "shelf_life"]):
        codes, labels = strata_codes(catalog, names), strata_labels(catalog, names)
        assert codes.dtype == np.int64 and codes.min() == 0
        assert np.unique(codes).size == np.unique(labels.astype(str)).size == codes.max() + 1
        for c in np.unique(codes):
            assert np.unique(labels[codes == c].astype(str)).size == 1


@pytest.mark.parametrize("value", ["colour", "category,category", "category, velocity, price"])
def test_a_bad_stratify_is_one_line_naming_the_key(value: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, [f"dcl.stratify={value}"])
    assert "dcl.stratify" in str(err.value) and "velocity" in str(err.value) and "\n" not in str(err.value)


def test_stratify_accepts_none_and_lists() -> None:
    for value in ("", "category", "category,velocity", "lead_time, velocity"):
        assert load_config(None, [f"dcl.stratify={value}"]).dcl.stratify == value
    assert load_config(None, []).dcl.stratify == "category"
