"""Running statistics vs numpy; chunk invariance; decay; reward scaling; state round trip."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from skurl.learn.normalize import RewardScaler
from skurl.policy.normalize import RunningMeanStd


def batches(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(loc=3.0, scale=2.0, size=(n, 4)) * [1, 10, 0.1, 0] for n in (5, 1, 300, 17)]


def test_merged_batches_equal_numpy_moments_of_the_whole() -> None:
    rms = RunningMeanStd((4,))
    parts = batches()
    for b in parts:
        rms.update(torch.from_numpy(b).float())
    whole = np.concatenate(parts).astype(np.float32).astype(np.float64)
    np.testing.assert_allclose(rms.mean.numpy(), whole.mean(0), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(rms.var.numpy(), whole.var(0), rtol=1e-9, atol=1e-12)
    assert float(rms.count) == whole.shape[0]


def test_result_does_not_depend_on_the_split() -> None:
    whole = torch.from_numpy(np.concatenate(batches(1)))
    a, b = RunningMeanStd((4,)), RunningMeanStd((4,))
    a.update(whole)
    for chunk in whole.split(7):
        b.update(chunk)
    torch.testing.assert_close(a.mean, b.mean, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(a.var, b.var, rtol=1e-10, atol=1e-12)


def test_normalize_clips_and_constant_columns_map_to_zero() -> None:
    rms = RunningMeanStd((2,), clip=10.0)
    rms.update(torch.tensor([[0.0, 5.0], [2.0, 5.0]]))
    out = rms.normalize(torch.tensor([[1.0, 5.0], [1000.0, 5.0]]))
    assert out.dtype == torch.float32
    assert out[0].tolist() == pytest.approx([0.0, 0.0], abs=1e-4)
    assert float(out[1, 0]) == 10.0


def test_decay_weights_recent_batches_more() -> None:
    rms = RunningMeanStd(())
    rms.update(torch.zeros(100))
    rms.update(torch.ones(100), decay=0.5)  # history counts as 50 samples
    assert float(rms.mean) == pytest.approx(100 / 150)
    assert float(rms.count) == pytest.approx(150)


def test_reward_scaler_uses_the_std_of_discounted_returns() -> None:
    rng = np.random.default_rng(2)
    rewards = rng.normal(-5.0, 1.0, size=(6, 3))
    dones = np.zeros((6, 3), bool)
    dones[2, 1] = dones[-1] = True
    gamma = 0.9
    returns, ret = [], np.zeros(3)
    for t in range(6):  # the textbook loop, per SKU
        ret = ret * gamma + rewards[t]
        returns.append(ret.copy())
        ret[dones[t]] = 0.0
    scaler = RewardScaler(gamma)
    scaler.update(torch.from_numpy(rewards), torch.from_numpy(dones))
    expected_std = np.sqrt(np.var(np.concatenate(returns)) + 1e-8)
    assert float(scaler.stats.std) == pytest.approx(expected_std, rel=1e-9)
    scaled = scaler.scale(torch.from_numpy(rewards))
    np.testing.assert_allclose(scaled.numpy(), rewards / expected_std, rtol=1e-9)


def test_state_dict_round_trip_is_exact() -> None:
    a = RewardScaler(0.99)
    a.update(torch.randn(5, 4, dtype=torch.float64), torch.zeros(5, 4, dtype=torch.bool))
    b = RewardScaler(0.99)
    b.load_state_dict(a.state_dict())
    for k, v in a.state_dict().items():
        assert torch.equal(v, b.state_dict()[k]) and v.dtype == torch.float64


def test_sku_reward_scaler_scales_each_sku_by_its_own_return_std() -> None:
    from skurl.learn.normalize import SkuRewardScaler

    rng = np.random.default_rng(3)
    rewards = rng.normal(-5.0, 1.0, size=(8, 3)) * np.array([1.0, 100.0, 0.01])
    dones = np.zeros((8, 3), bool)
    dones[-1] = True
    ids = torch.tensor([30, 10, 20])
    scaler = SkuRewardScaler(0.9, floor=0.0)
    scaler.update(torch.from_numpy(rewards), torch.from_numpy(dones), ids)
    returns = np.zeros_like(rewards)
    ret = np.zeros(3)
    for t in range(8):
        ret = ret * 0.9 + rewards[t]
        returns[t] = ret
    scaled = scaler.scale(torch.from_numpy(rewards), ids).numpy()
    np.testing.assert_allclose(scaled, rewards / np.sqrt(returns.var(0) + 1e-8), rtol=1e-9)
    assert scaler.ids.tolist() == [10, 20, 30]
    # A later batch with a new SKU and a known one; then a state round trip of other size.
    scaler.update(torch.from_numpy(rewards[:, :2]), torch.from_numpy(dones[:, :2]), torch.tensor([5, 30]))
    assert scaler.ids.tolist() == [5, 10, 20, 30] and scaler.count.tolist() == [8, 8, 8, 16]
    copy = SkuRewardScaler(0.9, floor=0.0)
    copy.load_state_dict(scaler.state_dict())
    x = torch.ones(2, 4, dtype=torch.float64)
    assert torch.equal(copy.scale(x, torch.tensor([5, 10, 20, 30])), scaler.scale(x, torch.tensor([5, 10, 20, 30])))


def test_sku_reward_scaler_floors_near_constant_skus() -> None:
    from skurl.learn.normalize import SkuRewardScaler

    gen = torch.Generator().manual_seed(0)
    noise = torch.randn(50, 2, dtype=torch.float64, generator=gen)
    rewards = torch.cat([noise, torch.zeros(50, 1, dtype=torch.float64)], 1)
    scaler = SkuRewardScaler(0.0, floor=0.1)
    ids = torch.tensor([1, 2, 3])
    scaler.update(rewards, torch.zeros(50, 3, dtype=torch.bool), ids)
    scaled = scaler.scale(torch.ones(1, 3, dtype=torch.float64), ids)
    assert 1.0 < float(scaled[0, 2]) < 20.0  # floored at 0.1 x the median std, not 1 / sqrt(eps)
