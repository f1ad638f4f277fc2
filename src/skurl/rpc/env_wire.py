"""The EnvService payloads: Obs and StepResult as named tensors, and back.

Names (one place, like RLlib's Columns): observation tensors `OBS_NAMES`, step tensors
`reward`, `failed` and one tensor per DayMetrics field. Dtypes are the env's own, so a
remote trajectory is bit-identical to the in-process one.

More: docs/internals.md (rpc/env_wire.py)."""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from skurl.buffer.obs_delta import FeatureDeltaEncoder, mask_bytes
from skurl.rpc.codec import ALLOWED_DTYPES, TensorSpec, check_spec
from skurl.rpc.errors import WireError
from skurl.rpc.feature_delta import FeatureDeltaDecoder
from skurl.rpc.gen import skurl_pb2 as pb
from skurl.rpc.wire_fast import decode_reply, encode_reply
from skurl.sim.api import DayMetrics, Obs, ObsSchema, RawState, StepResult

MAX_ORDER = 1e9  # units per SKU per day, as sim/env.py's MAX_ORDER (test_rpc_hardening checks)

OBS_NAMES = ("features", "on_hand", "pipeline", "backlog", "forecast")
METRIC_NAMES = tuple(f.name for f in fields(DayMetrics))
STEP_NAMES = ("reward", "failed", *METRIC_NAMES)
LEAN_OBS_NAMES = ("features_mask", "features_values", "features_base", "forecast")
RAW_NAMES = ("on_hand", "pipeline", "backlog")  # lean with raw: these too
OWED = "owed"  # int64 [N], only when asked and the env has supply networks (skurl.proto)
METRIC_SUMS = "metric_sums"
LEAN_STEP_NAMES = ("reward", "failed", METRIC_SUMS)
ORDER_DTYPES = frozenset({"float32", "float64", "int32", "int64", "uint8", "uint16", "uint32",
                          "int8", "int16"})
_ANY = frozenset(ALLOWED_DTYPES)


def _numbers(message: type, names: tuple[str, ...]) -> tuple[int, ...]:
    fields_by_name = message.DESCRIPTOR.fields_by_name  # type: ignore[attr-defined]
    return tuple(fields_by_name[name].number for name in names)


# Field numbers of the replies written and read by wire_fast, taken from skurl.proto.
RESET_OBS, RESET_DAY = _numbers(pb.ResetReply, ("obs", "day"))
STEP_OBS, STEP_RESULT, STEP_DONE, STEP_DAY = _numbers(pb.StepReply,
                                                      ("obs", "result", "done", "day"))


def encode_reset_reply(obs: Obs, owed: bool = False) -> bytes:
    """A serialized ResetReply (`owed`: with the raw state's owed, if it has one)."""
    return encode_reply({RESET_OBS: obs_arrays(obs, owed)}, {RESET_DAY: int(obs.raw.day)})


def encode_step_reply(result: StepResult, owed: bool = False) -> bytes:
    """A serialized StepReply (`owed`: as encode_reset_reply)."""
    return encode_reply({STEP_OBS: obs_arrays(result.obs, owed), STEP_RESULT: step_arrays(result)},
                        {STEP_DONE: int(bool(result.done)), STEP_DAY: int(result.obs.raw.day)})


def encode_lean_reset_reply(obs: Obs, delta: FeatureDeltaEncoder, raw: bool = False,
                            owed: bool = False) -> bytes:
    """A serialized lean ResetReply (`delta` was reset: the features go against zeros)."""
    return encode_reply({RESET_OBS: lean_obs_arrays(obs, delta, raw, owed)}, {RESET_DAY: int(obs.raw.day)})


def encode_lean_step_reply(result: StepResult, delta: FeatureDeltaEncoder, raw: bool = False,
                           owed: bool = False) -> bytes:
    """A serialized lean StepReply (features against the session's previous reply)."""
    return encode_reply({STEP_OBS: lean_obs_arrays(result.obs, delta, raw, owed),
                         STEP_RESULT: lean_step_arrays(result)},
                        {STEP_DONE: int(bool(result.done)), STEP_DAY: int(result.obs.raw.day)})


