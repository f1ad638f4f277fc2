"""Tensor codec: round trips and strict validation of what comes off the wire."""

from __future__ import annotations

import numpy as np
import pytest

from skurl.rpc.codec import (
    ALLOWED_DTYPES,
    TensorSpec,
    decode_batch,
    decode_tensor,
    encode_batch,
    encode_tensor,
)
from skurl.rpc.errors import WireError
from skurl.rpc.gen import skurl_pb2 as pb


@pytest.mark.parametrize("dtype", list(ALLOWED_DTYPES))
@pytest.mark.parametrize("shape", [(0,), (5,), (3, 4), (2, 0, 3)])
def test_round_trip_is_bit_exact(dtype: str, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(0)
    arr = (rng.random(shape) * 100).astype(dtype)
    out = decode_tensor(encode_tensor("x", arr))
    assert out.dtype == arr.dtype and out.shape == arr.shape
    assert out.tobytes() == arr.tobytes()


def test_bytes_are_little_endian_and_c_order() -> None:
    big = np.arange(6, dtype=">i4").reshape(2, 3).T  # big-endian, Fortran-ordered view
    t = encode_tensor("x", big)
    assert t.dtype == "int32" and list(t.shape) == [3, 2]
    assert t.data == np.ascontiguousarray(big).astype("<i4").tobytes()
    assert np.array_equal(decode_tensor(t), big)


def test_batch_round_trip_keeps_names() -> None:
    arrays = {"a": np.arange(3.0), "b": np.ones((2, 2), np.float32)}
    out = decode_batch(encode_batch(arrays))
    assert list(out) == ["a", "b"]
    for k in arrays:
        assert np.array_equal(out[k], arrays[k])


def test_unsupported_dtype_is_refused_on_encode() -> None:
    with pytest.raises(WireError, match="complex128"):
        encode_tensor("z", np.zeros(2, np.complex128))


@pytest.mark.parametrize(
    ("tensor", "message"),
    [
        (pb.Tensor(name="x", dtype="float128", shape=[1], data=b"\0" * 16), "dtype 'float128'"),
        (pb.Tensor(name="x", dtype="object", shape=[1], data=b"\0" * 8), "dtype 'object'"),
        (pb.Tensor(name="x", dtype="float32", shape=[3], data=b"\0" * 8), "8 bytes of data, expected 12"),
        (pb.Tensor(name="x", dtype="int64", shape=[-1], data=b""), "shape"),
        (pb.Tensor(name="x", dtype="int8", shape=[1] * 9, data=b"\0"), "at most 8 dimensions"),
        (pb.Tensor(name="", dtype="int8", shape=[1], data=b"\0"), "name"),
        (pb.Tensor(name="x" * 500, dtype="int8", shape=[1], data=b"\0"), "name"),
        (pb.Tensor(name="b", dtype="bool", shape=[2], data=b"\x01\x07"), "bool"),
        (pb.Tensor(name="x", dtype="float64", shape=[2**40, 2**40], data=b""), "bytes"),
    ],
)
def test_malformed_tensors_raise_wire_errors(tensor: pb.Tensor, message: str) -> None:
    with pytest.raises(WireError, match=message):
        decode_tensor(tensor)


def test_specs_check_names_dtypes_and_shapes() -> None:
    specs = {"orders": TensorSpec(frozenset({"float64", "int64"}), (4,)),
             "mask": TensorSpec(frozenset({"bool"}), (None, 2))}
    good = {"orders": np.zeros(4), "mask": np.zeros((7, 2), bool)}
    assert set(decode_batch(encode_batch(good), specs)) == {"orders", "mask"}

    def fails(arrays: dict[str, np.ndarray], message: str) -> None:
        with pytest.raises(WireError, match=message):
            decode_batch(encode_batch(arrays), specs, what="Step request")

    fails({"orders": np.zeros(4)}, "missing tensor 'mask'")
    fails({**good, "extra": np.zeros(1)}, "unexpected tensor 'extra'")
    fails({**good, "orders": np.zeros(4, np.float32)}, "dtype float32")
    fails({**good, "orders": np.zeros(5)}, r"shape \[5\], expected \[4\]")
    fails({**good, "mask": np.zeros((7, 3), bool)}, r"shape \[7, 3\]")
    fails({**good, "orders": np.zeros((4, 1))}, r"shape \[4, 1\]")
    dup = encode_batch(good)
    dup.tensors.append(encode_tensor("orders", np.zeros(4)))
    with pytest.raises(WireError, match="appears twice"):
        decode_batch(dup, specs)
