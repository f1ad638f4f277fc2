"""New SKUs' per-SKU reward statistics start from their category's pooled moments
(deploy/catalog_change.seed_new_sku_stats); removed SKUs' statistics are dropped."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from skurl.catalog.schema import Catalog
from skurl.catalog.uniform import uniform_catalog
from skurl.config import load_config
from skurl.errors import CatalogError
from skurl.learn.normalize import RewardScaler, SkuRewardScaler
from skurl.train.catalog_change import check_fits, seed_new_sku_stats


def catalog(ids: list[int], categories: list[int]) -> Catalog:
    cat = uniform_catalog(load_config(None, [f"catalog.skus={len(ids)}", "catalog.kind=uniform"]).catalog)
    cat.sku_id = np.asarray(ids, np.int64)
    cat.category = np.asarray(categories, np.int32)
    return cat


def scaler_with(ids: list[int], mean: list[float], var: list[float], count: list[float]) -> SkuRewardScaler:
    s = SkuRewardScaler(0.99)
    s.ids = torch.tensor(ids, dtype=torch.int64)
    s.mean, s.var, s.count = (torch.tensor(v, dtype=torch.float64) for v in (mean, var, count))
    return s


def test_new_skus_start_from_their_categorys_pooled_moments() -> None:
    # Known: 1, 2 (category 7), 3 (category 8), 4 (removed). New: 10 (cat 7), 11 (cat 9: none known).
    s = scaler_with([1, 2, 3, 4], [1.0, 3.0, 10.0, 99.0], [4.0, 8.0, 1.0, 99.0], [10.0, 30.0, 20.0, 5.0])
    new = catalog([1, 2, 3, 10, 11], [7, 7, 8, 7, 9])
    assert seed_new_sku_stats(s, new, np.array([10, 11])) == 2
    assert s.ids.tolist() == [1, 2, 3, 10, 11]  # 4 dropped
    assert s.mean[3].item() == pytest.approx((10 * 1 + 30 * 3) / 40)  # count-weighted
    assert s.var[3].item() == pytest.approx((10 * 4 + 30 * 8) / 40)  # within-SKU variance
    assert s.count[3].item() == pytest.approx(10.0)  # the category's median count (the lower of two)
    assert s.mean[4].item() == pytest.approx((10 + 90 + 200) / 60)  # no known SKU of category 9: all
    assert s.mean[:3].tolist() == [1.0, 3.0, 10.0]  # kept SKUs untouched
    # The scale a new SKU gets is its category's, not the untrained floor.
    scaled = s.scale(torch.ones(1, 1, dtype=torch.float64), torch.tensor([10]))
    assert scaled.item() == pytest.approx(1 / np.sqrt(7.0), rel=1e-6)


def test_a_global_scaler_has_nothing_per_sku() -> None:
    assert seed_new_sku_stats(RewardScaler(0.99), catalog([1], [0]), np.array([1])) == 0


def test_a_catalog_needing_wider_features_is_refused_naming_the_sku() -> None:
    cat = catalog([5, 6], [0, 0])
    cat.lead_time[1] = 9
    check_fits(cat, (0, 9), "x")
    with pytest.raises(CatalogError, match=r"x: SKU 6: lead_time \+ delay_max = 9 .* at most 8"):
        check_fits(cat, (0, 8), "x")
    cat.shelf_life[0] = 4
    with pytest.raises(CatalogError, match=r"SKU 5: shelf_life = 4"):
        check_fits(cat, (3, 9), "x")
