"""The common-random-number rollout operator (policy/rollout_q.py) against a hand-computed
two-day lost-sales case, its pairing of replications across actions, replay of the env's
own future, and the sequential halving's bookkeeping."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from skurl.catalog import load_catalog
from skurl.config import ActionsConfig, load_config
from skurl.policy.actions import ActionGrid
from skurl.policy.baselines import make_policy
from skurl.policy.rollout_q import (
    RolloutSpec,
    baseline_rollout,
    candidate_orders,
    estimate_q,
    halving_schedule,
    rollout_returns,
)
from skurl.sim import VectorEnv

MEAN, HOLDING, PENALTY = 5.0, 1.0, 9.0


def _lost_sales(skus: int, lead: int, init_days: float, days: int = 60):
    cfg = load_config(None, ["catalog.kind=uniform", "catalog.demand.dist=poisson", f"catalog.demand.mean={MEAN}",
                             f"catalog.lead_time={lead}", f"catalog.holding_cost={HOLDING}",
                             f"catalog.lost_sale_cost={PENALTY}", "sim.reward=cost", "sim.backorders=false",
                             f"sim.initial_stock_days={init_days}", f"sim.days={days}", "sim.threads=1"])
    catalog = load_catalog(cfg.catalog, skus)
    assert (catalog.unit_cost == 0).all() and (catalog.order_cost == 0).all()
    return catalog, cfg.sim


def _two_day_q(x: int, orders: np.ndarray) -> np.ndarray:
    """Exact -E[cost of days 0 and 1] with x on hand, lead time 1, order a today (it arrives
    tomorrow): c(y) = E[h (y - D)^+ + p (D - y)^+], D ~ Poisson(MEAN)."""
    k = np.arange(80)
    pmf = np.exp(-MEAN + k * math.log(MEAN) - np.array([math.lgamma(i + 1) for i in k]))

    def cost(y: float) -> float:
        return float((pmf * (HOLDING * np.maximum(y - k, 0) + PENALTY * np.maximum(k - y, 0))).sum())

    left = np.maximum(x - k, 0)
    return np.array([-(cost(x) + sum(pmf[d] * cost(left[d] + a) for d in k)) for a in orders])


def test_two_day_lost_sales_q_matches_the_exact_values() -> None:
    catalog, sim = _lost_sales(20, lead=1, init_days=0.6)
    env = VectorEnv(catalog, sim)
    obs = env.reset(seed=7)
    assert (obs.raw.on_hand == 3).all() and (obs.raw.pipeline == 0).all()
    candidates = np.arange(12.0)
    exact = _two_day_q(3, candidates)
    policy = baseline_rollout(make_policy("capped-base-stock", catalog, sim))
    est = estimate_q(env, np.arange(20), np.tile(candidates, (20, 1)), policy,
                     RolloutSpec(horizon=2, budget=4000, episode_base=100))
    assert est.sku_days == est.row_days == int(est.reps.sum()) * 2  # no groups: one row a clone
    # Pool the 20 independent copies of the state: each action's mean over all replications.
    pooled = (est.q * est.reps).sum(0) / est.reps.sum(0)
    pooled_se = np.sqrt((est.se ** 2 * est.reps ** 2).sum(0)) / est.reps.sum(0)
    assert np.all(np.abs(pooled - exact) < 5 * pooled_se), (pooled, exact, pooled_se)
    best = int(np.argmax(exact))
    assert np.mean(est.best == best) >= 0.9  # 0.24 from the runner-up: paired replications see it
    assert (est.reps[:, best] == est.reps.max(1)).all()


def test_actions_of_a_state_share_their_replications() -> None:
    catalog, sim = _lost_sales(6, lead=2, init_days=1.0)
    env = VectorEnv(catalog, sim)
    env.reset(seed=1)
    policy = baseline_rollout(make_policy("base-stock", catalog, sim))
    spec = RolloutSpec(horizon=8, budget=30, episode_base=5)
    est = estimate_q(env, np.arange(6), np.tile([4.0, 4.0], (6, 1)), policy, spec)
    np.testing.assert_array_equal(est.q[:, 0], est.q[:, 1])  # the same order under the same futures
    assert (est.reps == 15).all() and (est.best == 0).all()  # one round: 30 rollouts, 15 each
    # and replications are independent futures: their returns differ
    src = np.zeros(4, np.int64)
    returns, _ = rollout_returns(env, src, np.full(4, 4.0), np.array([5, 6, 7, 8]), policy, spec)
    assert np.unique(returns).size > 1


def test_a_rollout_on_the_envs_own_episode_replays_its_future() -> None:
    catalog, sim = _lost_sales(5, lead=3, init_days=1.0, days=30)
    base = make_policy("capped-base-stock", catalog, sim)
    env = VectorEnv(catalog, sim)
    obs = env.reset(seed=3, episode=2)
    for _ in range(6):
        obs = env.step(base.orders(obs)).obs
    rows = np.arange(5)
    first = base.orders(obs)
    returns, _ = rollout_returns(env, rows, first, np.full(5, 2), baseline_rollout(base),
                                 RolloutSpec(horizon=10, budget=1))
    env.reset_totals()
    for _ in range(10):
        obs = env.step(base.orders(obs)).obs
    np.testing.assert_allclose(returns, env.totals()["reward"], rtol=1e-12)


def test_halving_schedule() -> None:
    assert halving_schedule(1, 10) == [(1, 10)]
    assert halving_schedule(2, 10) == [(2, 5)]
    assert halving_schedule(21, 2000) == [(21, 19), (11, 36), (6, 66), (3, 133), (2, 200)]
    assert halving_schedule(8, 3) == [(8, 1), (4, 1), (2, 1)]  # at least one replication


def test_candidate_orders_follow_the_grid() -> None:
    catalog, sim = _lost_sales(4, lead=2, init_days=1.0)
    env = VectorEnv(catalog, sim)
    obs = env.reset(seed=0)
    units = ActionGrid.from_config(ActionsConfig(kind="units", n=6, step=2))
    got = candidate_orders(units, env, np.array([2, 0]))
    np.testing.assert_array_equal(got, np.tile(np.arange(6) * 2.0, (2, 1)))
    cover = ActionGrid.from_config(ActionsConfig(kind="cover"), catalog=catalog, reward="cost")
    got = candidate_orders(cover, env, np.array([3, 1]))
    np.testing.assert_array_equal(got, cover.unit_table(obs.raw, slice(0, 4))[[3, 1]])


def test_bad_inputs_are_refused() -> None:
    catalog, sim = _lost_sales(2, lead=1, init_days=1.0)
    env = VectorEnv(catalog, sim)
    env.reset(seed=0)
    policy = baseline_rollout(make_policy("base-stock", catalog, sim))
    with pytest.raises(ValueError, match="first_orders"):
        estimate_q(env, np.arange(2), np.zeros(2), policy, RolloutSpec(horizon=2, budget=2))
    with pytest.raises(ValueError, match="horizon"):
        RolloutSpec(horizon=0, budget=2)


@pytest.mark.parametrize("policy", ["capped-base-stock", "network"])
def test_bench_rollouts_prints_one_json_object(policy: str, capsys: pytest.CaptureFixture[str]) -> None:
    from skurl.cli import main

    rc = main(["bench", "rollouts", "--states", "30", "--budget", "8", "--horizon", "3", "--policy", policy,
               "--json", "--set", "catalog.kind=uniform", "--set", "sim.threads=1", "--set", "policy.hidden=[16]"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["states"] == 30 and out["horizon"] == 3 and out["policy"] == policy
    assert out["rollout_sku_days"] == out["rollouts"] * 3 and out["rollout_sku_days_per_s"] > 0
    if policy == "capped-base-stock":  # no net: no inference ceiling
        assert "inference_ceiling_sku_days_per_s" not in out
        return
    # one row per state (uniform catalog), inferred on 2 of its 3 days
    assert out["inferred_rows_per_sku_day"] == pytest.approx(2 / 3)
    assert out["inference_ceiling_sku_days_per_s"] == pytest.approx(out["inference_rows_per_s"] * 3 / 2)
    assert out["inference_bound_ratio"] == pytest.approx(
        out["rollout_sku_days_per_s"] / out["inference_ceiling_sku_days_per_s"])


def test_bench_rollouts_bad_flag_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    from skurl.cli import main

    assert main(["bench", "rollouts", "--horizon", "0"]) == 2
    err = capsys.readouterr().err
    assert "--horizon" in err and err.count("\n") == 1


def test_bench_rollouts_versus_alternates_and_prints_the_ratio(capsys: pytest.CaptureFixture[str]) -> None:
    from skurl.cli import main

    rc = main(["bench", "rollouts", "--states", "20", "--budget", "4", "--horizon", "2", "--rounds", "2",
               "--versus", "configs/lost_sales.yaml", "--json", "--set", "sim.threads=1"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["rounds"] == 2 and len(out["rounds_per_s"]) == 2
    assert out["grid"] == "cover" and out["versus_actions"] == 20 and out["versus_hidden"] == [64, 64]
    mine, theirs = np.median(np.array(out["rounds_per_s"]), axis=0)
    assert out["versus_ratio"] == pytest.approx(mine / theirs)
    assert "versus_ceiling_ratio" not in out  # capped base-stock rollouts run no net


def test_bench_rollouts_versus_prints_the_ceiling_the_net_sets(capsys: pytest.CaptureFixture[str]) -> None:
    from skurl.cli import main

    rc = main(["bench", "rollouts", "--states", "20", "--budget", "4", "--horizon", "2", "--policy", "network",
               "--versus", "configs/lost_sales.yaml", "--set", "sim.threads=1", "--set", "policy.hidden=[16]"])
    text = capsys.readouterr().out
    assert rc == 0 and "cap the rollouts at" in text and "could reach" in text
