"""ppo_loss on hand-made tensors: clipping of both signs, value loss, entropy, KL."""

from __future__ import annotations

import math

import pytest
import torch

from skurl.learn.ppo_loss import ppo_loss

CLIP = 0.2


def loss_of(ratios: list[float], adv: list[float], values: list[float] | None = None,
            returns: list[float] | None = None, entropy: list[float] | None = None,
            vf: float = 0.0, ent: float = 0.0) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
    n = len(ratios)
    old = torch.full((n,), -1.0)
    new = (old + torch.log(torch.tensor(ratios))).requires_grad_(True)
    loss, stats = ppo_loss(new, old, torch.tensor(adv), torch.tensor(values or [0.0] * n),
                           torch.tensor(returns or [0.0] * n), torch.tensor(entropy or [0.0] * n),
                           CLIP, vf, ent)
    loss.backward()
    assert new.grad is not None
    return loss, stats, new.grad


def test_ratio_one_is_minus_mean_advantage_with_no_kl_or_clipping() -> None:
    loss, stats, _ = loss_of([1.0, 1.0], [2.0, -1.0])
    assert float(loss.detach()) == pytest.approx(-0.5)
    assert float(stats["approx_kl"]) == pytest.approx(0.0, abs=1e-7)
    assert float(stats["clip_frac"]) == 0.0


@pytest.mark.parametrize(
    ("ratio", "adv", "objective", "has_grad"),
    [
        (1.5, 1.0, 1.2, False),  # positive advantage, ratio above 1+clip: clipped, no gradient
        (0.5, 1.0, 0.5, True),  # positive advantage, ratio below: unclipped (pessimistic min)
        (0.5, -1.0, -0.8, False),  # negative advantage, ratio below 1-clip: clipped
        (1.5, -1.0, -1.5, True),  # negative advantage, ratio above: unclipped
    ],
)
def test_clipping_on_both_sides(ratio: float, adv: float, objective: float, has_grad: bool) -> None:
    loss, stats, grad = loss_of([ratio], [adv])
    assert float(loss.detach()) == pytest.approx(-objective, rel=1e-6)
    assert (float(grad[0]) != 0.0) == has_grad
    assert float(stats["clip_frac"]) == 1.0
    assert float(stats["policy_loss"]) == pytest.approx(-objective, rel=1e-6)


def test_value_loss_and_entropy_terms() -> None:
    loss, stats, _ = loss_of([1.0, 1.0], [0.0, 0.0], values=[1.0, 3.0], returns=[2.0, 1.0],
                             entropy=[0.5, 1.5], vf=0.5, ent=0.1)
    value_loss = 0.5 * (1.0 + 4.0) / 2
    assert float(stats["value_loss"]) == pytest.approx(value_loss)
    assert float(stats["entropy"]) == pytest.approx(1.0)
    assert float(loss.detach()) == pytest.approx(0.5 * value_loss - 0.1 * 1.0)


def test_approx_kl_is_the_low_variance_estimator() -> None:
    ratios = [0.9, 1.25]
    _, stats, _ = loss_of(ratios, [0.0, 0.0])
    expected = sum((r - 1) - math.log(r) for r in ratios) / 2
    assert float(stats["approx_kl"]) == pytest.approx(expected, rel=1e-5)
    assert float(stats["clip_frac"]) == pytest.approx(0.5)  # 1.25 is outside 1 ± 0.2, 0.9 is not


def test_without_the_policy_terms_the_loss_is_the_value_term() -> None:
    new_logp = torch.tensor([-1.0, -2.0], requires_grad=True)
    entropy = torch.tensor([0.5, 0.7], requires_grad=True)
    values = torch.tensor([1.0, 3.0], requires_grad=True)
    returns = torch.tensor([0.0, 1.0])
    loss, stats = ppo_loss(new_logp, torch.tensor([-1.5, -1.0]), torch.tensor([1.0, -1.0]), values, returns,
                           entropy, 0.2, 0.5, 0.01, train_policy=False)
    assert float(loss.detach()) == pytest.approx(0.5 * 0.5 * (1.0 + 4.0) / 2)
    assert float(stats["policy_loss"]) != 0.0  # still reported
    loss.backward()
    assert new_logp.grad is None and entropy.grad is None and values.grad is not None


def test_weighted_surrogate_by_hand() -> None:
    # Decoupled PPO: rows weighted by pi_prox/mu. Ratios (vs the proximal policy) 1.5 and 1.0,
    # advantages 1 and -2, weights 0.5 and 2: objectives 0.5 x 1.2 (clipped) and 2 x -2.
    old = torch.full((2,), -1.0)
    new = (old + torch.log(torch.tensor([1.5, 1.0]))).requires_grad_(True)
    zeros = torch.zeros(2)
    loss, stats = ppo_loss(new, old, torch.tensor([1.0, -2.0]), zeros, zeros, zeros, CLIP, 0.0, 0.0,
                           weight=torch.tensor([0.5, 2.0]))
    loss.backward()
    assert float(loss.detach()) == pytest.approx(-(0.5 * 1.2 + 2.0 * -2.0) / 2, rel=1e-6)
    assert new.grad is not None and float(new.grad[0]) == 0.0  # the clipped row
    assert float(new.grad[1]) == pytest.approx(-(2.0 * -2.0 * 1.0) / 2, rel=1e-6)  # d/dlogp of w r A
    assert float(stats["clip_frac"]) == 0.5
