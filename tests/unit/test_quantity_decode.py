"""The numba greedy-quantity decoder (policy/quantity_decode.py) against the torch form it
replaces, and the float32 inference fast path (policy/nets.FastMlp) against nn.Linear."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from skurl.policy.nets import ActorCritic, FastMlp, InferenceNets, most_likely_quantity
from skurl.policy.quantity_decode import greedy_quantity


def test_greedy_quantity_equals_the_torch_form() -> None:
    gen = torch.Generator().manual_seed(3)
    for actions, levels in ((21, 3), (20, 12), (7, 7), (2, 1)):
        logits = torch.randn(3000, actions, generator=gen) * 2
        units = torch.randint(0, levels, (3000, actions), generator=gen).double()
        units[:800] = units[:800].sort(-1).values
        want = most_likely_quantity(torch.softmax(logits.double(), -1), units)
        np.testing.assert_array_equal(greedy_quantity(logits.numpy(), units.numpy()), want.numpy())


def test_greedy_quantity_by_hand_and_bad_shapes() -> None:
    logits = np.log(np.array([[0.4, 1e-6, 0.3, 0.3], [0.25, 0.25, 0.25, 0.25]], np.float32))
    units = np.array([[0, 0, 1, 1], [3, 1, 3, 1]], np.float64)
    assert greedy_quantity(logits, units).tolist() == [2, 0]  # 0.6 on one unit; a tie: the first index
    with pytest.raises(ValueError, match="logits"):
        greedy_quantity(logits, units[:, :3])


@pytest.mark.parametrize("hidden", [(64, 64), (256, 256), (16,)])
def test_fast_mlp_gives_nn_linears_bits(hidden: tuple[int, ...]) -> None:
    torch.manual_seed(1)
    model = ActorCritic(30, 20, hidden)
    nets = InferenceNets(model)
    assert nets._fast is not None
    for rows in (1, 777, 5000, 777):  # buffers change size and come back
        x = torch.randn(rows, 30) * 3
        with torch.inference_mode():
            assert torch.equal(nets.logits(x), nets.policy(nets.normalize(x)))
            assert torch.equal(nets.logits(x.double()), nets.policy(nets.normalize(x.double())))
    assert FastMlp.of(torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))) is None
    assert InferenceNets(model, torch.bfloat16)._fast is None


@pytest.mark.parametrize("skip,lot,review,joint", [(False, False, 1, False), (True, True, 1, False),
                                                   (False, True, 2, False), (True, True, 1, True)])
def test_cover_greedy_equals_the_table_decode_and_orders_for(skip: bool, lot: bool, review: int, joint: bool) -> None:
    import dataclasses

    from skurl.config import ActionsConfig, SimConfig
    from skurl.policy.actions import ActionGrid, clip_orders
    from skurl.policy.baselines import make_policy
    from skurl.policy.cover_decode import cover_greedy
    from skurl.sim import VectorEnv
    from skurl.sim.testing import random_catalog

    catalog = random_catalog(300, 4)
    sim = SimConfig(days=30, review_days=review, threads=1)
    actions = ActionsConfig(kind="cover", n=22 if skip else 21, skip=skip, z_center="newsvendor")
    grid = ActionGrid.from_config(actions, review, catalog, "profit")
    assert grid.cover is not None
    if lot:
        lots = np.random.default_rng(0).integers(0, 9, 300).astype(np.float64)
        grid = dataclasses.replace(grid, cover=dataclasses.replace(grid.cover, lot=lots))
    if joint:  # policy.actions.lot_factors: a lot factor per action
        scale = np.random.default_rng(1).choice([0.0, 0.5, 1.0, 2.0], grid.n)
        grid = dataclasses.replace(grid, lot_scale=scale)
    env, base = VectorEnv(catalog, sim), make_policy("capped-base-stock", catalog, sim)
    obs = env.reset(seed=1)
    gen = torch.Generator().manual_seed(2)
    for day in range(6):
        logits = (torch.randn(300, grid.n, generator=gen) * 2).numpy()
        if day % 2:  # whole numbers: ties between quantities' masses (the first quantity wins)
            logits = np.round(logits / 2).astype(np.float32)
        rows = slice(0, 300)
        idx, units = cover_greedy(grid, obs.raw, rows, logits)
        np.testing.assert_array_equal(idx, greedy_quantity(logits, grid.unit_table(obs.raw, rows)), f"day {day}")
        want, _ = grid.orders_for(idx, obs.raw)
        np.testing.assert_array_equal(clip_orders(units)[0], want)
        obs = env.step(base.orders(obs)).obs
