"""Lean EnvService replies (the collector's path): bit-identical features, today's forecast,
reward and metric sums against the in-process env; fewer bytes; the delta's safety checks."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import numpy as np
import pytest

from skurl.buffer.obs_delta import FeatureDeltaEncoder, decode_days, encode_days
from skurl.catalog import load_catalog
from skurl.catalog.schema import Catalog
from skurl.config import RpcConfig, SimConfig, load_config
from skurl.rpc.codec import encode_batch
from skurl.rpc.env_client import RemoteEnv
from skurl.rpc.env_server import EnvServer, serve_env
from skurl.rpc.env_wire import METRIC_NAMES, column_index
from skurl.rpc.errors import RequestRejectedError, WireError
from skurl.rpc.feature_delta import FeatureDeltaDecoder
from skurl.rpc.gen import skurl_pb2 as pb
from skurl.rpc.gen import skurl_pb2_grpc as pb_grpc
from skurl.rpc.options import channel_options
from skurl.sim.api import ObsSchema
from skurl.sim.env import VectorEnv

N = 300
DAYS = 6
RPC = RpcConfig(timeout_s=30.0)


@pytest.fixture(scope="module")
def setup() -> tuple[Catalog, SimConfig]:
    cfg = load_config(None, [f"catalog.skus={N}", "catalog.seed=3", f"sim.days={DAYS}",
                             "sim.threads=1"])
    return load_catalog(cfg.catalog), cfg.sim


@pytest.fixture(scope="module")
def server(setup: tuple[Catalog, SimConfig]) -> Iterator[EnvServer]:
    srv = serve_env(setup[0], setup[1], RPC, max_sessions=4)
    yield srv
    srv.stop(0)


def orders_of(day: int, forecast: np.ndarray) -> np.ndarray:
    rng = np.random.default_rng(day)
    return np.round(forecast[:, 0] * rng.uniform(0.0, 3.0, forecast.shape[0]))


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint32)


def test_lean_episode_is_bit_identical_to_in_process(setup, server) -> None:
    catalog, sim = setup
    local = VectorEnv(catalog, sim)
    with RemoteEnv(server.address, RPC, lean=True) as remote:
        want, got = local.reset(7, 2), remote.reset(7, 2)
        np.testing.assert_array_equal(bits(got.features), bits(want.features))
        for day in range(DAYS):
            orders = orders_of(day, want.raw.forecast)
            np.testing.assert_array_equal(got.raw.forecast[:, 0], want.raw.forecast[:, 0])
            w, g = local.step(orders), remote.step(orders)
            np.testing.assert_array_equal(bits(g.obs.features), bits(w.obs.features))
            np.testing.assert_array_equal(g.reward, w.reward)
            assert g.done == w.done and g.obs.raw.day == w.obs.raw.day
            sums = remote.metric_sums
            assert sums is not None and list(sums) == list(METRIC_NAMES)
            assert list(sums.values()) == w.metrics.sums().tolist()
            for name in METRIC_NAMES:
                assert sums[name] == pytest.approx(getattr(w.metrics, name).sum(dtype=np.float64))
            assert np.isnan(g.metrics.demand).all()  # per-SKU metrics are not sent
            want, got = w.obs, g.obs
            with pytest.raises(ValueError, match="read-only"):
                got.features[0] = -1  # the next delta's base cannot be written by a caller


def test_lean_replies_with_raw_carry_the_raw_state_bit_for_bit(setup, server) -> None:
    """What the cover grid reads (modes/decoupled/remote_grid.py): on hand, pipeline, backlog and the
    whole forecast window, equal to the in-process env's every day; features as lean."""
    catalog, sim = setup
    local = VectorEnv(catalog, sim)
    with RemoteEnv(server.address, RPC, lean=True, raw=True) as remote:
        want, got = local.reset(5, 1), remote.reset(5, 1)
        for day in range(DAYS + 1):
            np.testing.assert_array_equal(bits(got.features), bits(want.features))
            for name in ("on_hand", "pipeline", "backlog", "forecast"):
                w, g = getattr(want.raw, name), getattr(got.raw, name)
                assert g.dtype == w.dtype and g.shape == w.shape, name
                np.testing.assert_array_equal(g, w, err_msg=name)
            assert got.raw.day == want.raw.day
            if day == DAYS:
                break
            orders = orders_of(day, want.raw.forecast)
            want, got = local.step(orders).obs, remote.step(orders).obs
    with pytest.raises(ValueError, match="lean=True"):
        RemoteEnv(server.address, RPC, raw=True)


