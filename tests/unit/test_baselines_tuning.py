"""Tuning by simulation: seeds apart from evaluation, determinism (CRN), per-SKU choices
that follow each SKU's economics, and held-out gains over the untuned defaults."""

from __future__ import annotations

import numpy as np
import pytest

from skurl.catalog import load_catalog
from skurl.catalog.uniform import uniform_catalog
from skurl.collect.evaluate import evaluate
from skurl.config import CatalogConfig, DemandConfig, SimConfig, load_config
from skurl.errors import ConfigError
from skurl.policy.baselines import default_params, make_policy
from skurl.policy.tuning import (
    MAX_TUNING_REPLICAS,
    CandidateScorer,
    per_sku_replicas,
    replicate,
    tune,
    tuning_seed,
)

COST = SimConfig(reward="cost", threads=1)


def two_kinds(n: int = 40):
    """Half the SKUs lose 1 per lost unit, the other half 49: same demand, lead time 2."""
    cat = uniform_catalog(CatalogConfig(kind="uniform", skus=n, lead_time=2,
                                        demand=DemandConfig(dist="poisson", mean=4.0)))
    cat.lost_sale_cost[n // 2:] = 49.0
    return cat


def test_tuning_seeds_are_never_evaluation_seeds():
    for s in (0, 10_000, 123_456):
        assert tuning_seed(s) not in range(s, s + 100_000)


def test_per_sku_tuning_follows_each_skus_economics_and_is_deterministic():
    cat = two_kinds()
    first = tune("base-stock", cat, COST, eval_seed=10_000, days=60, warmup=20)
    again = tune("base-stock", cat, COST, eval_seed=10_000, days=60, warmup=20)
    assert first.method == "per-sku-grid" and first.runs >= 8
    np.testing.assert_array_equal(first.params["S"], again.params["S"])
    cheap, dear = first.params["S"][:20], first.params["S"][20:]
    # Losing a sale costs 49x more: hold more. Per SKU the pick is noisy (60 days of one
    # SKU), so compare the groups.
    assert dear.mean() > cheap.mean() + 2, (cheap, dear)
    # The untuned defaults are among the candidates, so per SKU the choice is never worse
    # than them on the tuning seed (same random numbers), averaged over the replicas.
    copies = first.details["replicas"]
    assert copies == per_sku_replicas(40, 60) == MAX_TUNING_REPLICAS
    scorer = CandidateScorer("base-stock", replicate(cat, copies), COST, seed=first.seed, days=60, warmup=20)

    def per_sku(params: dict) -> np.ndarray:
        return scorer({k: np.tile(v, copies) for k, v in params.items()}).reshape(copies, -1).mean(axis=0)

    assert np.all(per_sku(first.params) <= per_sku(default_params("base-stock", cat, COST)) + 1e-9)


def test_replicas_are_independent_copies_with_their_own_groups():
    cat = load_catalog(load_config(None, ["catalog.kind=synthetic"]).catalog, skus=200)
    rep = replicate(cat, 3)
    assert len(rep) == 600 and np.unique(rep.sku_id).size == 600
    np.testing.assert_array_equal(rep.sku_id[:200], cat.sku_id)  # copy 0 draws what the catalog draws
    for k in range(3):
        part = rep.subset(np.arange(200 * k, 200 * (k + 1)))
        np.testing.assert_array_equal(part.demand_mean, cat.demand_mean)
        # same membership: two SKUs share a group in a copy iff they do in the catalog
        same = cat.group[:, None] == cat.group[None, :]
        np.testing.assert_array_equal(part.group[:, None] == part.group[None, :], same)
        np.testing.assert_array_equal(part.group < 0, cat.group < 0)
    grouped = rep.group >= 0
    owners = {int(g): set() for g in rep.group[grouped]}
    for row in np.flatnonzero(grouped):
        owners[int(rep.group[row])].add(row // 200)
    assert all(len(c) == 1 for c in owners.values())  # no group spans two copies
    assert per_sku_replicas(2000, 100) == 10 and per_sku_replicas(20_000, 100) == 1
    assert replicate(cat, 1) is cat


def test_replicas_of_a_network_catalog_keep_each_network_within_its_copy():
    from skurl.catalog.network import echelons, validate_network

    cat = load_catalog(load_config(None, ["catalog.synthetic.network=dc"]).catalog, skus=60)
    rep = replicate(cat, 3)
    validate_network(rep)
    parent, _, echelon = echelons(rep)
    base_parent, _, base_echelon = echelons(cat)
    for k in range(3):
        np.testing.assert_array_equal(parent[60 * k:60 * (k + 1)], np.where(base_parent >= 0, base_parent + 60 * k, -1))
        np.testing.assert_array_equal(echelon[60 * k:60 * (k + 1)], base_echelon)


def test_per_sku_tuning_beats_defaults_on_held_out_seeds():
    cfg = load_config(None, ["catalog.kind=synthetic", "sim.threads=1"])
    cat = load_catalog(cfg.catalog, skus=300)
    tuned = tune("forecast-base-stock", cat, cfg.sim, eval_seed=cfg.eval.seed, days=60, warmup=20)
    scores = {}
    for label, params in (("default", None), ("tuned", tuned.params)):
        policy = make_policy("forecast-base-stock", cat, cfg.sim, params)
        res = evaluate(cat, cfg.sim, policy, days=100, warmup=20, seed=cfg.eval.seed)
        scores[label] = res.avg_profit_per_sku_day
    assert scores["tuned"] > scores["default"] + 0.01 * abs(scores["default"]), scores


def test_uniform_catalogs_get_one_exact_level_for_all_skus():
    cat = uniform_catalog(CatalogConfig(kind="uniform", skus=7, lead_time=1, lost_sale_cost=4.0))
    res = tune("base-stock", cat, COST, eval_seed=0, days=100, warmup=20, uniform_skus=500)
    assert res.method == "uniform-exhaustive"
    assert res.params["S"].shape == (7,) and np.all(res.params["S"] == 12.0)  # exact optimum (chain)
    runner_up = res.details["runner_up"]
    assert runner_up["gap"] > 3 * runner_up["gap_se"] or res.details["final_skus"] >= 16_000


class _SlopeHiddenByBatchZero:
    """Per-SKU objectives of z: batch 0 is flat within noise (the interior a hair lower, so
    the box does not grow on it), the other batches slope down to z = 3.0, beyond the box's
    upper edge (z <= 1.4)."""

    name = "fake"
    runs = 0

    def __call__(self, params: dict[str, float], batch: int) -> np.ndarray:
        self.runs += 1
        z = params["z"]
        truth = (z - 3.0) ** 2
        if batch == 0:
            truth = 0.0 if 0.7 <= z <= 1.3 else 0.002
        rng = np.random.default_rng(round(z * 10) * 7 + batch)
        return truth + 0.01 * rng.standard_normal(100)


def test_uniform_search_widens_when_more_batches_move_the_best_onto_an_edge():
    from skurl.policy.tuning_uniform import Axis, Space, _Scores, _search

    space = Space([Axis("z", 6, 14, floor=-30, step=0.1)], lambda v: {"z": v["z"]})
    scores = _Scores(_SlopeHiddenByBatchZero(), None)  # type: ignore[arg-type]
    best, _, _ = _search(space, scores, skus=100, max_skus=800, separation=3.0)
    assert space.params(best) == {"z": 3.0}


def test_per_sku_search_steps_beyond_the_grid_where_the_best_sits_at_its_end():
    """Penalties of 0.05 (Poisson demand) and 2000 (geometric: a heavy tail) per lost unit
    against a holding cost of 1: the best safety factors lie below and above the first grid
    (-0.5..3.0), and the search must reach them."""
    cat = two_kinds(40)
    cat.lost_sale_cost[:20], cat.lost_sale_cost[20:] = 0.05, 2000.0
    cat.demand_dist[20:] = 1
    cat.sku_id = cat.sku_id + np.arange(40)  # not a uniform catalog: per-SKU search
    res = tune("forecast-base-stock", cat, COST, eval_seed=0, days=100, warmup=20)
    z = res.params["z"]
    assert res.method == "per-sku-grid" and res.details["z_expansions"] >= 2
    # Without the steps beyond, z stays in -0.75..3.25 (the grid and its refinement).
    assert np.median(z[:20]) < -1.0 and z[20:].max() > 3.25


class _Shared:
    """Per-SKU objectives `truth(params)` + noise shared by all points of a batch (CRN)."""

    name = "fake"

    def __init__(self, truth) -> None:  # type: ignore[no-untyped-def]
        self.truth, self.runs = truth, 0

    def __call__(self, params: dict[str, float], batch: int) -> np.ndarray:
        self.runs += 1
        return self.truth(params) + 0.01 * np.random.default_rng(batch).standard_normal(100)


def test_uniform_search_zooms_into_a_wide_box_and_ends_on_the_integer_optimum():
    from skurl.policy.tuning_uniform import Axis, Space, _Scores, _search

    # least mean at S = 3137 on a box thousands of levels wide (a huge demand mean)
    space = Space([Axis("S", 0, 6000)], lambda v: {"S": v["S"]})
    scorer = _Shared(lambda p: ((p["S"] - 3137.0) / 100.0) ** 2)
    scores = _Scores(scorer, None)  # type: ignore[arg-type]
    best, _, rows = _search(space, scores, skus=100, max_skus=800, separation=3.0)
    assert space.params(best) == {"S": 3137.0} and rows[0]["S"] == 3137.0
    assert scorer.runs < 150  # exhaustively: 6001 simulations
    assert space.axes[0].lo < 3137 < space.axes[0].hi  # not a point an edge cut short


def test_exact_ties_do_not_drag_the_box_along_a_ridge():
    from skurl.policy.tuning_uniform import Axis, Space, _Scores, _search

    # s-S whose objective depends on s + Q only (orders every day: Q below a day's demand),
    # least at s + Q = 60: every (s, Q) on that line is an exact tie
    space = Space([Axis("s", 36, 40), Axis("Q", 1, 4, floor=1)], lambda v: {"s": v["s"], "S": v["s"] + v["Q"]})
    scorer = _Shared(lambda p: ((p["S"] - 60.0) / 5.0) ** 2)
    scores = _Scores(scorer, None)  # type: ignore[arg-type]
    best, _, _ = _search(space, scores, skus=100, max_skus=800, separation=3.0)
    assert space.params(best)["S"] == 60.0
    assert scorer.runs < 400  # it once widened along the tie line until ~68,000 runs
    assert all(a.lo < i < a.hi or i == a.floor for a, i in zip(space.axes, best, strict=True))


def test_uniform_s_S_on_zero_demand_never_orders():
    """With no demand the best (s, S) orders nothing (any stock is pure holding cost); s
    may go below zero for that (s = -1: IP <= -1 never happens under lost sales)."""
    cat = uniform_catalog(CatalogConfig(kind="uniform", skus=3, lead_time=2, demand=DemandConfig(mean=0.0)))
    res = tune("s-S", cat, COST, eval_seed=0, days=60, warmup=10, uniform_skus=200)
    assert np.all(res.params["s"] == -1.0)  # every S then ties: nothing is ever ordered
    assert res.details["runner_up"]["gap"] == 0.0 and res.details["runner_up"]["S"] != res.params["S"][0]
    result = evaluate(cat, COST, make_policy("s-S", cat, COST, res.params), seed=1, days=60, warmup=10)
    assert result.avg_cost_per_sku_day == 0.0


def test_the_tuning_budget_sets_the_replicas_and_their_cap():
    # eval.tune_sku_days: SKU-days per candidate; the cap of 16 replicas grows with the budget
    assert per_sku_replicas(4400, 100) == 4 and per_sku_replicas(4400, 100, 8_000_000) == 18
    assert per_sku_replicas(40, 60, 8_000_000) == 4 * MAX_TUNING_REPLICAS
    assert per_sku_replicas(20_000, 100, 1) == 1  # never fewer than one copy
    assert load_config(None, ["eval.tune_sku_days=8000000"]).eval.tune_sku_days == 8_000_000
    with pytest.raises(ConfigError, match=r"eval\.tune_sku_days"):
        load_config(None, ["eval.tune_sku_days=0"])


def test_a_bigger_budget_tunes_on_more_replicas():
    cat = load_catalog(load_config(None, ["catalog.kind=synthetic"]).catalog, skus=400)
    small = tune("base-stock", cat, COST, eval_seed=10_000, days=60, warmup=20, sku_days=48_000)
    big = tune("base-stock", cat, COST, eval_seed=10_000, days=60, warmup=20, sku_days=96_000)
    assert (small.details["replicas"], big.details["replicas"]) == (2, 4)
    assert big.sku_days > 1.9 * small.sku_days
