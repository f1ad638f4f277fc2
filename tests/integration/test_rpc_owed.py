"""RawState.owed over gRPC (supply networks): a remote shard's owed, and two shards merged,
equal the in-process env's every day; without networks, or for a client that does not ask
(ResetRequest.owed unset: an older client), the replies are the ones sent before owed."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import numpy as np
import pytest

from skurl.catalog import load_catalog
from skurl.catalog.schema import Catalog
from skurl.config import RpcConfig, SimConfig, load_config
from skurl.rpc.codec import encode_batch
from skurl.rpc.env_client import RemoteEnv
from skurl.rpc.env_server import EnvServer, serve_env, serve_shards
from skurl.rpc.gen import skurl_pb2 as pb
from skurl.rpc.gen import skurl_pb2_grpc as pb_grpc
from skurl.rpc.multi_shard import MultiShardEnv
from skurl.rpc.options import channel_options
from skurl.sim.api import Env
from skurl.sim.env import VectorEnv

pytestmark = pytest.mark.slow  # about 100 s here, mostly compiling the network kernels

DAYS = 8
RPC = RpcConfig(timeout_s=30.0)
NETWORK = ["catalog.kind=synthetic", "catalog.synthetic.network=dc", "catalog.skus=120", "catalog.seed=5",
           f"sim.days={DAYS}", "sim.threads=1", "sim.backorders=true"]


def setup(*overrides: str) -> tuple[Catalog, SimConfig]:
    cfg = load_config(None, list(overrides))
    return load_catalog(cfg.catalog), cfg.sim


@pytest.fixture(scope="module")
def network() -> tuple[Catalog, SimConfig]:
    catalog, sim = setup(*NETWORK)
    assert catalog.has_network
    return catalog, sim


@pytest.fixture(scope="module")
def server(network: tuple[Catalog, SimConfig]) -> Iterator[EnvServer]:
    srv = serve_env(*network, RPC, max_sessions=4)
    yield srv
    srv.stop(0)


def big_orders(day: int, forecast: np.ndarray) -> np.ndarray:
    """Orders well above the forecast, so DCs run short and owe their stores."""
    rng = np.random.default_rng(day)
    return np.round(forecast[:, 0] * rng.uniform(2.0, 6.0, forecast.shape[0]))


def assert_owed_as_local(local: Env, remote: Env) -> int:
    """Steps both envs alike; owed equal every day; returns the units owed over the episode."""
    want, got = local.reset(4, 1), remote.reset(4, 1)
    total = 0
    for day in range(DAYS + 1):
        assert want.raw.owed is not None and got.raw.owed is not None
        assert got.raw.owed.dtype == np.int64
        np.testing.assert_array_equal(got.raw.owed, want.raw.owed, err_msg=f"day {day}")
        np.testing.assert_array_equal(got.raw.on_hand, want.raw.on_hand, err_msg=f"day {day}")
        total += int(want.raw.owed.sum())
        if day == DAYS:
            break
        orders = big_orders(day, want.raw.forecast)
        want, got = local.step(orders).obs, remote.step(orders).obs
    return total


@pytest.mark.parametrize("lean", [False, True])
def test_a_remote_network_shard_carries_owed_as_the_local_env(network, server, lean: bool) -> None:
    with RemoteEnv(server.address, RPC, lean=lean, raw=lean) as remote:
        assert assert_owed_as_local(VectorEnv(*network), remote) > 0  # something was owed


def test_two_network_shards_merge_their_owed(network) -> None:
    catalog, sim = network
    servers = serve_shards(catalog, sim, RPC, 2)
    try:
        with MultiShardEnv.from_addresses([s.address for s in servers], RPC, lean=True, raw=True) as merged:
            assert assert_owed_as_local(VectorEnv(catalog, sim), merged) > 0
    finally:
        for s in servers:
            s.stop(0)


def obs_tensors(address: str, owed: bool, lean: bool) -> list[tuple[str, int]]:
    """(name, bytes) of each observation tensor of a Reset and a Step reply, asked directly."""
    channel = grpc.insecure_channel(address, options=channel_options(RPC))
    stub = pb_grpc.EnvServiceStub(channel)
    env_id = f"owed-{owed}-{lean}"
    try:
        n = stub.GetInfo(pb.InfoRequest()).num_skus
        reset = stub.Reset(pb.ResetRequest(env_id=env_id, seed=1, lean=lean, raw=lean, owed=owed))
        step = stub.Step(pb.StepRequest(env_id=env_id, lean=lean, orders=encode_batch({"orders": np.ones(n)})))
        stub.Close(pb.CloseRequest(env_id=env_id))
    finally:
        channel.close()
    return [(t.name, len(t.data)) for reply in (reset, step) for t in reply.obs.tensors]


@pytest.mark.parametrize("lean", [False, True])
def test_owed_is_sent_only_when_asked_and_only_on_networks(server, lean: bool) -> None:
    asked, old = obs_tensors(server.address, True, lean), obs_tensors(server.address, False, lean)
    assert ("owed" in dict(asked)) and "owed" not in dict(old)  # an older client gets what it knows
    assert [t for t in asked if t[0] != "owed"] == old
    plain = serve_env(*setup("catalog.skus=50", "catalog.seed=3", "sim.days=4", "sim.threads=1"), RPC)
    try:
        assert obs_tensors(plain.address, True, lean) == obs_tensors(plain.address, False, lean)
        with RemoteEnv(plain.address, RPC, lean=lean, raw=lean) as remote:
            assert remote.reset(1, 0).raw.owed is None
    finally:
        plain.stop(0)
