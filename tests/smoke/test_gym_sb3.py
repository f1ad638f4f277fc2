"""Stable-Baselines3 PPO trains through skurl.gym.SkuEnv: SB3's own env checker accepts it,
episodes end at sim.days with the simulator's rewards, and the weights move."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.env_checker import check_env

from skurl.gym import SkuEnv

UNIFORM = Path(__file__).resolve().parents[2] / "configs" / "uniform.yaml"
DAYS = 32
OVERRIDES = [f"sim.days={DAYS}", "catalog.skus=4", "sim.threads=1"]
STEPS = 2048


@pytest.fixture
def one_torch_thread() -> object:
    previous = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny MLP: more threads only contend on 2 shared cores
    yield
    torch.set_num_threads(previous)


def test_ppo_trains_for_a_few_thousand_steps(one_torch_thread: object) -> None:
    env = SkuEnv(UNIFORM, OVERRIDES, sku=1, seed=0)
    check_env(env, warn=True)
    model = PPO("MlpPolicy", env, n_steps=256, batch_size=128, n_epochs=2, seed=0, device="cpu", verbose=0)
    before = [p.detach().clone() for p in model.policy.parameters()]
    model.learn(total_timesteps=STEPS)
    assert model.num_timesteps >= STEPS
    # SB3's Monitor saw whole episodes: each truncated after sim.days steps.
    episodes = list(model.ep_info_buffer)
    assert len(episodes) >= STEPS // DAYS - 1 and {e["l"] for e in episodes} == {DAYS}
    assert all(np.isfinite(e["r"]) and e["r"] <= 0 for e in episodes)  # reward = -costs (configs/uniform.yaml)
    after = list(model.policy.parameters())
    assert all(torch.isfinite(p).all() for p in after)
    assert any(not torch.equal(b, a) for b, a in zip(before, after, strict=True))
    obs, _ = env.reset(seed=1)
    action, _ = model.predict(obs, deterministic=True)
    assert env.action_space.contains(int(action))
    env.step(action)
