"""Policy/value nets: shapes, orthogonal init, state round trip, inverse-CDF sampling."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from skurl.policy.action_noise import ActionUniforms
from skurl.policy.nets import ActorCritic, InferenceNets, sample_inverse_cdf

OBS, ACTIONS = 12, 20


@pytest.fixture
def model() -> ActorCritic:
    torch.manual_seed(0)
    return ActorCritic(OBS, ACTIONS, (64, 32))


def test_shapes(model: ActorCritic) -> None:
    logits, value = model(torch.randn(7, OBS))
    assert logits.shape == (7, ACTIONS) and value.shape == (7,)
    assert logits.dtype == value.dtype == torch.float32


def test_orthogonal_init_and_head_gains(model: ActorCritic) -> None:
    first = model.policy.net[0].weight  # [64, 12]: orthonormal columns scaled by sqrt(2)
    torch.testing.assert_close(first.T @ first, 2.0 * torch.eye(OBS), atol=1e-5, rtol=0)
    policy_head = model.policy.net[-1].weight  # [20, 32]: orthonormal rows x 0.01
    torch.testing.assert_close(policy_head @ policy_head.T, 1e-4 * torch.eye(ACTIONS), atol=1e-7, rtol=0)
    value_head = model.value.net[-1].weight  # [1, 32]: unit norm
    assert float(value_head.detach().norm()) == pytest.approx(1.0, rel=1e-5)
    assert all(float(m.bias.detach().abs().max()) == 0.0 for m in model.modules() if isinstance(m, torch.nn.Linear))


def test_initial_weights_do_not_depend_on_the_thread_count() -> None:
    # At the default 2x256 the QR behind orthogonal_ summed differently on 1 and 2 threads.
    before = torch.get_num_threads()
    weights = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            torch.manual_seed(0)
            weights.append([p.detach().clone() for p in ActorCritic(70, ACTIONS, (256, 256)).parameters()])
            assert torch.get_num_threads() == threads  # the init puts the caller's setting back
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(a, b) for a, b in zip(*weights, strict=True))


@torch.no_grad()
def test_initial_policy_is_near_uniform(model: ActorCritic) -> None:
    logits, _ = model(torch.randn(256, OBS))
    logp = torch.log_softmax(logits, -1)
    entropy = -(logp.exp() * logp).sum(-1)
    assert float(entropy.min()) > 0.99 * math.log(ACTIONS)


@torch.no_grad()
def test_state_round_trip_rebuilds_the_same_model(model: ActorCritic) -> None:
    model.obs_norm.update(torch.randn(100, OBS) * 3 + 1)
    state = model.state_dict()
    assert state["obs_norm.mean"].dtype == torch.float64
    assert ActorCritic.shapes_from_state(state) == (OBS, ACTIONS, (64, 32))
    copy = ActorCritic.from_state(state)
    x = torch.randn(9, OBS)
    for a, b in zip(model(x), copy(x), strict=True):
        assert torch.equal(a, b)


@torch.no_grad()
def test_normalization_is_part_of_the_model(model: ActorCritic) -> None:
    x = torch.randn(5, OBS)
    before = model(x)[0]
    model.obs_norm.update(torch.randn(1000, OBS) * 10 + 5)
    assert not torch.allclose(before, model(x)[0])


@torch.no_grad()
def test_inference_nets_match_the_model(model: ActorCritic) -> None:
    model.obs_norm.update(torch.randn(100, OBS) * 2)
    x = torch.randn(50, OBS)
    logits, value = model(x)
    f32 = InferenceNets(model, torch.float32)
    l32, v32 = f32(x)
    torch.testing.assert_close(l32, logits, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(v32, value, rtol=1e-5, atol=1e-6)
    bf16 = InferenceNets(model, torch.bfloat16)
    lb, vb = bf16(x)
    assert lb.dtype == torch.float32
    assert float((torch.softmax(lb, -1) - torch.softmax(logits, -1)).abs().max()) < 0.01
    assert float((vb - value).abs().max()) < 0.05 * float(value.abs().max()) + 0.02


def test_inverse_cdf_matches_the_probabilities() -> None:
    probs = torch.tensor([0.05, 0.5, 0.0, 0.25, 0.2])
    n = 200_000
    logits = torch.log(probs.clamp_min(1e-30)).expand(n, -1)
    u = torch.from_numpy(np.random.default_rng(0).random(n))
    idx, logp = sample_inverse_cdf(logits, u)
    counts = torch.bincount(idx, minlength=5).double()
    expected = probs.double() * n
    assert counts[2] == 0  # a zero-probability action is never drawn
    nz = expected > 0
    chi2 = float(((counts[nz] - expected[nz]) ** 2 / expected[nz]).sum())
    assert chi2 < 16.3  # chi-square, 3 degrees of freedom, p = 0.001
    torch.testing.assert_close(logp, torch.log(probs)[idx], rtol=1e-5, atol=1e-6)


def test_inverse_cdf_edges() -> None:
    logits = torch.zeros(3, 4)
    idx, _ = sample_inverse_cdf(logits, torch.tensor([0.0, 0.2499, 0.999999]))
    assert idx.tolist() == [0, 0, 3]


def test_action_uniforms_do_not_depend_on_which_skus_are_drawn_together() -> None:
    ids = np.arange(1000, 1100, dtype=np.int64)
    whole = ActionUniforms(7, 3, ids).day(11).copy()
    part = ActionUniforms(7, 3, ids[::-3][:10]).day(11).copy()
    np.testing.assert_array_equal(part, whole[::-3][:10])
    assert ((whole > 0) & (whole < 1)).all()
    other_day = ActionUniforms(7, 3, ids).day(12)
    other_episode = ActionUniforms(7, 4, ids).day(11)
    assert not np.array_equal(whole, other_day) and not np.array_equal(whole, other_episode)


@torch.no_grad()
def test_learned_policy_greedy_picks_the_most_likely_quantity() -> None:
    from skurl.config import ActionsConfig
    from skurl.policy.actions import ActionGrid
    from skurl.policy.learned import LearnedPolicy
    from skurl.sim.api import Obs, ObsSchema, RawState

    model = ActorCritic(1, 4, (4,))
    for p in model.parameters():
        p.zero_()
    model.policy.net[-1].bias.copy_(torch.log(torch.tensor([0.4, 1e-6, 0.3, 0.3])))
    grid = ActionGrid.from_config(ActionsConfig(kind="multiplier", n=4, max=0.75))  # 0, .25, .5, .75
    forecast = np.array([[1.0], [4.0]], np.float32)  # units: [0, 0, 1, 1] and [0, 1, 2, 3]
    raw = RawState(np.zeros(2, np.int64), np.zeros((2, 0), np.int64), np.zeros(2, np.int64), forecast, 0)
    obs = Obs(np.zeros((2, 1), np.float32), raw, ObsSchema((("x", 1),)))
    orders = LearnedPolicy(model, grid).orders(obs)
    # SKU 0: one unit has probability 0.6 over two indices, zero units 0.4; SKU 1: all distinct.
    assert orders.tolist() == [1.0, 0.0]


def _all_pairs_quantity(probs: torch.Tensor, units: torch.Tensor) -> torch.Tensor:
    """The definition: each index's mass is the probability of every index ordering its quantity."""
    same = units.unsqueeze(-1) == units.unsqueeze(-2)
    return (same * probs.unsqueeze(-2)).sum(-1).argmax(-1)


