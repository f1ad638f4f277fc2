"""The synthetic generator: deterministic, valid, and shaped like a retailer's catalog."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest

from skurl.catalog import load_catalog
from skurl.catalog.schema import DIST_CODES, Catalog
from skurl.catalog.synthetic import segments, synthetic_catalog
from skurl.config import CatalogConfig, load_config
from skurl.errors import CatalogError, ConfigError


def _cfg(*overrides: str) -> CatalogConfig:
    return load_config(overrides=list(overrides)).catalog


@pytest.fixture(scope="module")
def big() -> Catalog:
    return synthetic_catalog(_cfg(), 100_000)


def _equal(a: Catalog, b: Catalog) -> bool:
    return all(np.array_equal(getattr(a, f.name), getattr(b, f.name)) for f in fields(Catalog))


def test_same_seed_same_catalog_other_seed_differs() -> None:
    a = synthetic_catalog(_cfg("catalog.seed=3"), 2000)
    b = synthetic_catalog(_cfg("catalog.seed=3"), 2000)
    c = synthetic_catalog(_cfg("catalog.seed=4"), 2000)
    assert _equal(a, b)
    assert not np.array_equal(a.demand_mean, c.demand_mean)
    assert not np.array_equal(a.category, c.category)


def test_one_knob_leaves_other_columns_alone() -> None:
    a = synthetic_catalog(_cfg(), 3000)
    b = synthetic_catalog(_cfg("catalog.synthetic.promo_share=0.6"), 3000)
    assert np.array_equal(a.demand_mean, b.demand_mean)
    assert np.array_equal(a.lead_time, b.lead_time)
    assert (b.promo_period > 0).sum() == 1800 != (a.promo_period > 0).sum()


def test_ids_dtypes_and_validation(big: Catalog) -> None:
    assert np.array_equal(big.sku_id, np.arange(100_000))
    assert big.validate() is big
    assert big.season.shape == (100_000, 7)
    assert len(synthetic_catalog(_cfg(), 1)) == 1


def test_load_catalog_dispatches_to_the_generator() -> None:
    cat = load_catalog(_cfg("catalog.skus=500"))
    assert len(cat) == 500 and _equal(cat, synthetic_catalog(_cfg(), 500))


def test_bad_sizes_and_seeds_are_one_line_errors() -> None:
    with pytest.raises(CatalogError, match="0 SKUs"):
        synthetic_catalog(_cfg(), 0)
    with pytest.raises(ConfigError, match=r"catalog\.seed"):
        synthetic_catalog(_cfg("catalog.seed=-1"), 10)


def test_demand_is_heavy_tailed_with_mostly_slow_movers(big: Catalog) -> None:
    rate = big.demand_mean
    assert (rate < 0.1).sum() > 1000  # a few units a month
    assert (rate > 1000).sum() >= 3  # thousands a day
    assert np.median(rate) < 1.0  # most SKUs are slow movers
    assert rate.min() > 0
    # Fat upper tail: the top 1 % of SKUs carry a large share of all units sold.
    top = np.sort(rate)[-1000:].sum() / rate.sum()
    assert top > 0.3


def test_categories_shift_demand_and_price(big: Catalog) -> None:
    med_rate = [np.median(big.demand_mean[big.category == c]) for c in range(20)]
    med_cost = [np.median(big.unit_cost[big.category == c]) for c in range(20)]
    assert max(med_rate) / min(med_rate) > 1.5
    assert max(med_cost) / min(med_cost) > 2.0
    assert np.unique(big.category).shape[0] == 20


def test_shares_match_the_config(big: Catalog) -> None:
    seg = segments(big)
    assert seg["perishable"].mean() == pytest.approx(0.2, abs=1e-4)
    assert seg["promoted"].mean() == pytest.approx(0.3, abs=1e-4)
    assert seg["supplier_delay"].mean() == pytest.approx(0.1, abs=1e-4)
    assert seg["substitutable"].mean() == pytest.approx(0.3, abs=0.02)
    assert (big.order_cost > 0).mean() == pytest.approx(0.25, abs=1e-4)
    assert np.median(big.forecast_noise) == pytest.approx(0.1, rel=0.3)


def test_other_shares_follow_their_knobs() -> None:
    cat = synthetic_catalog(
        _cfg("catalog.synthetic.substitution_share=0.6", "catalog.synthetic.perishable_share=0"), 20_000
    )
    assert (cat.group >= 0).mean() == pytest.approx(0.6, abs=0.03)
    assert (cat.shelf_life == 0).all() and (cat.waste_cost == 0).all()
    none = synthetic_catalog(_cfg("catalog.synthetic.substitution_share=0"), 5000)
    assert (none.group == -1).all() and (none.sub_frac == 0).all()
    every = synthetic_catalog(_cfg("catalog.synthetic.substitution_share=1"), 5000)
    assert (every.group >= 0).mean() > 0.999  # only a truncated last unit may be alone


def test_groups_are_contiguous_runs_within_one_category(big: Catalog) -> None:
    g = big.group
    grouped = np.flatnonzero(g >= 0)
    ids = g[grouped]
    assert ids[0] == 0 and np.all(np.diff(ids) >= 0)  # numbered in row order
    assert np.unique(ids).shape[0] == ids.max() + 1
    size = np.bincount(ids)
    assert size.min() >= 2 and size.max() <= 6
    same_group = ids[1:] == ids[:-1]
    assert (np.diff(grouped)[same_group] == 1).all()  # members on adjacent rows
    cat = big.category[grouped]
    assert np.all(cat == np.repeat(cat[np.cumsum(size) - size], size))
    sub = big.sub_frac[grouped]
    assert sub.min() >= 0.2 and sub.max() <= 0.7
    assert (big.sub_frac[g < 0] == 0).all()


def test_season_rows_have_mean_one_and_some_weekend_peaks(big: Catalog) -> None:
    np.testing.assert_allclose(big.season.mean(axis=1), 1.0, atol=1e-5)
    weekend = big.season[:, 5:].mean(axis=1) / big.season[:, :5].mean(axis=1)
    assert (weekend > 1.15).mean() > 0.05  # weekend-peaking categories


def test_lead_times_delays_and_shelf_lives_in_range(big: Catalog) -> None:
    lead = big.lead_time
    assert lead.min() == 1 and lead.max() == 14
    assert ((lead >= 1) & (lead <= 7)).mean() > 0.85
    assert (lead > 7).sum() > 0
    late = big.delay_prob > 0
    assert big.delay_prob[late].min() >= 0.05 and big.delay_prob[late].max() <= 0.3
    assert set(np.unique(big.delay_max[late])) == {1, 2, 3}
    assert (big.delay_max[~late] == 0).all()
    life = big.shelf_life[big.shelf_life > 0]
    assert life.min() == 2 and life.max() == 28
    assert (big.waste_cost[big.shelf_life > 0] > 0).all()
    short = synthetic_catalog(_cfg("catalog.synthetic.max_lead_time=3"), 2000)
    assert short.lead_time.max() == 3


def test_money_is_consistent(big: Catalog) -> None:
    margin = big.price / big.unit_cost - 1
    assert margin.min() >= 0.049 and margin.max() <= 2.01
    # Holding: 20-35 %/year of unit cost plus a handling charge of 0.001-0.003 per day.
    carrying = (big.holding_cost - 0.001 * np.where(big.shelf_life > 0, 3, 1)) * 365 / big.unit_cost
    assert carrying.min() >= 0.199 and carrying.max() <= 0.351
    lost_margin = big.price - big.unit_cost
    assert (big.lost_sale_cost > lost_margin).all()
    assert (big.lost_sale_cost <= lost_margin + 0.2501 * big.price).all()
    assert (big.order_cost > 0).any() and (big.order_cost == 0).any()


def test_promotions_and_trends(big: Catalog) -> None:
    p = big.promo_period > 0
    assert big.promo_period[p].min() >= 14 and big.promo_period[p].max() <= 60
    assert big.promo_length[p].min() >= 2 and big.promo_length[p].max() <= 7
    assert big.promo_uplift[p].min() >= 0.3 - 1e-6 and big.promo_uplift[p].max() <= 3.0 + 1e-6
    assert (big.promo_offset[p] < big.promo_period[p]).all()
    assert (big.promo_uplift[~p] == 0).all() and (big.promo_length[~p] == 0).all()
    assert np.abs(big.trend).max() < 0.002 and big.trend.std() > 1e-4


def test_demand_distributions_mix(big: Catalog) -> None:
    share = np.bincount(big.demand_dist, minlength=3) / len(big)
    assert share[DIST_CODES["poisson"]] > 0.2 and share[DIST_CODES["negbin"]] > 0.2
    assert share[DIST_CODES["geometric"]] > 0.01
    nb = big.demand_dist == DIST_CODES["negbin"]
    assert big.dispersion[nb].min() >= 0.5 and (big.dispersion[~nb] == 1).all()


def test_segments_partition_by_rate(big: Catalog) -> None:
    seg = segments(big, fast=10.0, slow=1.0)
    speed = seg["fast"].astype(int) + seg["medium"] + seg["slow"]
    assert (speed == 1).all()
    assert seg["slow"].mean() > 0.5 and seg["fast"].sum() > 0
    assert seg["all"].all() and set(seg) >= {"perishable", "promoted", "substitutable"}


@pytest.mark.parametrize(
    "overrides",
    [
        ["catalog.synthetic.categories=1", "catalog.synthetic.max_lead_time=1"],
        ["catalog.synthetic.max_lead_time=60", "catalog.synthetic.forecast_noise=5",
         "catalog.synthetic.demand_sigma=5", "catalog.synthetic.demand_tail=3",
         "catalog.synthetic.median_demand=10000"],
        [f"catalog.synthetic.{k}=1" for k in ("perishable_share", "substitution_share", "promo_share",
                                                "supplier_delay_share", "order_cost_share")],
        [f"catalog.synthetic.{k}=0" for k in ("perishable_share", "substitution_share", "promo_share",
                                                "supplier_delay_share", "order_cost_share",
                                                "forecast_noise", "demand_sigma", "demand_tail")],
        ["catalog.synthetic.categories=5000"],
    ],
)
def test_extreme_knobs_still_validate(overrides: list[str]) -> None:
    for n in (1, 7, 3000):
        cat = synthetic_catalog(_cfg(*overrides), n)  # validate() runs inside
        assert len(cat) == n
