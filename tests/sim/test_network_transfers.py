"""Lateral transfers and shipping costs of supply networks (docs/networks.md): the rule on a
hand-built sibling set, transfers off (or never triggered) leave results bit for bit, and a
dc catalog transfers, charges and conserves stock. Kernel against the scalar reference:
tests/sim/test_network_sim.py."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from skurl.catalog import load_catalog
from skurl.catalog.network import echelons
from skurl.config import SimConfig, TransfersConfig, load_config
from skurl.errors import ConfigError
from skurl.sim import VectorEnv
from skurl.sim.network_cols import N_SENT
from skurl.sim.state import NPAR, P_DEMAND_MEAN, P_SLOTS, S_ON_HAND, S_PIPE, S_SLOT_OFF
from skurl.sim.transfers import TransferRule, transfer_among


def _siblings(on_hand: list[int], means: list[float], rule: TransferRule) -> np.ndarray:
    """Run the kernel's transfers on one DC (row 0) and stores 1..k; st after."""
    k = len(on_hand)
    par = np.zeros((k + 1, NPAR), np.float32)
    par[1:, P_DEMAND_MEAN] = means
    par[:, P_SLOTS] = 1
    st = np.zeros((k + 1, S_PIPE + 4), np.int64)
    st[1:, S_ON_HAND] = on_hand
    st[:, S_SLOT_OFF] = np.arange(k + 1)
    stock = st[:, S_ON_HAND].copy()
    kids = np.arange(1, k + 1, dtype=np.int64)
    child_start = np.array([0] + [k] * (k + 1), np.int64)
    sku = np.array([0, 14, 12, 13, 11, 10][:k + 1], np.int64)
    transfer_among(par, st, stock, sku, kids, np.int64(0), np.int64(k), child_start, rule, np.int64(3), False)
    np.testing.assert_array_equal(stock, st[:, S_ON_HAND])
    return st


def test_rule_lowest_cover_first_from_the_highest():
    rule = TransferRule(True, np.int64(2), np.float64(0.0), np.float64(0.0), np.float64(7.0), np.float64(3.0), np.float64(2.0))
    # covers 20, 0, 1, 10 days: senders give 17 and 7, receivers need 3 and 2 (target 3 days)
    st = _siblings([20, 0, 1, 10], [1.0, 1.0, 1.0, 1.0], rule)
    assert st[1:, N_SENT].tolist() == [5, -3, -2, 0]
    assert st[1:, S_ON_HAND].tolist() == [15, 0, 1, 10]
    assert st[1:, S_PIPE + 1].tolist() == [0, 3, 2, 0]  # due in 2 days
    # one sender short (gives 5): three receivers tie at cover 0, served by sku_id: 11, 12, 13
    st = _siblings([8, 0, 0, 0], [1.0, 2.0, 2.0, 1.0], rule)
    assert st[1:, N_SENT].tolist() == [5, -2, 0, -3]
    # a zero-demand store gives all it has; lead 0 puts the units on hand at once
    rule0 = rule._replace(lead=np.int64(0))
    st = _siblings([4, 1, 9], [0.0, 2.0, 2.0], rule0)
    assert st[1:, N_SENT].tolist() == [4, -4, 0] and st[1:, S_ON_HAND].tolist() == [0, 5, 9]


