"""Tuning a large catalog on a stratified sample (eval.tune_max_skus): whole groups, every
stratum, knobs spread from the nearest tuned SKUs, and held-out results close to tuning every SKU."""

from __future__ import annotations

import numpy as np

from skurl.catalog import load_catalog
from skurl.catalog.partition import units
from skurl.catalog.uniform import uniform_catalog
from skurl.collect.evaluate import evaluate
from skurl.config import CatalogConfig, DemandConfig, load_config
from skurl.policy.baselines import make_policy
from skurl.policy.tuning import tune
from skurl.policy.tuning_sample import extend_knob, strata, stratified_rows


def _synthetic(skus: int):
    cfg = load_config(None, ["catalog.kind=synthetic", "sim.threads=1"])
    return cfg, load_catalog(cfg.catalog, skus=skus)


def test_a_sample_keeps_whole_groups_every_stratum_and_about_its_size():
    _, cat = _synthetic(3000)
    rows = stratified_rows(cat, 600, seed=1)
    np.testing.assert_array_equal(rows, stratified_rows(cat, 600, seed=1))
    assert not np.array_equal(rows, stratified_rows(cat, 600, seed=2))
    chosen = np.zeros(len(cat), dtype=bool)
    chosen[rows] = True
    grouped = cat.group >= 0
    assert grouped.any()
    for g in np.unique(cat.group[grouped & chosen]):  # a sampled group comes whole
        assert chosen[cat.group == g].all()
    unit = units(cat)
    first = np.unique(unit, return_index=True)[1]  # a unit's stratum is its first row's
    codes = strata(cat)
    all_strata = {tuple(r) for r in codes[first]}
    assert {tuple(r) for r in codes[np.intersect1d(first, rows)]} == all_strata
    assert 600 <= rows.size <= 600 + 8 * len(all_strata), rows.size


def test_a_catalog_within_the_cap_is_not_sampled():
    _, cat = _synthetic(200)
    np.testing.assert_array_equal(stratified_rows(cat, 500, seed=0), np.arange(200))


def test_untuned_skus_take_the_median_of_their_nearest_tuned_ones_and_tuned_ones_keep_theirs():
    cat = uniform_catalog(CatalogConfig(kind="uniform", skus=40, lead_time=2,
                                        demand=DemandConfig(dist="poisson", mean=4.0)))
    cat.lost_sale_cost[20:] = 49.0  # other economics: other neighbours
    tuned = np.array([0, 1, 2, 20, 21, 22, 23, 24])
    values = np.array([1.0, 2.0, 3.0, 10.0, 11.0, 12.0, 13.0, 14.0])
    out = extend_knob(cat, tuned, values)
    np.testing.assert_array_equal(out[tuned], values)
    assert np.all(out[3:20] == 3.0)  # 5 nearest: the three cheap ones and two dear; lower middle
    assert np.all(out[25:] == 12.0)


def test_sampled_tuning_scores_close_to_tuning_every_sku_on_held_out_seeds():
    cfg, cat = _synthetic(800)
    kw = dict(eval_seed=cfg.eval.seed, days=80, warmup=20, sku_days=800 * 80)
    full = tune("forecast-base-stock", cat, cfg.sim, **kw)
    sampled = tune("forecast-base-stock", cat, cfg.sim, max_skus=250, **kw)
    assert sampled.details["tuned_skus"] < 0.5 * len(cat)
    profit = {}
    for label, params in (("default", None), ("full", full.params), ("sampled", sampled.params)):
        policy = make_policy("forecast-base-stock", cat, cfg.sim, params)
        res = evaluate(cat, cfg.sim, policy, days=120, warmup=20, seed=cfg.eval.seed)
        profit[label] = res.avg_profit_per_sku_day
    assert profit["sampled"] > profit["default"] + 0.5 * (profit["full"] - profit["default"]), profit
