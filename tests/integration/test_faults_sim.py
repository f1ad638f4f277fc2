"""A sim server killed (SIGKILL) mid-episode: the launcher's supervisor restarts it on its
port, the collector's shard env reconnects and replays the episode's orders from day 0, and
the episode goes on exactly as the in-process simulator runs it: no day lost or repeated."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from skurl.catalog import load_catalog
from skurl.config import Config, load_config
from skurl.modes.decoupled.shard_envs import collector_env
from skurl.modes.decoupled.supervisor import LocalCluster
from skurl.rpc.bench import order_up_to
from skurl.rpc.errors import ServerUnavailableError
from skurl.sim.env import VectorEnv

DAYS, KILL_DAY = 10, 4
CFG = ["catalog.skus=300", f"sim.days={DAYS}", "sim.threads=1", "deploy.sim_servers=2",
       "deploy.collectors=1", "sync.backend=grpc", "deploy.reconnect_timeout_s=120"]


def config(*extra: str) -> Config:
    return load_config(None, CFG + list(extra))


@pytest.fixture
def sims(tmp_path: Path) -> Iterator[LocalCluster]:
    cluster = LocalCluster(config(), tmp_path, None)
    try:
        cluster.start_sims()
        cluster.supervise()
        yield cluster
    finally:
        cluster.stop()


def test_sigkilled_sim_server_is_restarted_and_the_episode_replayed_exactly(
        sims: LocalCluster) -> None:
    cfg = config()
    addresses = [s.info["address"] for s in sims.sims]
    env, shard_envs = collector_env(addresses, [0, 1], cfg.rpc, cfg.deploy.reconnect_timeout_s)
    catalog = load_catalog(cfg.catalog)
    reference = VectorEnv(catalog, cfg.sim)
    try:
        assert env.schema == reference.schema and env.num_skus == reference.num_skus
        # The collector's rows run shard by shard: the reference's rows in that order.
        rows = np.argsort(catalog.sku_id)[np.searchsorted(np.sort(catalog.sku_id), env.sku_ids)]
        assert sorted(rows) == list(range(len(catalog)))
        ref_obs, obs = reference.reset(3, 7), env.reset(3, 7)
        np.testing.assert_array_equal(obs.features, ref_obs.features[rows])
        sales = 0.0
        for day in range(DAYS):
            if day == KILL_DAY:  # mid-episode, between two steps of the collector
                victim = sims.sims[1]
                assert victim.proc is not None
                os.kill(victim.proc.pid, signal.SIGKILL)
                victim.proc.wait()
            orders = order_up_to(ref_obs)
            ref = reference.step(orders)
            got = env.step(orders[rows])
            np.testing.assert_array_equal(got.obs.features, ref.obs.features[rows], err_msg=f"day {day}")
            np.testing.assert_array_equal(got.reward, ref.reward[rows], err_msg=f"day {day}")
            sales += float(ref.metrics.sales.sum())
            assert env.totals["sales"] == sales  # lean replies: the servers' sums
            assert got.done == ref.done
            ref_obs = ref.obs
        assert got.done
        assert [e.recoveries for e in shard_envs] == [0, 1]
        assert [c.restarts for c in sims.sims] == [0, 1]
        # The next episode runs on the restarted server as on any other.
        np.testing.assert_array_equal(env.reset(4, 0).features, reference.reset(4, 0).features[rows])
    finally:
        env.close()


def test_a_server_that_does_not_come_back_fails_with_one_line(sims: LocalCluster) -> None:
    cfg = config("deploy.reconnect_timeout_s=1.5", "deploy.max_restarts=0")
    sims.cfg = cfg  # no restarts: the server stays dead
    addresses = [s.info["address"] for s in sims.sims]
    env, _ = collector_env(addresses, [0, 1], cfg.rpc, cfg.deploy.reconnect_timeout_s)
    try:
        obs = env.reset(0, 0)
        victim = sims.sims[0]
        assert victim.proc is not None
        os.kill(victim.proc.pid, signal.SIGKILL)
        victim.proc.wait()
        with pytest.raises(ServerUnavailableError, match=r"did not come back within .*=1.5 s"):
            env.step(np.zeros(obs.features.shape[0]))
    finally:
        env.close()
