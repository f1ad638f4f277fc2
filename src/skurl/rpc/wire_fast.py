"""Fast path for the big EnvService replies: protobuf wire format written and read directly.

Building a StepReply with the protobuf runtime copies each array three times (tobytes,
into the message, out again when serializing), and reading `Tensor.data` copies once
more. Here the reply bytes are written in one `b"".join` over the arrays' own buffers,
and read with np.frombuffer views into the received bytes. The bytes are ordinary
protobuf (skurl.proto's ResetReply / StepReply): any protobuf client parses them, and
tests/integration/test_rpc_wire_fast.py checks both directions against the runtime.

Wire format (https://protobuf.dev/programming-guides/encoding/): a field is a varint key (field_number
<< 3 | wire_type) then its value; wire type 0 = varint, 2 = length-delimited (varint length, then
bytes), 1 = 64-bit, 5 = 32-bit; proto3 packs repeated scalars (Tensor.shape) into one field."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from skurl.rpc.codec import ALLOWED_DTYPES, MAX_NDIM, WireError

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # proto int32/int64 negatives: two's complement, 10 bytes
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _key(field: int, wire_type: int) -> bytes:
    return _varint(field << 3 | wire_type)


def _tensor_pieces(name: str, array: np.ndarray) -> tuple[list, int]:
    """The pieces of one encoded Tensor message (without its own key/length) and its size."""
    arr = np.asarray(array)
    wire = ALLOWED_DTYPES.get(arr.dtype.name)
    if wire is None:
        raise WireError(f"tensor '{name}': dtype {arr.dtype} cannot be sent")
    if arr.dtype != wire or not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr, dtype=wire)
    pieces: list = []
    for field, text in ((1, name), (2, arr.dtype.name)):
        raw = text.encode()
        pieces += [_key(field, _LEN), _varint(len(raw)), raw]
    if arr.ndim:
        packed = b"".join(_varint(d) for d in arr.shape)
        pieces += [_key(3, _LEN), _varint(len(packed)), packed]
    if arr.nbytes:
        pieces += [_key(4, _LEN), _varint(arr.nbytes), memoryview(arr).cast("B")]  # type: ignore[arg-type]  # numpy's stubs give ndarray __buffer__ on Python 3.12+ only
    return pieces, sum(len(p) if isinstance(p, bytes) else p.nbytes for p in pieces)


def _batch_pieces(field: int, arrays: Mapping[str, np.ndarray]) -> list:
    """A TensorBatch as field `field` of its parent: key, length, repeated Tensor."""
    body: list = []
    size = 0
    for name, array in arrays.items():
        pieces, n = _tensor_pieces(name, array)
        head = _key(1, _LEN) + _varint(n)
        body += [head, *pieces]
        size += len(head) + n
    return [_key(field, _LEN), _varint(size), *body]


def encode_reply(batches: Mapping[int, Mapping[str, np.ndarray]],
                 scalars: Mapping[int, int]) -> bytes:
    """Serialized message with TensorBatch fields {number: arrays} and int/bool varint
    fields {number: value} (zeros omitted, as proto3 does)."""
    pieces: list = []
    for field, arrays in batches.items():
        pieces += _batch_pieces(field, arrays)
    for field, value in scalars.items():
        if value:
            pieces += [_key(field, _VARINT), _varint(int(value))]
    return b"".join(pieces)


# ------------------------------------------------------------------------------ reading


class _Reader:
    def __init__(self, data: memoryview, start: int, end: int) -> None:
        self.data, self.pos, self.end = data, start, end

    def varint(self) -> int:
        shift = result = 0
        while True:
            if self.pos >= self.end or shift > 63:
                raise WireError("reply: truncated or malformed varint")
            byte = self.data[self.pos]
            self.pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7

    def fields(self) -> Iterator[tuple[int, int, Any]]:
        """(field number, wire type, value): varint int, or (start, end) for LEN."""
        while self.pos < self.end:
            key = self.varint()
            field, wire_type = key >> 3, key & 7
            if wire_type == _VARINT:
                yield field, wire_type, self.varint()
            elif wire_type == _LEN:
                length = self.varint()
                start = self.pos
                self.pos += length
                if self.pos > self.end:
                    raise WireError("reply: length-delimited field runs past the end")
                yield field, wire_type, (start, self.pos)
            elif wire_type in (_I64, _I32):  # unknown fixed-width fields: skip
                self.pos += 8 if wire_type == _I64 else 4
                if self.pos > self.end:
                    raise WireError("reply: fixed-width field runs past the end")
            else:
                raise WireError(f"reply: unsupported wire type {wire_type}")


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _tensor(data: memoryview, start: int, end: int) -> tuple[str, np.ndarray]:
    name, dtype, shape, payload = "", "", [], (start, start)
    for field, _, value in _Reader(data, start, end).fields():
        if field == 1:
            name = bytes(data[value[0]:value[1]]).decode("utf-8", "replace")
        elif field == 2:
            dtype = bytes(data[value[0]:value[1]]).decode("utf-8", "replace")
        elif field == 3:
            if isinstance(value, tuple):  # packed
                r = _Reader(data, *value)
                while r.pos < r.end:
                    shape.append(_signed(r.varint()))
            else:
                shape.append(_signed(value))
        elif field == 4:
            payload = value
    wire = ALLOWED_DTYPES.get(dtype)
    if wire is None or len(shape) > MAX_NDIM or any(d < 0 for d in shape):
        raise WireError(f"reply tensor '{name}': dtype {dtype!r} shape {shape} not valid")
    nbytes = payload[1] - payload[0]
    if math.prod(shape) * wire.itemsize != nbytes:
        raise WireError(f"reply tensor '{name}': {nbytes} bytes for shape {shape} of {dtype}")
    arr = np.frombuffer(data[payload[0]:payload[1]], dtype=wire).reshape(shape)
    if dtype == "bool" and nbytes and arr.view(np.uint8).max() > 1:
        raise WireError(f"reply tensor '{name}': bool bytes other than 0 and 1")
    return name, arr


def decode_reply(data: bytes) -> tuple[dict[int, dict[str, np.ndarray]], dict[int, int]]:
    """({field: {name: array view}} for message fields, {field: value} for varints)."""
    view = memoryview(data)
    batches: dict[int, dict[str, np.ndarray]] = {}
    scalars: dict[int, int] = {}
    for field, wire_type, value in _Reader(view, 0, len(view)).fields():
        if wire_type == _VARINT:
            scalars[field] = value
            continue
        arrays = batches.setdefault(field, {})
        for sub, sub_type, span in _Reader(view, *value).fields():
            if sub != 1 or sub_type != _LEN:
                continue
            name, arr = _tensor(view, *span)
            if name in arrays:
                raise WireError(f"reply: tensor '{name}' appears twice")
            arrays[name] = arr
    return batches, scalars
