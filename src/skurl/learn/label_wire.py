"""Label and check jobs as bytes: one safetensors file, so they cross processes (gRPC, Ray)
without pickle. Tensors: `incumbent/*`, `sampler/*` or `candidate/*` (weights) and `plan/<i>`
(the SKUs of the plan's i-th day); the header's metadata: the job's numbers as JSON.

A decoded job is checked the way a request from an untrusted client must be: a malformed one
raises ValueError with one line naming what is wrong (the Label RPC answers INVALID_ARGUMENT).
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from skurl.learn.dcl import DclSpec
from skurl.learn.dcl_parts import SamplePlan
from skurl.learn.labelling import CheckJob, LabelJob, Tensors

_WEIGHTS = ("incumbent", "sampler", "candidate")
Meta = dict[str, object]  # a job's numbers, as its header carries them (JSON)
MAX_JOB_BYTES = 512 << 20


def encode_job(job: LabelJob | CheckJob) -> bytes:
    """`job` as one safetensors blob."""
    tensors: dict[str, torch.Tensor] = {}
    for name in _WEIGHTS:
        weights = getattr(job, name, None)
        if weights is not None:
            tensors.update({f"{name}/{k}": v.detach().cpu().contiguous() for k, v in weights.items()})
    meta: Meta = {f.name: getattr(job, f.name) for f in dataclasses.fields(job)
                            if f.name not in (*_WEIGHTS, "plan", "spec")}
    if isinstance(job, LabelJob):
        meta.update(kind="label", spec=dataclasses.asdict(job.spec), days=list(job.plan.days),
                    episode_days=job.plan.episode_days)
        tensors.update({f"plan/{i}": torch.from_numpy(np.ascontiguousarray(ids, np.int64))
                        for i, ids in enumerate(job.plan.sku_ids)})
    else:
        meta["kind"] = "check"
    return st_save(tensors, metadata={"job": json.dumps(meta)})


def decode_job(blob: bytes) -> LabelJob | CheckJob:
    """The job of `blob` (encode_job's); ValueError naming the fault when it is not one."""
    if len(blob) > MAX_JOB_BYTES:
        raise ValueError(f"job: {len(blob)} bytes, expected at most {MAX_JOB_BYTES}")
    try:
        tensors = st_load(bytes(blob))
        meta = json.loads(_header(blob)["job"])
    except (SafetensorError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"job: not a skurl label or check job ({str(exc).splitlines()[0][:120]})") from None
    if not isinstance(meta, dict) or meta.get("kind") not in ("label", "check"):
        raise ValueError("job: metadata 'kind' must be 'label' or 'check'")
    weights = {name: {k.split("/", 1)[1]: v for k, v in tensors.items() if k.startswith(f"{name}/")}
               for name in _WEIGHTS}
    try:
        return _label_job(meta, weights, tensors) if meta["kind"] == "label" else _check_job(meta, weights)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"job: malformed {meta['kind']} job ({str(exc).splitlines()[0][:160]})") from None


def _header(blob: bytes) -> dict[str, str]:
    size = int.from_bytes(bytes(blob[:8]), "little")
    return json.loads(bytes(blob[8:8 + size]))["__metadata__"]


def _ints(meta: Meta, names: tuple[str, ...]) -> dict[str, int]:
    out = {}
    for name in names:
        value = meta[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"'{name}' = {value!r}, expected an integer >= 0")
        out[name] = value
    return out


def _int_list(value: object, name: str, below: int | None = None) -> list[int]:
    """`value` as a list of integers >= 0 (and < below); ValueError naming `name` otherwise."""
    items = value if isinstance(value, list) else [None]
    out = [v for v in items if isinstance(v, int) and not isinstance(v, bool) and v >= 0
           and (below is None or v < below)]
    if len(out) != len(items):
        bound = "" if below is None else f" below {below}"
        raise ValueError(f"'{name}' = {value!r}, expected a list of integers >= 0{bound}")
    return out


def _widths(meta: Meta) -> tuple[int, int]:
    widths = _int_list(meta["widths"], "widths")
    if len(widths) != 2:
        raise ValueError(f"'widths' = {widths!r}, expected [A, P]")
    return widths[0], widths[1]


def _weights(weights: dict[str, Tensors], name: str, required: bool = True) -> Tensors | None:
    got = weights[name]
    if not got and required:
        raise ValueError(f"no '{name}/' weights")
    if any(not torch.isfinite(v).all() for v in got.values() if v.is_floating_point()):
        raise ValueError(f"'{name}' weights hold NaN or infinite values")
    return got or None


def _label_job(meta: Meta, weights: dict[str, Tensors], tensors: Tensors) -> LabelJob:
    n = _ints(meta, ("iteration", "part", "seed", "shard", "episode_days"))
    days = _int_list(meta["days"], "days", below=n["episode_days"])
    spec = meta["spec"]
    if not isinstance(spec, dict):
        raise ValueError(f"'spec' = {spec!r}, expected the DclSpec's fields")
    ids = tuple(tensors[f"plan/{i}"].numpy().astype(np.int64) for i in range(len(days)))
    plan = SamplePlan(tuple(days), ids, n["episode_days"])
    return LabelJob(n["iteration"], n["part"], n["seed"], n["shard"], plan, DclSpec(**spec),
                    bool(meta["row_horizons"]), _weights(weights, "incumbent") or {},
                    _weights(weights, "sampler", required=False), _widths(meta))


def _check_job(meta: Meta, weights: dict[str, Tensors]) -> CheckJob:
    n = _ints(meta, ("iteration", "seed", "shard", "episodes", "skip"))
    if n["episodes"] < 1:
        raise ValueError(f"'episodes' = {n['episodes']}, expected >= 1")
    return CheckJob(n["iteration"], n["seed"], n["shard"], n["episodes"], n["skip"],
                    _weights(weights, "incumbent") or {}, _weights(weights, "candidate") or {}, _widths(meta))