def test_most_likely_quantity_by_hand() -> None:
    from skurl.policy.nets import most_likely_quantity

    probs = torch.tensor([[0.4, 1e-6, 0.3, 0.3 - 1e-6], [0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25],
                          [0.2, 0.3, 0.1, 0.4]], dtype=torch.float64)
    units = torch.tensor([[0, 0, 1, 1], [5, 5, 5, 5], [3, 1, 3, 1], [7, 2, 2, 7]], dtype=torch.float64)
    # quantity 1 (0.6) beats 0; one quantity: its first index; a tie of two quantities: the first
    # index of either (index 0 orders 3); quantities out of order on the grid: 7 has 0.6
    assert most_likely_quantity(probs, units).tolist() == [2, 0, 0, 0]


def test_most_likely_quantity_equals_the_all_pairs_definition() -> None:
    from skurl.policy.nets import most_likely_quantity

    gen = torch.Generator().manual_seed(5)
    for actions, levels in ((21, 3), (21, 12), (7, 7), (2, 1)):
        logits = torch.randn(4000, actions, generator=gen, dtype=torch.float64) * 2
        probs = torch.softmax(logits, -1)
        units = torch.randint(0, levels, (4000, actions), generator=gen).double()
        units[:1000] = units[:1000].sort(-1).values  # nondecreasing rows, as the cover grid's
        got, want = most_likely_quantity(probs, units), _all_pairs_quantity(probs, units)
        assert torch.equal(got, want), (actions, levels, int((got != want).sum()))