def lean_obs_arrays(obs: Obs, delta: FeatureDeltaEncoder, raw: bool = False,
                    owed: bool = False) -> dict[str, np.ndarray]:
    """The features as a delta and today's forecast; with `raw`, the raw state whole
    (with `owed` too, owed where the env has one)."""
    state = obs.raw
    if raw:
        extra = {"forecast": state.forecast, "on_hand": state.on_hand, "pipeline": state.pipeline,
                 "backlog": state.backlog, **_owed(state, owed)}
    else:
        extra = {"forecast": state.forecast[:, :1]}
    return {**delta.encode(obs.features, int(state.day)), **extra}


def lean_step_arrays(result: StepResult) -> dict[str, np.ndarray]:
    sums = result.metrics.sums()
    return {"reward": result.reward, "failed": np.asarray(result.failed), METRIC_SUMS: sums}


def orders_spec(num_skus: int) -> dict[str, TensorSpec]:
    """Step request: one tensor `orders` [N] in units."""
    return {"orders": TensorSpec(ORDER_DTYPES, (num_skus,))}


def obs_specs(num_skus: int, dim: int) -> dict[str, TensorSpec]:
    n = num_skus
    return {
        "features": TensorSpec(frozenset({"float32"}), (n, dim)),
        "on_hand": TensorSpec(_ANY, (n,)),
        "pipeline": TensorSpec(_ANY, (n, None)),
        "backlog": TensorSpec(_ANY, (n,)),
        "forecast": TensorSpec(_ANY, (n, None)),
    }


def step_specs(num_skus: int) -> dict[str, TensorSpec]:
    specs = {"reward": TensorSpec(_ANY, (num_skus,)), "failed": TensorSpec(_ANY, (None,))}
    specs.update({name: TensorSpec(_ANY, (num_skus,)) for name in METRIC_NAMES})
    return specs


def lean_obs_specs(num_skus: int, dim: int, raw: bool = False) -> dict[str, TensorSpec]:
    specs = {
        "features_mask": TensorSpec(frozenset({"uint8"}), (mask_bytes(num_skus, dim),)),
        "features_values": TensorSpec(frozenset({"float32"}), (None,)),
        "features_base": TensorSpec(frozenset({"int64"}), (1,)),
        "forecast": TensorSpec(_ANY, (num_skus, None if raw else 1)),
    }
    if raw:
        full = obs_specs(num_skus, dim)
        specs.update({name: full[name] for name in RAW_NAMES})
    return specs


def lean_step_specs(num_skus: int) -> dict[str, TensorSpec]:
    return {"reward": TensorSpec(_ANY, (num_skus,)), "failed": TensorSpec(_ANY, (None,)),
            METRIC_SUMS: TensorSpec(frozenset({"float64"}), (len(METRIC_NAMES),))}


def obs_arrays(obs: Obs, owed: bool = False) -> dict[str, np.ndarray]:
    raw = obs.raw
    return {"features": obs.features, "on_hand": raw.on_hand, "pipeline": raw.pipeline,
            "backlog": raw.backlog, "forecast": raw.forecast, **_owed(raw, owed)}


def _owed(raw: RawState, asked: bool) -> dict[str, np.ndarray]:
    """{owed: raw.owed} when asked and the env has supply networks, else nothing (no bytes)."""
    return {OWED: raw.owed} if asked and raw.owed is not None else {}


def owed_spec(num_skus: int) -> dict[str, TensorSpec]:
    return {OWED: TensorSpec(frozenset({"int64"}), (num_skus,))}


def step_arrays(result: StepResult) -> dict[str, np.ndarray]:
    out = {"reward": result.reward, "failed": np.asarray(result.failed)}
    out.update({name: getattr(result.metrics, name) for name in METRIC_NAMES})
    return out


