"""EnvService over real loopback sockets: status codes, sessions, limits, dead servers,
and MultiShardEnv over shards whose observation widths differ."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import grpc
import numpy as np
import pytest

from skurl.catalog import load_catalog
from skurl.catalog.schema import Catalog
from skurl.config import RpcConfig, SimConfig, load_config
from skurl.rpc.codec import encode_batch
from skurl.rpc.env_client import RemoteEnv
from skurl.rpc.env_server import EnvServer, serve_env
from skurl.rpc.errors import RequestRejectedError, ServerUnavailableError
from skurl.rpc.gen import skurl_pb2 as pb
from skurl.rpc.gen import skurl_pb2_grpc as pb_grpc
from skurl.rpc.multi_shard import MultiShardEnv
from skurl.rpc.options import channel_options
from skurl.sim.api import Env
from skurl.sim.env import VectorEnv

N = 50
DEADLINE = 30.0
RPC = RpcConfig(timeout_s=DEADLINE)


@pytest.fixture(scope="module")
def setup() -> tuple[Catalog, SimConfig]:
    cfg = load_config(None, [f"catalog.skus={N}", "catalog.seed=1", "sim.days=5", "sim.threads=1"])
    return load_catalog(cfg.catalog), cfg.sim


@pytest.fixture(scope="module")
def server(setup: tuple[Catalog, SimConfig]) -> Iterator[EnvServer]:
    srv = serve_env(setup[0], setup[1], RPC, max_sessions=4)
    yield srv
    srv.stop(0)


@pytest.fixture
def stub(server: EnvServer) -> Iterator[pb_grpc.EnvServiceStub]:
    channel = grpc.insecure_channel(server.address, options=channel_options(RPC))
    yield pb_grpc.EnvServiceStub(channel)
    channel.close()


def step_request(env_id: str, orders: np.ndarray) -> pb.StepRequest:
    return pb.StepRequest(env_id=env_id, orders=encode_batch({"orders": orders}))


def code_of(call, request) -> grpc.StatusCode:  # type: ignore[no-untyped-def]
    try:
        call(request, timeout=DEADLINE)
    except grpc.RpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def test_status_codes_for_each_mistake(stub: pb_grpc.EnvServiceStub) -> None:
    bad = grpc.StatusCode.INVALID_ARGUMENT
    # Unknown env id, malformed env id, and stepping a session never reset.
    assert code_of(stub.Step, step_request("nobody", np.zeros(N))) == bad
    assert code_of(stub.Step, step_request("bad id with spaces", np.zeros(N))) == bad
    assert code_of(stub.GetInfo, pb.InfoRequest(env_id="nobody")) == bad
    assert code_of(stub.GetInfo, pb.InfoRequest(env_id="s1", open=True)) == grpc.StatusCode.OK
    assert code_of(stub.Step, step_request("s1", np.zeros(N))) == grpc.StatusCode.FAILED_PRECONDITION
    assert code_of(stub.Reset, pb.ResetRequest(env_id="s1", seed=-1)) == bad
    assert code_of(stub.Reset, pb.ResetRequest(env_id="s1", seed=1)) == grpc.StatusCode.OK
    # Orders: wrong shape, dtype, NaN, negative, too large, wrong name.
    assert code_of(stub.Step, step_request("s1", np.zeros(N - 1))) == bad
    assert code_of(stub.Step, step_request("s1", np.zeros(N, bool))) == bad
    assert code_of(stub.Step, step_request("s1", np.full(N, np.nan))) == bad
    assert code_of(stub.Step, step_request("s1", np.full(N, -1.0))) == bad
    assert code_of(stub.Step, step_request("s1", np.full(N, 1e12))) == bad
    wrong_name = pb.StepRequest(env_id="s1", orders=encode_batch({"order": np.zeros(N)}))
    assert code_of(stub.Step, wrong_name) == bad
    # None of that broke the session: five good days, then the episode is over.
    for _ in range(5):
        assert code_of(stub.Step, step_request("s1", np.ones(N))) == grpc.StatusCode.OK
    assert code_of(stub.Step, step_request("s1", np.ones(N))) == grpc.StatusCode.FAILED_PRECONDITION
    assert stub.Close(pb.CloseRequest(env_id="s1"), timeout=DEADLINE).closed
    assert not stub.Close(pb.CloseRequest(env_id="s1"), timeout=DEADLINE).closed
    assert code_of(stub.Step, step_request("s1", np.ones(N))) == bad  # closed = unknown


def test_error_details_say_what_was_wrong(stub: pb_grpc.EnvServiceStub) -> None:
    stub.Reset(pb.ResetRequest(env_id="detail", seed=0), timeout=DEADLINE)
    orders = np.ones(N)
    orders[7] = np.nan
    with pytest.raises(grpc.RpcError) as info:
        stub.Step(step_request("detail", orders), timeout=DEADLINE)
    assert "orders[7]" in info.value.details() and "finite" in info.value.details()
    with pytest.raises(grpc.RpcError) as info:
        stub.Step(step_request("detail", np.ones(3)), timeout=DEADLINE)
    assert "shape [3]" in info.value.details() and f"[{N}]" in info.value.details()
    stub.Close(pb.CloseRequest(env_id="detail"), timeout=DEADLINE)


def test_sessions_are_independent(server: EnvServer, setup: tuple[Catalog, SimConfig]) -> None:
    with RemoteEnv(server.address, RPC) as a, RemoteEnv(server.address, RPC) as b:
        ref = VectorEnv(*setup)
        a.reset(1)
        ref.reset(1)
        b.reset(2)
        for _ in range(3):  # b's steps in between never touch a's state
            b.step(np.ones(N))
            ra, rr = a.step(np.ones(N)), ref.step(np.ones(N))
            np.testing.assert_array_equal(ra.reward, rr.reward)
            np.testing.assert_array_equal(ra.obs.features, rr.obs.features)


def test_sessions_stepped_concurrently_match_the_in_process_env(
        server: EnvServer, setup: tuple[Catalog, SimConfig]) -> None:
    def episode(env: Env, seed: int) -> list[np.ndarray]:
        obs, rewards = env.reset(seed), []
        for _ in range(5):
            result = env.step(np.maximum(np.round(obs.raw.forecast[:, 0] * 2), 0))
            obs = result.obs
            rewards.append(result.reward.copy())
        return rewards

    got: dict[int, list[np.ndarray]] = {}
    envs = {seed: RemoteEnv(server.address, RPC) for seed in (11, 12, 13)}
    threads = [threading.Thread(target=lambda s=seed: got.__setitem__(s, episode(envs[s], s)))
               for seed in envs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=DEADLINE * 5)
    for seed, env in envs.items():
        env.close()
        want = episode(VectorEnv(*setup), seed)
        assert len(got[seed]) == len(want)
        for a, b in zip(got[seed], want, strict=True):
            np.testing.assert_array_equal(a, b)


def test_sessions_are_capped_and_freed_on_close(setup: tuple[Catalog, SimConfig]) -> None:
    srv = serve_env(*setup, RPC, max_sessions=2)
    try:
        first, second = RemoteEnv(srv.address, RPC), RemoteEnv(srv.address, RPC)
        with pytest.raises(RequestRejectedError, match=r"RESOURCE_EXHAUSTED.*2 sessions") as info:
            RemoteEnv(srv.address, RPC)
        assert "max_message_mb" not in str(info.value)  # no size hint for a session cap
        first.close()
        with RemoteEnv(srv.address, RPC) as third:  # a closed session's place is free again
            assert third.reset(0).raw.day == 0
        second.close()
    finally:
        srv.stop(0)


def test_info_reports_shard_rows_and_sessions(server: EnvServer,
                                              setup: tuple[Catalog, SimConfig]) -> None:
    with RemoteEnv(server.address, RPC, env_id="collector-0") as env:
        env.reset(0)
        info = env.info()
        assert info["num_skus"] == N and info["remote"]["env_id"] == "collector-0"
        assert "collector-0" in info["remote"]["sessions"]
        np.testing.assert_array_equal(env.sku_ids, setup[0].sku_id)
        np.testing.assert_array_equal(env.catalog_rows, np.arange(N))
        assert env.shard == (0, 1) and env.days == 5


def test_over_limit_message_is_rejected_and_the_server_keeps_serving(
        setup: tuple[Catalog, SimConfig]) -> None:
    small = RpcConfig(max_message_mb=1, timeout_s=DEADLINE)
    catalog = load_catalog(load_config(None, ["catalog.kind=uniform"]).catalog, skus=12_000)
    srv = serve_env(catalog, setup[1], small)
    try:
        # A client allowed to send more than the server accepts: 2 MiB of orders.
        big = RpcConfig(max_message_mb=64, timeout_s=DEADLINE)
        channel = grpc.insecure_channel(srv.address, options=channel_options(big))
        stub = pb_grpc.EnvServiceStub(channel)
        huge = step_request("x", np.zeros(2 * 2**20 // 8 + 10))
        assert code_of(stub.Step, huge) in (grpc.StatusCode.RESOURCE_EXHAUSTED,
                                            grpc.StatusCode.INVALID_ARGUMENT)
        # Replies over the limit: 12,000 SKUs' observation is > 1 MiB.
        assert code_of(stub.Reset, pb.ResetRequest(env_id="x", seed=0)) == \
            grpc.StatusCode.RESOURCE_EXHAUSTED
        with pytest.raises(grpc.RpcError) as info:
            stub.Reset(pb.ResetRequest(env_id="x", seed=0), timeout=DEADLINE)
        assert "rpc.max_message_mb" in info.value.details()
        # And it still answers.
        assert stub.GetInfo(pb.InfoRequest(), timeout=DEADLINE).num_skus == 12_000
        channel.close()
        with RemoteEnv(srv.address, small) as env, \
                pytest.raises(RequestRejectedError, match=r"rpc\.max_message_mb"):
            env.reset(0)
        # The client's own send limit: the same clear error, before anything is sent.
        with RemoteEnv(srv.address, small) as env, \
                pytest.raises(RequestRejectedError, match=r"RESOURCE_EXHAUSTED.*max_message_mb"):
            env.step(np.zeros(env.num_skus + 2**18))
    finally:
        srv.stop(0)


def test_killed_server_is_a_clear_error_naming_the_address(
        setup: tuple[Catalog, SimConfig]) -> None:
    srv = serve_env(*setup, RPC)
    env = RemoteEnv(srv.address, RPC)
    env.reset(0)
    srv.stop(0)
    with pytest.raises(ServerUnavailableError) as info:
        env.step(np.ones(N))
    message = str(info.value)
    assert srv.address in message and "UNAVAILABLE" in message and "\n" not in message
    env.close()  # closing a client of a dead server is fine


def test_unreachable_address_fails_fast_with_its_name() -> None:
    with pytest.raises(ServerUnavailableError, match=r"127\.0\.0\.1:1 "):
        RemoteEnv("127.0.0.1:1", RPC, connect_timeout_s=0.5)


def test_step_time_goes_into_the_prometheus_histogram(server: EnvServer) -> None:
    metrics = pytest.importorskip("skurl.telemetry.metrics")
    hist = metrics.get_metrics().sim_step_duration_seconds
    before = _count(hist)
    with RemoteEnv(server.address, RPC) as env:
        env.reset(0)
        env.step(np.ones(N))
        env.step(np.ones(N))
    assert _count(hist) == before + 2


def _count(hist) -> float:  # type: ignore[no-untyped-def]
    for metric in hist.collect():
        for sample in metric.samples:
            if sample.name.endswith("_count"):
                return sample.value
    return 0.0


def test_multi_shard_pads_narrower_shards_to_the_whole_catalog_layout(
        setup: tuple[Catalog, SimConfig]) -> None:
    """Shards with different lead times and shelf lives (so different pipeline, expiring and
    forecast widths) still give the whole-catalog trajectory through the wire."""
    catalog = setup[0].subset(np.arange(N))
    catalog.group[:] = -1  # no groups: any split is group-closed
    short = np.flatnonzero((catalog.lead_time + catalog.delay_max <= 5) & (catalog.shelf_life == 0))
    long = np.setdiff1d(np.arange(N), short)
    assert short.size and long.size
    servers = [serve_env(catalog.subset(r), setup[1], RPC, catalog_rows=r) for r in (short, long)]
    envs = [RemoteEnv(s.address, RPC) for s in servers]
    assert envs[0].schema != envs[1].schema  # the point of the test
    whole = VectorEnv(catalog, setup[1])
    horizons = [VectorEnv(catalog.subset(r), setup[1]).layout.horizon for r in (short, long)]
    try:
        with MultiShardEnv(envs, [short, long]) as multi:
            assert multi.schema == whole.schema
            obs_m, obs_w = multi.reset(4), whole.reset(4)
            for _ in range(5):
                np.testing.assert_array_equal(obs_m.features, obs_w.features)
                np.testing.assert_array_equal(obs_m.raw.pipeline, obs_w.raw.pipeline)
                assert obs_m.raw.forecast.shape == obs_w.raw.forecast.shape
                for rows, width in zip((short, long), horizons, strict=True):
                    np.testing.assert_array_equal(obs_m.raw.forecast[rows, :width],
                                                  obs_w.raw.forecast[rows, :width])
                    assert (obs_m.raw.forecast[rows, width:] == 0).all()  # documented padding
                orders = np.maximum(obs_w.raw.forecast[:, 0] * 2 - obs_w.raw.on_hand, 0)
                rm, rw = multi.step(orders), whole.step(orders)
                np.testing.assert_array_equal(rm.reward, rw.reward)
                np.testing.assert_array_equal(rm.metrics.sales, rw.metrics.sales)
                obs_m, obs_w = rm.obs, rw.obs
    finally:
        for s in servers:
            s.stop(0)


def test_config_addresses_connect_and_a_collector_cannot_tell_the_difference(
        setup: tuple[Catalog, SimConfig]) -> None:
    """The PPO collector over two remote shards (deploy.sim_addresses) records exactly the
    rollout it records over one in-process VectorEnv."""
    torch = pytest.importorskip("torch")
    from skurl.collect.collector import Collector
    from skurl.policy.actions import ActionGrid
    from skurl.policy.nets import ActorCritic
    from skurl.rpc.env_server import serve_shards
    from skurl.rpc.multi_shard import connect_sim_servers

    catalog, sim = setup
    servers = serve_shards(catalog, sim, RPC, 2)
    addresses = ",".join(s.address for s in servers)
    cfg = load_config(None, ["deploy.sim_servers=2", f"deploy.sim_addresses={addresses}",
                             "rpc.timeout_s=30"])
    local = VectorEnv(catalog, sim)
    torch.manual_seed(0)
    model = ActorCritic(local.schema.dim, cfg.policy.actions.n, (16,))
    grid = ActionGrid.from_config(cfg.policy.actions, sim.review_days)
    try:
        with connect_sim_servers(cfg, env_id="collector-0") as remote:
            rollouts = [Collector(env, model, grid, chunk=16, infer_dtype="float32")
                        .collect(seed=3, episode=1) for env in (local, remote)]
    finally:
        for s in servers:
            s.stop(0)
    want, got = (r.arrays() for r in rollouts)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
