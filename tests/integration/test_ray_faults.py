"""Fault tolerance of --mode ray on a local Ray instance: a simulator worker killed in the
middle of an episode is restarted (or replaced) and its shard rebuilt by replaying the
episode's orders, with the rollout bit-identical to an undisturbed one; a SKU whose
parameters make its step fail is isolated and reported by id while its worker goes on."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

ray = pytest.importorskip("ray")

from skurl.catalog import load_catalog  # noqa: E402
from skurl.catalog.partition import partition  # noqa: E402
from skurl.catalog.schema import Catalog  # noqa: E402
from skurl.collect.collector import Collector  # noqa: E402
from skurl.config import Config, RayConfig, load_config  # noqa: E402
from skurl.modes.ray.actors import ShardSpec, WorkerSlot, ray_shard_env, start_collector  # noqa: E402
from skurl.modes.ray.cluster import start_ray  # noqa: E402
from skurl.policy.learned import grid_for  # noqa: E402
from skurl.policy.nets import ActorCritic  # noqa: E402
from skurl.rpc.multi_shard import MultiShardEnv  # noqa: E402
from skurl.sim.api import Env, StepResult  # noqa: E402
from skurl.sim.env import VectorEnv  # noqa: E402
from skurl.sim.layout import catalog_widths  # noqa: E402
from skurl.sim.replaying import ReplayingEnv  # noqa: E402
from skurl.sync.ray import RayWeights, start_weight_slot  # noqa: E402

DAYS, KILL_AFTER, TIMEOUT_S = 14, 5, 120.0
BAD_ROW, BAD_TREND = 17, 3.0  # mean = base * e^(3 t) passes 2^50 on day 12: FAIL_MEAN mid-episode


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Iterator[None]:
    started = start_ray(RayConfig(num_cpus=2))
    yield
    if started:
        ray.shutdown()


@pytest.fixture(scope="module")
def cfg() -> Config:
    return load_config(None, ["catalog.skus=240", "catalog.seed=3", f"sim.days={DAYS}", "sim.threads=1",
                              "policy.hidden=[16,16]", "collect.infer_dtype=float32", "train.torch_threads=1",
                              "policy.actions.kind=units"])  # multiplier orders of the exploding SKU would exceed 1e9


@pytest.fixture(scope="module")
def catalog(cfg: Config) -> Catalog:
    cat = load_catalog(cfg.catalog)
    cat.trend[BAD_ROW] = BAD_TREND  # passes load-time checks, fails at run time
    return cat


def model_for(env: Env, cfg: Config) -> ActorCritic:
    torch.manual_seed(0)
    return ActorCritic(env.schema.dim, grid_for(cfg).n, cfg.policy.hidden)


def collect(env: Env, cfg: Config, model: ActorCritic) -> Any:
    collector = Collector(env, model, grid_for(cfg), chunk=64, infer_dtype="float32")
    return collector.collect(seed=7, episode=2, version=0)


def ray_shards(catalog: Catalog, cfg: Config, max_restarts: int) -> tuple[list[WorkerSlot], list[ReplayingEnv], list[np.ndarray]]:
    parts = partition(catalog, 2)
    slots, envs = [], []
    for w, rows in enumerate(parts):
        slot = WorkerSlot(w, RayConfig(cpus_per_worker=0.5, max_restarts=max_restarts, get_timeout_s=TIMEOUT_S), 1)
        sub = catalog.subset(rows)
        ref = ray.put(sub)
        widths = catalog_widths(catalog)  # the run's, as every shard is built
        schema = ray.get(slot.handle.add_env.remote("k", ref, cfg.sim, widths), timeout=TIMEOUT_S)
        slots.append(slot)
        envs.append(ray_shard_env(slot, "k", ref, sub.sku_id, schema, cfg.sim, TIMEOUT_S, widths=widths))
    return slots, envs, parts


class KillOnce:
    """An Env wrapper that kills a worker actor right after day `after` was stepped."""

    def __init__(self, env: MultiShardEnv, slot: WorkerSlot, after: int) -> None:
        self.env, self.slot, self.after, self.day = env, slot, after, 0
        self.num_skus, self.schema, self.sku_ids = env.num_skus, env.schema, env.sku_ids

    def reset(self, seed: int, episode: int = 0) -> Any:
        self.day = 0
        return self.env.reset(seed, episode)

    def step(self, orders: np.ndarray) -> StepResult:
        result = self.env.step(orders)
        self.day += 1
        if self.day == self.after:
            ray.kill(self.slot.handle, no_restart=False)  # Ray may restart it (max_restarts)
        return result

    def info(self) -> dict[str, Any]:
        return self.env.info()

    def close(self) -> None:
        self.env.close()


@pytest.mark.parametrize("max_restarts", [1, 0], ids=["restarted", "replaced"])
def test_worker_killed_mid_episode_is_rebuilt_by_replay(catalog: Catalog, cfg: Config, max_restarts: int) -> None:
    local = VectorEnv(catalog, cfg.sim)
    model = model_for(local, cfg)
    expected = collect(local, cfg, model)

    slots, envs, parts = ray_shards(catalog, cfg, max_restarts)
    pid = ray.get(slots[0].handle.ping.remote(), timeout=TIMEOUT_S)
    merged = MultiShardEnv(envs, parts)
    got = collect(KillOnce(merged, slots[0], KILL_AFTER), cfg, model)

    assert envs[0].recoveries == 1 and envs[1].recoveries == 0
    assert slots[0].replacements == (1 if max_restarts == 0 else 0)
    assert ray.get(slots[0].handle.ping.remote(), timeout=TIMEOUT_S) != pid  # a new process
    assert got.transitions == DAYS * len(catalog)  # none lost, none duplicated
    for name, arr in expected.arrays().items():
        assert np.array_equal(getattr(got, name), arr), name
    for slot in slots:
        slot.kill()


def test_a_worker_restarted_before_a_new_client_calls_is_rebuilt_for_it(catalog: Catalog, cfg: Config) -> None:
    """A worker restarted by Ray (its node lost, say) while no task of this client was in
    flight answers a missing shard; the client rebuilds it instead of failing (the
    replacement collector of tests/integration/test_ray_multinode.py meets exactly this)."""
    slots, envs, _ = ray_shards(catalog, cfg, max_restarts=1)
    expected = envs[0].info()
    pid = ray.get(slots[0].handle.ping.remote(), timeout=TIMEOUT_S)
    ray.kill(slots[0].handle, no_restart=False)
    new_pid = pid
    deadline = time.monotonic() + TIMEOUT_S
    while new_pid == pid and time.monotonic() < deadline:
        # ray.kill returns before the process dies: a ping may still reach the old worker, or
        # fail while Ray restarts it (ActorUnavailableError, or ActorDiedError in flight)
        with contextlib.suppress(ray.exceptions.ActorUnavailableError, ray.exceptions.RayActorError):
            new_pid = ray.get(slots[0].alive().ping.remote(), timeout=TIMEOUT_S)
        if new_pid == pid:
            time.sleep(0.1)
    assert new_pid != pid
    fresh = ray_shard_env(slots[0], "k", envs[0].catalog_ref, envs[0].sku_ids, envs[0].schema, cfg.sim, TIMEOUT_S,
                          widths=catalog_widths(catalog))
    assert fresh.info()["num_skus"] == expected["num_skus"] and fresh.recoveries == 1
    for slot in slots:
        slot.kill()


def test_failing_sku_is_isolated_and_reported_by_id(catalog: Catalog, cfg: Config) -> None:
    slots, envs, parts = ray_shards(catalog, cfg, max_restarts=1)
    pids = ray.get([s.handle.ping.remote() for s in slots], timeout=TIMEOUT_S)
    weights_slot = start_weight_slot()
    model = model_for(VectorEnv(catalog, cfg.sim), cfg)
    RayWeights(weights_slot, "ppo", TIMEOUT_S).publish(0, model.state_dict())
    actor = start_collector("c0", cfg, weights_slot)
    specs = [ShardSpec(s, e.catalog_ref, e.sku_ids, e.schema, catalog_widths(catalog), rows)
             for s, e, rows in zip(slots, envs, parts, strict=True)]
    assert ray.get(actor.add_env.remote("k", specs), timeout=TIMEOUT_S) == len(catalog)

    reply = ray.get(actor.collect.remote("k", 7, 2, 0), timeout=TIMEOUT_S)

    bad_id = int(catalog.sku_id[BAD_ROW])
    assert reply["failed_sku_ids"] == [bad_id]
    assert reply["recoveries"] == 0 and reply["stats"]["days"] == DAYS  # the episode went on
    rewards = reply["arrays"]["rewards"]
    assert rewards.shape == (DAYS, len(catalog)) and np.isfinite(rewards).all()
    healthy = np.ones(len(catalog), bool)
    healthy[BAD_ROW] = False
    assert np.abs(rewards[:, healthy]).sum() > 0
    assert ray.get([s.handle.ping.remote() for s in slots], timeout=TIMEOUT_S) == pids  # no worker died
    ray.kill(actor)
    for slot in slots:
        slot.kill()