class ReplyDecoder:
    """Turns EnvService replies into Obs/StepResult backed by arrays reused every call."""

    def __init__(self, num_skus: int, schema: ObsSchema) -> None:
        self.num_skus = num_skus
        self.schema = schema
        self._obs_specs = obs_specs(num_skus, schema.dim)
        self._optional = owed_spec(num_skus)  # present on supply networks (skurl.proto)
        self._step_specs = step_specs(num_skus)
        self._buffers: dict[str, np.ndarray] = {}

    def reset_reply(self, data: bytes) -> Obs:
        batches, scalars = decode_reply(data)
        return self.obs(batches.get(RESET_OBS, {}), scalars.get(RESET_DAY, 0))

    def step_reply(self, data: bytes) -> StepResult:
        batches, scalars = decode_reply(data)
        return self.step(batches.get(STEP_OBS, {}), batches.get(STEP_RESULT, {}),
                         scalars.get(STEP_DAY, 0), bool(scalars.get(STEP_DONE, 0)))

    def obs(self, arrays: dict[str, np.ndarray], day: int) -> Obs:
        out = self._fill(_checked(arrays, self._obs_specs, "observation reply", self._optional))
        raw = RawState(on_hand=out["on_hand"], pipeline=out["pipeline"],
                       backlog=out["backlog"], forecast=out["forecast"], day=int(day),
                       owed=out.get(OWED))
        return Obs(features=out["features"], raw=raw, schema=self.schema)

    def step(self, obs: dict[str, np.ndarray], result: dict[str, np.ndarray], day: int,
             done: bool) -> StepResult:
        observation = self.obs(obs, day)
        checked = _checked(result, self._step_specs, "step reply")
        failed = checked.pop("failed").copy()  # tiny and variable-length: no buffer
        out = self._fill(checked)
        metrics = DayMetrics(**{name: out[name] for name in METRIC_NAMES})
        return StepResult(obs=observation, reward=out["reward"], done=bool(done),
                          metrics=metrics, failed=failed)

    def _fill(self, decoded: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return fill_buffers(self._buffers, decoded)


def fill_buffers(buffers: dict[str, np.ndarray], decoded: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Copy each decoded array into its buffer in `buffers` (allocated on first use or when
    its shape or dtype changes) and return the buffers by name."""
    out = {}
    for name, arr in decoded.items():
        buf = buffers.get(name)
        if buf is None or buf.shape != arr.shape or buf.dtype != arr.dtype:
            buf = buffers[name] = np.empty(arr.shape, arr.dtype)
        np.copyto(buf, arr)
        out[name] = buf
    return out


class LeanReplyDecoder:
    """Turns lean EnvService replies into Obs/StepResult; the features come in `shown`'s
    layout (a schema with the same fields, each at least as wide: the catalog's), so a
    collector over several shards needs no widening copy."""

    def __init__(self, num_skus: int, schema: ObsSchema, shown: ObsSchema | None = None,
                 raw: bool = False) -> None:
        self.num_skus = num_skus
        self.schema = shown or schema
        self.raw = raw  # replies carry the raw state (lean with raw)
        self._delta = FeatureDeltaDecoder(num_skus, schema.dim, self.schema.dim,
                                          column_index(schema, self.schema))
        self._obs_specs = lean_obs_specs(num_skus, schema.dim, raw)
        self._optional = owed_spec(num_skus) if raw else {}  # lean with raw, on supply networks
        self._raw_buffers: dict[str, np.ndarray] = {}  # lean with raw: the raw state
        self._step_specs = lean_step_specs(num_skus)
        self._forecast = np.zeros((num_skus, 1), np.float32)
        zeros = np.zeros(1, np.int64)
        self._zeros = np.broadcast_to(zeros, (num_skus,))  # read-only, no memory per SKU
        self._pipeline = np.broadcast_to(zeros, (num_skus, 1))
        self._nan = np.broadcast_to(np.array([np.nan]), (num_skus,))
        self.sums: dict[str, float] | None = None  # the last step's metric sums

    def reset_reply(self, data: bytes) -> Obs:
        batches, scalars = decode_reply(data)
        self.sums = None
        return self.obs(batches.get(RESET_OBS, {}), scalars.get(RESET_DAY, 0))

    def step_reply(self, data: bytes) -> StepResult:
        batches, scalars = decode_reply(data)
        observation = self.obs(batches.get(STEP_OBS, {}), scalars.get(STEP_DAY, 0))
        result = _checked(batches.get(STEP_RESULT, {}), self._step_specs, "lean step reply")
        self.sums = dict(zip(METRIC_NAMES, result[METRIC_SUMS].tolist(), strict=True))
        metrics = DayMetrics(**dict.fromkeys(METRIC_NAMES, self._nan))
        return StepResult(obs=observation, reward=result["reward"].copy(),
                          done=bool(scalars.get(STEP_DONE, 0)), metrics=metrics,
                          failed=result["failed"].copy())

    def obs(self, arrays: dict[str, np.ndarray], day: int) -> Obs:
        checked = _checked(arrays, self._obs_specs, "lean observation reply", self._optional)
        features = self._delta.apply(checked, int(day))
        if self.raw:
            names = (*RAW_NAMES, "forecast", *(n for n in self._optional if n in checked))
            out = fill_buffers(self._raw_buffers, {name: checked[name] for name in names})
            raw = RawState(on_hand=out["on_hand"], pipeline=out["pipeline"], backlog=out["backlog"],
                           forecast=out["forecast"], day=int(day), owed=out.get(OWED))
            return Obs(features=features, raw=raw, schema=self.schema)
        forecast = checked["forecast"]
        if self._forecast.dtype != forecast.dtype:  # the env's own dtype, as the full reply
            self._forecast = np.empty(forecast.shape, forecast.dtype)
        np.copyto(self._forecast, forecast)
        raw = RawState(on_hand=self._zeros, pipeline=self._pipeline, backlog=self._zeros,
                       forecast=self._forecast, day=int(day))
        return Obs(features=features, raw=raw, schema=self.schema)


def column_index(inner: ObsSchema, outer: ObsSchema) -> np.ndarray:
    """outer's column of each of inner's columns: same fields in the same order, each at
    most as wide in inner (its extra columns stay zero, as a whole-catalog env shows them)."""
    if [n for n, _ in inner.fields] != [n for n, _ in outer.fields]:
        raise WireError(f"observation fields {[n for n, _ in inner.fields]} differ from "
                        f"{[n for n, _ in outer.fields]}")
    out: list[int] = []
    start = 0
    for (name, w), (_, wide) in zip(inner.fields, outer.fields, strict=True):
        if w > wide:
            raise WireError(f"observation field '{name}' is {w} wide, wider than {wide}")
        out.extend(range(start, start + w))
        start += wide
    return np.array(out, np.int64)


def _checked(arrays: dict[str, np.ndarray], specs: dict[str, TensorSpec],
             what: str, optional: dict[str, TensorSpec] | None = None) -> dict[str, np.ndarray]:
    """Exactly the names of `specs`, and any of `optional`, each matching its spec; else WireError."""
    optional = optional or {}
    missing = sorted(specs.keys() - arrays.keys())
    extra = sorted(arrays.keys() - specs.keys() - optional.keys())
    if missing or extra:
        raise WireError(f"{what}: missing tensors {missing}, unexpected {extra}")
    for name, arr in arrays.items():
        check_spec(name, arr, specs.get(name) or optional[name], what)
    return dict(arrays)


def schema_to_wire(schema: ObsSchema) -> list[pb.SchemaField]:
    return [pb.SchemaField(name=name, width=width) for name, width in schema.fields]


def schema_from_wire(fields_: list[pb.SchemaField]) -> ObsSchema:
    if any(f.width < 0 or not f.name for f in fields_):
        raise WireError("info reply: schema field with an empty name or negative width")
    return ObsSchema(fields=tuple((f.name, int(f.width)) for f in fields_))


def check_orders(orders: np.ndarray, num_skus: int) -> np.ndarray:
    """Order quantities as the env expects them: finite, in [0, MAX_ORDER], [N]; else
    WireError (plain numbers in the message, as skurl.proto documents the cap)."""
    check_spec("orders", orders, orders_spec(num_skus)["orders"], "Step request")
    bad = ~((orders >= 0) & (orders <= MAX_ORDER))  # NaN fails both
    if bad.any():
        i = int(np.argmax(bad))
        raise WireError(f"Step request: orders[{i}] = {orders[i].item()!r}, expected a finite number "
                        f"in [0, {MAX_ORDER:g}] ({int(bad.sum())} of {num_skus} orders are bad)")
    return orders