def test_lean_reply_is_much_smaller(server) -> None:
    channel = grpc.insecure_channel(server.address, options=channel_options(RPC))
    stub = pb_grpc.EnvServiceStub(channel)
    sizes = {}
    try:
        for lean in (False, True):
            env_id = f"size-{lean}"
            obs = stub.Reset(pb.ResetRequest(env_id=env_id, seed=1, lean=lean))
            reply = stub.Step(pb.StepRequest(env_id=env_id, lean=lean, orders=encode_batch(
                {"orders": np.ones(N)})))
            sizes[lean] = reply.ByteSize()
            assert {t.name for t in reply.obs.tensors} >= ({"features_mask"} if lean else {"features"})
            stub.Close(pb.CloseRequest(env_id=env_id))
            assert obs.ByteSize() > 0
    finally:
        channel.close()
    assert sizes[True] * 5 < sizes[False], sizes


def test_step_must_match_the_resets_lean_flag(server) -> None:
    channel = grpc.insecure_channel(server.address, options=channel_options(RPC))
    stub = pb_grpc.EnvServiceStub(channel)
    try:
        stub.Reset(pb.ResetRequest(env_id="mixed", seed=1, lean=True))
        with pytest.raises(grpc.RpcError) as info:
            stub.Step(pb.StepRequest(env_id="mixed", lean=False,
                                     orders=encode_batch({"orders": np.ones(N)})))
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "lean" in info.value.details()
        stub.Close(pb.CloseRequest(env_id="mixed"))
    finally:
        channel.close()


def test_lean_env_in_a_wider_schema(setup, server) -> None:
    catalog, sim = setup
    own = VectorEnv(catalog, sim).schema
    wide = ObsSchema(fields=tuple((name, w + (2 if k % 3 == 0 else 0))
                                  for k, (name, w) in enumerate(own.fields)))
    cols = column_index(own, wide)
    local = VectorEnv(catalog, sim)
    with RemoteEnv(server.address, RPC, lean=True, schema=wide) as remote:
        assert remote.schema == wide
        want, got = local.reset(3, 0), remote.reset(3, 0)
        for day in range(3):
            assert got.features.shape == (N, wide.dim)
            np.testing.assert_array_equal(got.features[:, cols], want.features)
            extra = np.ones(wide.dim, bool)
            extra[cols] = False
            assert not got.features[:, extra].any()
            orders = orders_of(day, want.raw.forecast)
            want, got = local.step(orders).obs, remote.step(orders).obs
    with pytest.raises(ValueError, match="lean"):
        RemoteEnv(server.address, RPC, schema=wide)


def test_decoder_refuses_a_delta_against_another_day() -> None:
    rng = np.random.default_rng(0)
    enc, dec = FeatureDeltaEncoder(20, 7), FeatureDeltaDecoder(20, 7, 7)
    day0 = rng.standard_normal((20, 7)).astype(np.float32)
    np.testing.assert_array_equal(dec.apply(enc.encode(day0, 0), 0), day0)
    day1 = day0.copy()
    day1[3, 2], day1[0, 0] = -0.0, np.float32(5)  # -0.0 differs from 0.0 in its bits only
    lost = enc.encode(day1, 1)  # a reply that never reaches the client
    day2 = day1.copy()
    day2[19, 6] = 1
    with pytest.raises(WireError, match="day 1"):
        dec.apply(enc.encode(day2, 2), 2)
    assert lost["features_base"][0] == 0
    enc.reset()
    dec2 = FeatureDeltaDecoder(20, 7, 7)
    got = dec2.apply(enc.encode(day2, 0), 0)
    np.testing.assert_array_equal(bits(got), bits(day2))


