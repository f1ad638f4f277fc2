"""GAE against hand-computed cases: truncation bootstraps, termination cuts."""

from __future__ import annotations

import pytest
import torch

from skurl.buffer.gae import gae

GAMMA, LAM = 0.9, 0.5
REWARDS = [1.0, 2.0, 3.0]
VALUES = [0.5, 1.0, 1.5]
BOOT = 2.0


def run(dones: list[bool], terminals: list[bool], trunc: list[float] | None = None,
        gamma: float = GAMMA, lam: float = LAM) -> tuple[list[float], list[float]]:
    col = lambda xs, dt=torch.float64: torch.tensor(xs, dtype=dt).reshape(-1, 1)  # noqa: E731
    adv, ret = gae(col(REWARDS), col(VALUES), torch.tensor([BOOT], dtype=torch.float64),
                   col(dones, torch.bool), col(terminals, torch.bool), gamma, lam,
                   None if trunc is None else col(trunc))
    return adv[:, 0].tolist(), ret[:, 0].tolist()


def test_truncated_at_the_end_bootstraps() -> None:
    # delta2 = 3 + .9*2 - 1.5 = 3.3; delta1 = 2 + .9*1.5 - 1 = 2.35; delta0 = 1 + .9*1 - .5 = 1.4
    adv, ret = run([False, False, True], [False, False, False])
    expected = [1.4 + 0.45 * (2.35 + 0.45 * 3.3), 2.35 + 0.45 * 3.3, 3.3]
    assert adv == pytest.approx(expected)
    assert ret == pytest.approx([a + v for a, v in zip(expected, VALUES, strict=True)])


def test_terminal_at_the_end_has_no_bootstrap() -> None:
    adv, _ = run([False, False, True], [False, False, True])
    assert adv == pytest.approx([1.4 + 0.45 * (2.35 + 0.45 * 1.5), 2.35 + 0.45 * 1.5, 1.5])


def test_terminal_inside_cuts_the_sum() -> None:
    # episode 1 = steps 0..1 (terminal after 1); episode 2 = step 2 (truncated, bootstrap)
    adv, _ = run([False, True, True], [False, True, False])
    assert adv == pytest.approx([1.4 + 0.45 * 1.0, 2.0 - 1.0, 3.3])


def test_truncation_inside_bootstraps_with_the_final_value() -> None:
    adv, _ = run([False, True, True], [False, False, False], trunc=[0.0, 4.0, 0.0])
    delta1 = 2.0 + 0.9 * 4.0 - 1.0
    assert adv == pytest.approx([1.4 + 0.45 * delta1, delta1, 3.3])


def test_truncation_inside_without_final_values_is_refused() -> None:
    with pytest.raises(ValueError, match="truncation_values"):
        run([False, True, True], [False, False, False])


def test_lambda_one_gamma_one_is_reward_to_go_plus_bootstrap() -> None:
    adv, ret = run([False, False, True], [False, False, False], gamma=1.0, lam=1.0)
    assert ret == pytest.approx([6.0 + BOOT, 5.0 + BOOT, 3.0 + BOOT])
    assert adv == pytest.approx([r - v for r, v in zip(ret, VALUES, strict=True)])


def test_columns_are_independent() -> None:
    """Each SKU column gets exactly its own single-column result."""
    cases = [([False, False, True], [False, False, True]), ([False, True, True], [False, True, False])]
    singles = [run(d, t)[0] for d, t in cases]
    rewards = torch.tensor(REWARDS).reshape(-1, 1).repeat(1, 2)
    values = torch.tensor(VALUES).reshape(-1, 1).repeat(1, 2)
    dones = torch.tensor([c[0] for c in cases]).T
    terms = torch.tensor([c[1] for c in cases]).T
    adv, _ = gae(rewards, values, torch.tensor([BOOT, BOOT]), dones, terms, GAMMA, LAM)
    for j in range(2):
        assert adv[:, j].tolist() == pytest.approx(singles[j], rel=1e-6)
