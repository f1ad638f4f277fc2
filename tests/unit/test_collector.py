"""The collector on a tiny deterministic env: recorded data is consistent with the env
and the model, chunking changes nothing, record=False keeps nothing."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from skurl.collect.collector import Collector, resolve_infer_dtype
from skurl.config import ActionsConfig
from skurl.policy.actions import ActionGrid
from skurl.policy.nets import ActorCritic
from skurl.sim.api import DayMetrics, Obs, ObsSchema, RawState, StepResult

DAYS = 6


class StockEnv:
    """N SKUs; stock += order - demand (lost sales); demand = 1 + (sku_id + day) % 3;
    reward = -(|stock - 4|). Features: stock/4, day/DAYS, sku_id % 2."""

    def __init__(self, sku_ids: np.ndarray, days: int = DAYS) -> None:
        self.sku_ids = np.asarray(sku_ids, np.int64)
        self.days = days
        self._schema = ObsSchema((("stock", 1), ("day", 1), ("odd", 1)))
        self.stock = np.zeros(len(self.sku_ids))
        self.day = 0
        self.features = np.zeros((len(self.sku_ids), 3), np.float32)
        self.log: list[np.ndarray] = []

    @property
    def num_skus(self) -> int:
        return len(self.sku_ids)

    @property
    def schema(self) -> ObsSchema:
        return self._schema

    def _obs(self) -> Obs:
        self.features[:, 0] = self.stock / 4
        self.features[:, 1] = self.day / self.days
        self.features[:, 2] = self.sku_ids % 2
        n = self.num_skus
        raw = RawState(self.stock.astype(np.int64), np.zeros((n, 0), np.int64), np.zeros(n, np.int64),
                       np.full((n, 1), 2.0, np.float32), self.day)
        return Obs(self.features, raw, self._schema)

    def reset(self, seed: int, episode: int = 0) -> Obs:
        self.stock[:] = 2 + (seed + episode) % 3
        self.day = 0
        return self._obs()

    def step(self, orders: np.ndarray) -> StepResult:
        self.log.append(np.asarray(orders, np.float64).copy())
        demand = 1 + (self.sku_ids + self.day) % 3
        self.stock = np.maximum(self.stock + orders - demand, 0)
        reward = -np.abs(self.stock - 4).astype(np.float32)
        self.day += 1
        z = np.zeros(self.num_skus)
        metrics = DayMetrics(*([z] * 14))
        return StepResult(self._obs(), reward, self.day >= self.days, metrics)

    def info(self) -> dict[str, Any]:
        return {"days": self.days}

    def close(self) -> None:
        pass


def make(sku_ids: np.ndarray, chunk: int = 4096, dtype: str = "float32") -> tuple[Collector, StockEnv]:
    torch.manual_seed(1)
    model = ActorCritic(3, 5, (16,))
    model.obs_norm.update(torch.randn(50, 3))
    env = StockEnv(sku_ids)
    grid = ActionGrid.from_config(ActionsConfig(kind="units", n=5))
    return Collector(env, model, grid, chunk=chunk, infer_dtype=dtype), env


def test_rollout_is_consistent_with_env_and_model() -> None:
    collector, _ = make(np.arange(10, 23))
    rollout = collector.collect(seed=3, episode=1)
    assert rollout is not None
    n = 13
    assert rollout.obs.shape == (DAYS, n, 3) and rollout.actions.shape == (DAYS, n)
    assert rollout.sku_ids.tolist() == list(range(10, 23))
    assert (rollout.seed, rollout.episode, rollout.policy_version) == (3, 1, 0)
    assert rollout.dones[:-1].sum() == 0 and rollout.dones[-1].all() and not rollout.terminals.any()
    # Replay the recorded actions: same observations and rewards (units grid: order = index).
    replay = StockEnv(np.arange(10, 23))
    obs = replay.reset(3, 1)
    for t in range(DAYS):
        np.testing.assert_array_equal(rollout.obs[t], obs.features)
        res = replay.step(rollout.actions[t].astype(np.float64))
        np.testing.assert_array_equal(rollout.rewards[t], res.reward)
        obs = res.obs
    np.testing.assert_array_equal(rollout.last_obs, obs.features)
    with torch.no_grad():
        logits, values = collector.model(torch.from_numpy(rollout.obs.reshape(-1, 3)))
        logp = torch.log_softmax(logits, -1).gather(1, torch.from_numpy(rollout.actions.reshape(-1, 1)).long())
        _, boot = collector.model(torch.from_numpy(rollout.last_obs))
    np.testing.assert_allclose(rollout.logp.reshape(-1), logp[:, 0].numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rollout.values.reshape(-1), values.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rollout.bootstrap, boot.numpy(), rtol=1e-5, atol=1e-6)
    assert collector.stats.transitions == DAYS * n
    assert collector.stats.reward_mean == pytest.approx(float(rollout.rewards.mean()), rel=1e-6)


def test_chunk_size_and_shard_do_not_change_actions() -> None:
    ids = np.arange(100, 140)
    whole = make(ids, chunk=4096)[0].collect(0, 2)
    chunked = make(ids, chunk=3)[0].collect(0, 2)
    shard = make(ids[5:17], chunk=5)[0].collect(0, 2)
    assert whole is not None and chunked is not None and shard is not None
    np.testing.assert_array_equal(whole.actions, chunked.actions)
    np.testing.assert_array_equal(whole.actions[:, 5:17], shard.actions)
    other = make(ids)[0].collect(0, 3)
    assert other is not None and not np.array_equal(whole.actions, other.actions)


def test_obs_of_some_skus_only_and_everything_else_unchanged() -> None:
    ids = np.arange(100, 140)
    whole = make(ids)[0].collect(0, 2)
    # Ids this collector does not run (999, 7) are somebody else's: ignored.
    part = make(ids)[0].collect(0, 2, obs_skus=np.array([999, 139, 103, 7, 104]))
    assert whole is not None and part is not None
    keep = np.array([3, 4, 39])
    np.testing.assert_array_equal(part.obs_sku_ids, ids[keep])
    np.testing.assert_array_equal(part.obs, whole.obs[:, keep])
    np.testing.assert_array_equal(part.last_obs, whole.last_obs[keep])
    for name in ("actions", "logp", "rewards", "dones", "bootstrap", "sku_ids"):
        np.testing.assert_array_equal(getattr(part, name), getattr(whole, name))
    assert set(part.arrays()) == set(whole.arrays()) | {"obs_sku_ids"}
    with pytest.raises(ValueError, match="3 of its 40 SKUs"):
        part.select_skus(np.arange(2))
    picked, want = part.select_skus(keep), whole.select_skus(keep)
    for name, arr in want.arrays().items():
        np.testing.assert_array_equal(getattr(picked, name), arr)


def test_record_false_keeps_nothing_but_steps_the_env() -> None:
    collector, env = make(np.arange(8))
    assert collector.collect(0, 0, record=False) is None
    assert len(env.log) == DAYS and collector.stats.days == DAYS
    assert collector.stats.scalars()["transitions"] == DAYS * 8


def test_weights_and_versions() -> None:
    collector, _ = make(np.arange(4))
    with pytest.raises(ValueError, match="version"):
        collector.collect(0, 0, version=2)
    state = {k: v.clone() for k, v in collector.model.state_dict().items()}
    state["policy.net.2.bias"] += 5.0 * torch.arange(5.0)  # strongly prefer the largest order
    collector.set_weights(2, state)
    rollout = collector.collect(0, 0, version=2)
    assert rollout is not None and rollout.policy_version == 2
    assert (rollout.actions == 4).mean() > 0.9


def test_bf16_inference_records_float32() -> None:
    collector, _ = make(np.arange(6), dtype="bfloat16")
    rollout = collector.collect(0, 0)
    assert rollout is not None and rollout.logp.dtype == np.float32
    assert np.isfinite(rollout.values).all()


def test_infer_dtype_names() -> None:
    assert resolve_infer_dtype("float32") == torch.float32
    assert resolve_infer_dtype("bfloat16") == torch.bfloat16
    assert resolve_infer_dtype("auto") in (torch.float32, torch.bfloat16)
    with pytest.raises(ValueError):
        resolve_infer_dtype("fp8")


def test_from_config_reads_the_collection_settings_of_the_collect_section() -> None:
    from skurl.config import CollectConfig

    base, env = make(np.arange(4))
    settings = CollectConfig(chunk=3, infer_dtype="float32", values=False)
    c = Collector.from_config(env, base.model, base.grid, settings)
    assert (c.chunk, c.dtype, c.record_values) == (3, torch.float32, False)
