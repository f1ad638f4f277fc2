"""learn/label_wire.py: DCL jobs cross processes as safetensors and come back equal; a malformed
one is a one-line ValueError naming what is wrong (the Label RPC's INVALID_ARGUMENT)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from safetensors.torch import save as st_save

from skurl.learn.dcl import DclSpec
from skurl.learn.dcl_parts import SamplePlan
from skurl.learn.label_wire import decode_job, encode_job
from skurl.learn.labelling import CheckJob, LabelJob

SPEC = DclSpec(states=6, horizon=4, budget=4, warmup=2, spread=2, temperature=0.5)
W = {"pi.0.weight": torch.randn(3, 2), "obs_norm.count": torch.tensor(5.0, dtype=torch.float64)}


def _label(sampler=None) -> LabelJob:
    plan = SamplePlan((2, 3), (np.array([7, 3, 9]), np.array([1, 2, 5])), 10)
    return LabelJob(4, 1, 17, 0, plan, SPEC, True, W, sampler, (3, 5))


def _same_weights(a, b) -> None:
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)


def test_jobs_round_trip() -> None:
    for sampler in (None, {k: v + 1 for k, v in W.items()}):
        job = _label(sampler)
        back = decode_job(encode_job(job))
        assert isinstance(back, LabelJob)
        for f in ("iteration", "part", "seed", "shard", "spec", "row_horizons", "widths"):
            assert getattr(back, f) == getattr(job, f), f
        assert back.plan.days == job.plan.days and back.plan.episode_days == 10
        assert all(np.array_equal(a, b) for a, b in zip(back.plan.sku_ids, job.plan.sku_ids, strict=True))
        _same_weights(back.incumbent, W)
        assert (back.sampler is None) == (sampler is None)
        if sampler is not None:
            assert back.sampler is not None
            _same_weights(back.sampler, sampler)
    check = CheckJob(4, 17, 1, 2, 3, W, {k: v * 2 for k, v in W.items()}, (3, 5))
    back = decode_job(encode_job(check))
    assert isinstance(back, CheckJob) and (back.episodes, back.skip, back.widths) == (2, 3, (3, 5))
    _same_weights(back.candidate, check.candidate)


def _with_meta(**changes) -> bytes:
    blob = encode_job(_label())
    size = int.from_bytes(blob[:8], "little")
    meta = json.loads(json.loads(blob[8:8 + size])["__metadata__"]["job"])
    meta.update(changes)
    tensors = {f"incumbent/{k}": v for k, v in W.items()} | {"plan/0": torch.tensor([7, 3, 9]),
                                                             "plan/1": torch.tensor([1, 2, 5])}
    return st_save(tensors, metadata={"job": json.dumps(meta)})


@pytest.mark.parametrize(("blob", "match"), [
    (b"not a job", "not a skurl label or check job"),
    (_with_meta(kind="train"), "'kind' must be 'label' or 'check'"),
    (_with_meta(iteration=-1), "'iteration' = -1"),
    (_with_meta(seed="7"), "'seed' = '7'"),
    (_with_meta(days=[2, 30]), "'days'"),
    (_with_meta(days=[2, 3, 4]), "plan/2"),
    (_with_meta(widths=[3]), "'widths'"),
    (_with_meta(spec={**dataclasses.asdict(SPEC), "budget": 0}), "budget"),
    (_with_meta(spec={"states": 1}), "malformed label job"),
])
def test_a_malformed_job_is_one_line_naming_the_fault(blob: bytes, match: str) -> None:
    with pytest.raises(ValueError, match=match) as info:
        decode_job(blob)
    assert "\n" not in str(info.value)


def test_weights_must_be_there_and_finite() -> None:
    with pytest.raises(ValueError, match="no 'incumbent/' weights"):
        decode_job(encode_job(dataclasses.replace(_label(), incumbent={})))
    bad = {**W, "pi.0.weight": torch.full((3, 2), float("nan"))}
    with pytest.raises(ValueError, match="'incumbent' weights hold NaN"):
        decode_job(encode_job(dataclasses.replace(_label(), incumbent=bad)))
