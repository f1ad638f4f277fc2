"""wire_fast writes and reads the same bytes as the protobuf runtime, and survives junk."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from skurl.rpc.codec import ALLOWED_DTYPES, decode_batch, encode_into
from skurl.rpc.errors import WireError
from skurl.rpc.gen import skurl_pb2 as pb
from skurl.rpc.wire_fast import decode_reply, encode_reply

arrays = st.dictionaries(
    keys=st.text(min_size=1, max_size=10).filter(str.isprintable),
    values=hnp.arrays(dtype=st.sampled_from(sorted(ALLOWED_DTYPES)),
                      shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5)),
    max_size=4,
)


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert list(a) == list(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape
        assert a[k].tobytes() == b[k].tobytes()


@settings(max_examples=200, deadline=None, derandomize=True)
@given(obs=arrays, result=arrays, done=st.booleans(), day=st.integers(0, 2**31 - 1))
def test_fast_bytes_parse_with_protobuf_and_back(obs, result, done, day) -> None:  # type: ignore[no-untyped-def]
    data = encode_reply({1: obs, 2: result}, {3: int(done), 4: day})
    reply = pb.StepReply.FromString(data)
    assert reply.done == done and reply.day == day
    _same(decode_batch(reply.obs), obs)
    _same(decode_batch(reply.result), result)
    # and the runtime's own serialization reads back through the fast path
    built = pb.StepReply(done=done, day=day)
    encode_into(built.obs, obs)
    encode_into(built.result, result)
    batches, scalars = decode_reply(built.SerializeToString())
    _same(batches.get(1, {}), obs)
    _same(batches.get(2, {}), result)
    assert scalars.get(3, 0) == int(done) and scalars.get(4, 0) == day


def test_non_contiguous_and_big_endian_arrays_are_written_in_c_order() -> None:
    a = np.arange(12, dtype=">i8").reshape(3, 4).T
    (got,) = decode_reply(encode_reply({1: {"a": a}}, {}))[0][1].values()
    assert got.dtype == np.int64 and np.array_equal(got, a)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(junk=st.binary(max_size=300))
def test_junk_bytes_raise_wire_error_or_parse(junk: bytes) -> None:
    with contextlib.suppress(WireError):  # anything else (IndexError, ...) fails the test
        decode_reply(junk)


def test_truncated_reply_is_a_wire_error() -> None:
    data = encode_reply({1: {"features": np.ones((10, 3), np.float32)}}, {2: 5})
    for cut in (1, 7, len(data) // 2, len(data) - 1):
        with pytest.raises(WireError):
            decode_reply(data[:cut])


def test_inconsistent_tensor_is_a_wire_error() -> None:
    bad = pb.StepReply()
    bad.obs.tensors.add(name="x", dtype="float64", shape=[3], data=b"\0" * 16)
    with pytest.raises(WireError, match="16 bytes"):
        decode_reply(bad.SerializeToString())