def _run(catalog, cfg: SimConfig, days: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    env = VectorEnv(catalog, cfg)
    obs = env.reset(3)
    rng = np.random.default_rng(1)
    for _ in range(days):
        orders = rng.poisson(np.where(rng.random(len(catalog)) < 0.5, 2.0, 0.0) * catalog.demand_mean)
        obs = env.step(orders.astype(float)).obs
    return env.totals(), obs.features.copy()


def _dc(skus: int = 120):
    return load_catalog(load_config(None, [f"catalog.skus={skus}", "catalog.synthetic.network=dc"]).catalog)


def test_transfers_off_or_never_triggered_change_nothing():
    catalog = _dc()
    assert not SimConfig().transfers.enabled
    want, feats = _run(catalog, SimConfig(days=20, threads=1), 20)
    idle = TransfersConfig(enabled=True, below=0.0, target=0.0, above=1e9)  # nobody sends or needs
    got, got_feats = _run(catalog, SimConfig(days=20, threads=1, transfers=idle), 20)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    np.testing.assert_array_equal(got_feats, feats)
    assert want["transferred"].sum() == 0 and want["ship_cost"].sum() > 0


def test_dc_catalog_transfers_are_charged_and_conserve_stock():
    catalog = _dc()
    cfg = SimConfig(days=25, threads=1, transfers=TransfersConfig(enabled=True, lead_time=1, cost=0.25, cost_share=0.1,
                                                                 below=1.0, target=2.0, above=4.0))
    env = VectorEnv(catalog, cfg)
    obs = env.reset(5)
    parent, root, _ = echelons(catalog)
    store = ~np.isin(np.arange(len(catalog)), parent)
    rng = np.random.default_rng(2)
    for _ in range(cfg.days):
        before = np.bincount(root, obs.raw.on_hand + obs.raw.pipeline.sum(1), minlength=len(catalog))
        orders = rng.poisson(np.where(rng.random(len(catalog)) < 0.4, 3.0, 0.0) * catalog.demand_mean)
        res = env.step(orders.astype(float))
        m = res.metrics
        flow = np.where(parent < 0, m.ordered, 0) - np.where(store, m.sales, 0) - m.waste
        after = np.bincount(root, res.obs.raw.on_hand + res.obs.raw.pipeline.sum(1), minlength=len(catalog))
        np.testing.assert_array_equal(after, before + np.bincount(root, flow, minlength=len(catalog)).astype(np.int64))
        obs = res.obs
    tot = env.totals()
    assert tot["transferred"].sum() > 0 and (tot["transferred"][~store] == 0).all()
    rate = 0.25 + 0.1 * catalog.unit_cost.astype(np.float64)
    np.testing.assert_allclose(tot["transfer_cost"], rate * tot["transferred"])
    assert (tot["ship_cost"][parent < 0] == 0).all() and tot["ship_cost"][store].sum() > 0
    units = tot["ship_cost"][store] / catalog.ship_cost[store].astype(np.float64)  # each store's units shipped
    np.testing.assert_allclose(units.sum(), tot["sales"][parent < 0].sum(), rtol=1e-9)  # = what the DCs shipped


def test_transfer_lead_beyond_the_pipeline_is_a_config_error():
    catalog = _dc(30)
    with pytest.raises(ConfigError, match=r"^config key 'sim.transfers.lead_time': got 60, expected at most \d+"):
        VectorEnv(catalog, SimConfig(transfers=TransfersConfig(enabled=True, lead_time=60)))
    VectorEnv(dataclasses.replace(catalog, upstream=np.full(len(catalog), -1), item=None),
              SimConfig(transfers=TransfersConfig(enabled=True, lead_time=60)))  # no network: not used
    with pytest.raises(ConfigError, match=r"'sim\.transfers\.above'"):
        load_config(None, ["sim.transfers.target=5", "sim.transfers.above=4"])


@pytest.mark.parametrize(("keys", "words"), [
    (["sim.transfers.enabled=true", "sim.transfers.lead_time=60"], "config key 'sim.transfers.lead_time': got 60"),
    (["sim.transfers.below=2", "sim.transfers.target=1"], "config key 'sim.transfers.target': got 1"),
    (["sim.transfers.cost=-1"], "config key 'sim.transfers.cost': got -1"),
])
def test_transfer_mistakes_exit_2_with_one_line(capsys, keys, words):
    from skurl.cli import main

    sets = [a for k in ["catalog.synthetic.network=dc", *keys] for a in ("--set", k)]
    assert main(["bench", "sim", "--skus", "30", "--steps", "1", *sets]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and words in err, err