def test_decoder_refuses_values_that_do_not_fit_the_mask() -> None:
    enc, dec = FeatureDeltaEncoder(4, 3), FeatureDeltaDecoder(4, 3, 3)
    arrays = enc.encode(np.ones((4, 3), np.float32), 0)
    short = dict(arrays, features_values=arrays["features_values"][:-1])
    with pytest.raises(WireError, match="disagree"):
        dec.apply(short, 0)
    with pytest.raises(WireError, match="features_mask"):
        dec.apply(dict(arrays, features_mask=arrays["features_mask"][:1]), 0)


def test_lean_session_survives_a_rejected_step(setup, server) -> None:
    catalog, sim = setup
    local = VectorEnv(catalog, sim)
    with RemoteEnv(server.address, RPC, lean=True) as remote:
        want = local.reset(5, 1)
        remote.reset(5, 1)
        with pytest.raises(RequestRejectedError):
            remote.step(np.full(N, np.nan))
        orders = orders_of(0, want.raw.forecast)
        np.testing.assert_array_equal(bits(remote.step(orders).obs.features),
                                      bits(local.step(orders).obs.features))


def test_rollout_obs_pack_round_trip_is_bitwise() -> None:
    rng = np.random.default_rng(1)
    obs = np.where(rng.random((5, 40, 9)) < 0.7, 0.0, rng.standard_normal((5, 40, 9))).astype(np.float32)
    obs[2, 3, 4] = -0.0
    obs[3] = obs[2]  # a day with no change at all
    packed = encode_days(obs)
    assert sum(a.nbytes for a in packed.values()) < obs.nbytes / 2
    np.testing.assert_array_equal(bits(decode_days(packed, 40, 9)), bits(obs))
    bad = dict(packed, obs_counts=packed["obs_counts"] + np.array([1, -1, 0, 0, 0]))
    with pytest.raises(ValueError, match="disagree"):
        decode_days(bad, 40, 9)
    with pytest.raises(ValueError, match="expected"):
        decode_days(packed, 41, 9)


@pytest.mark.parametrize("select", [[], [0], [39], [3, 4, 5, 17, 38, 39], list(range(40))])
def test_decoding_some_rows_equals_those_rows_of_the_full_decode(select: list[int]) -> None:
    # 9 columns: rows start at every bit offset within a byte, so the skipped-bit count
    # crosses byte boundaries in every way.
    rng = np.random.default_rng(2)
    obs = np.where(rng.random((4, 40, 9)) < 0.6, 0.0, rng.standard_normal((4, 40, 9))).astype(np.float32)
    obs[2] = obs[1]
    packed = encode_days(obs)
    rows = np.array(select, np.int64)
    np.testing.assert_array_equal(bits(decode_days(packed, 40, 9, rows)), bits(obs[:, rows]))
    bad = dict(packed, obs_counts=packed["obs_counts"] + np.array([1, -1, 0, 0]))
    with pytest.raises(ValueError, match="disagree"):
        decode_days(bad, 40, 9, rows)


@pytest.mark.parametrize("select", [[5, 3], [2, 2], [-1], [40]])
def test_rows_to_decode_must_be_sorted_distinct_and_in_range(select: list[int]) -> None:
    packed = encode_days(np.zeros((2, 40, 9), np.float32))
    with pytest.raises(ValueError, match="sorted, distinct"):
        decode_days(packed, 40, 9, np.array(select, np.int64))


def test_decoded_features_are_read_only_and_track_the_deltas() -> None:
    """The decoder hands out its held matrix (no copy): a caller cannot write into the
    next delta's base, and each apply shows that day's features."""
    rng = np.random.default_rng(1)
    enc, dec = FeatureDeltaEncoder(6, 4), FeatureDeltaDecoder(6, 4, 4)
    for day in range(3):
        want = rng.standard_normal((6, 4)).astype(np.float32)
        got = dec.apply(enc.encode(want, day), day)
        np.testing.assert_array_equal(bits(got), bits(want))
        with pytest.raises(ValueError, match="read-only"):
            got[0, 0] = 1.0
