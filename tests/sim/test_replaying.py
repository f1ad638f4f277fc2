"""The record-and-replay wrapper every remote shard uses (sim/replaying.py), over a
transport that loses its shard on demand: the episode goes on exactly as an undisturbed
env's, a loss is rebuilt once per failure, and other errors are not mistaken for losses.
(Real losses: tests/integration/test_faults_sim.py for gRPC, test_ray_faults.py for Ray.)"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from skurl.config import SimConfig
from skurl.sim import VectorEnv
from skurl.sim.api import Obs, StepResult
from skurl.sim.replaying import EpisodeLog, ReplayingEnv
from skurl.sim.testing import random_catalog

CATALOG = random_catalog(40, seed=3)
SIM = SimConfig(days=12)
N = len(CATALOG.sku_id)


class Lost(RuntimeError):
    pass


class FlakyShard:
    """A VectorEnv that is 'lost' on the calls numbered in `lose_at` (its state is gone:
    a fresh env replaces it only through rebuild)."""

    def __init__(self, lose_at: set[int]) -> None:
        self.env: VectorEnv | None = VectorEnv(CATALOG, SIM)
        self.lose_at, self.calls, self.rebuilt_days = lose_at, 0, []

    schema = property(lambda self: VectorEnv(CATALOG, SIM).schema)
    num_skus = property(lambda self: N)

    def _live(self) -> VectorEnv:
        self.calls += 1
        if self.calls in self.lose_at:
            self.env = None
        if self.env is None:
            raise Lost(f"call {self.calls}")
        return self.env

    def reset(self, seed: int, episode: int) -> Obs:
        return self._live().reset(seed, episode)

    def step(self, orders: np.ndarray) -> StepResult:
        return self._live().step(orders)

    def info(self) -> dict[str, Any]:
        return {"calls": self.calls}

    def lost(self, exc: BaseException) -> bool:
        return isinstance(exc, Lost)

    def rebuild(self, log: EpisodeLog, cause: BaseException) -> None:
        env = VectorEnv(CATALOG, SIM)
        assert log.episode is not None
        env.reset(*log.episode)
        for orders in log.orders:
            env.step(orders)
        self.env = env
        self.rebuilt_days.append(len(log.orders))

    def close(self) -> None:
        self.env = None


def episode(env: Any, seed: int = 5) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    obs = env.reset(seed, 2)
    out = [(obs.features.copy(), np.zeros(N))]
    orders = np.empty(N)
    for _ in range(SIM.days):
        orders[:] = rng.integers(0, 20, N)  # one buffer, reused: the wrapper copies
        result = env.step(orders)
        out.append((result.obs.features.copy(), result.reward.copy()))
    return out


@pytest.mark.parametrize("lose_at", [set(), {1}, {4}, {4, 9}, {13}])
def test_losses_mid_episode_leave_the_trajectory_unchanged(lose_at: set[int]) -> None:
    shard = FlakyShard(lose_at)
    env = ReplayingEnv(shard)
    got, want = episode(env), episode(VectorEnv(CATALOG, SIM))
    for (fa, ra), (fb, rb) in zip(got, want, strict=True):
        np.testing.assert_array_equal(fa, fb)
        np.testing.assert_array_equal(ra, rb)
    assert env.recoveries == len(lose_at)
    # days done before each loss: calls before it, less the reset and each earlier retry
    assert shard.rebuilt_days == [max(0, k - 2 - i) for i, k in enumerate(sorted(lose_at))]


def test_other_errors_are_raised_without_a_rebuild() -> None:
    shard = FlakyShard(set())
    env = ReplayingEnv(shard)
    env.reset(1, 0)
    with pytest.raises(Exception, match="orders"):
        env.step(np.full(N + 1, 1.0))  # wrong length: the env's own error
    assert env.recoveries == 0 and shard.rebuilt_days == []
    assert env.info() == {"calls": 2} and env.num_skus == N  # the transport's


def test_a_rebuild_that_fails_raises_its_error() -> None:
    class Gone(FlakyShard):
        def rebuild(self, log: EpisodeLog, cause: BaseException) -> None:
            raise RuntimeError("shard 0/1 did not come back")

    env = ReplayingEnv(Gone({2}))
    env.reset(1, 0)
    with pytest.raises(RuntimeError, match="did not come back"):
        env.step(np.zeros(N))
    assert env.recoveries == 0
