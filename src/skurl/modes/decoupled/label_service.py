"""The collector's side of the Label RPC (decoupled mode): DCL jobs on its own SKUs.

The collector labels in an in-process env of its SKUs' catalog rows (learn/labelling.py,
Labeller; built on the first job), so the sim servers keep serving episodes and the clones
stay in this process. A label part goes to the rollout store as a checksummed shard named
`<collector>.label<part>` at the job's iteration, and the reply carries its manifest; a
check part (a few floats per SKU) comes back in the reply. A malformed job is
INVALID_ARGUMENT naming what is wrong (learn/label_wire.py).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np
import torch
from safetensors.torch import save as st_save

from skurl.learn.dcl_parts import LabelPart
from skurl.learn.label_wire import decode_job
from skurl.rpc.errors import WireError
from skurl.rpc.gen import skurl_pb2 as pb

if TYPE_CHECKING:
    from skurl.learn.labelling import Labeller
    from skurl.store.api import RolloutStore


def label_shard_id(collector_id: str, part: int) -> str:
    """The store name of a collector's label part (its rollout shards are `collector_id`)."""
    return f"{collector_id}.label{part}"


def answer(request: pb.LabelRequest, labeller: Labeller, store: RolloutStore, collector_id: str) -> pb.LabelReply:
    """Run the job of `request` on `labeller` and reply (see the module docstring)."""
    try:
        job = decode_job(request.job)
    except ValueError as exc:
        raise WireError(f"collector {collector_id}: Label: {exc}") from None
    start = time.perf_counter()
    part = labeller.answer(job)
    seconds = time.perf_counter() - start
    if not isinstance(part, LabelPart):
        check = st_save({"sku_ids": torch.from_numpy(np.ascontiguousarray(part.sku_ids)),
                         "gains": torch.from_numpy(np.ascontiguousarray(part.gains))})
        return pb.LabelReply(collector_id=collector_id, check=check, seconds=seconds)
    number = getattr(job, "part", 0)
    meta = {"policy_version": 0, "label_part": number, "sku_count": int(part.sku_ids.size),
            "label_seconds": seconds}
    manifest = store.put_shard(job.iteration, label_shard_id(collector_id, number), part.arrays(), meta)
    return pb.LabelReply(collector_id=collector_id, manifest_json=manifest.to_json().decode(), seconds=seconds,
                         sku_days=part.sku_days)
