"""DCL's labelling for the DDP learner: rank 0 has the labelling done, every rank gets the parts.

Rank 0 asks its labellers (the decoupled collectors of deploy.collector_addresses, whose
parts come through the rollout store verified by checksum; else its own in-process env)
and broadcasts the parts to the other ranks as one safetensors blob over the process group
(tensors, never pickle). Every rank then merges the same parts into the same labels and
the same paired check, so all take the same accept decision, and the fit runs on every
rank over its slice of each minibatch (learn/imitate.py, clone's `ranks`).
"""

from __future__ import annotations

import json

import numpy as np
import torch
import torch.distributed as dist
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

from skurl.learn.dcl_check import CheckPart
from skurl.learn.dcl_parts import LabelPart
from skurl.learn.labelling import CheckJob, LabelJob, Labellers
from skurl.modes.ddp.feed import broadcast_ints


class RankLabellers:
    """Labellers of one DDP rank: `lead` (rank 0's labellers) or None on the other ranks."""

    def __init__(self, lead: Labellers | None, device: torch.device) -> None:
        self.lead, self.device = lead, device

    def label(self, job: LabelJob) -> list[LabelPart]:
        parts = None if self.lead is None else self.lead.label(job)
        blob = self._broadcast(None if parts is None else _pack([p.arrays() for p in parts]))
        return [LabelPart.from_arrays(a) for a in _unpack(blob)]

    def check(self, job: CheckJob) -> list[CheckPart]:
        parts = None if self.lead is None else self.lead.check(job)
        blob = self._broadcast(None if parts is None else _pack(
            [{"sku_ids": p.sku_ids, "gains": p.gains} for p in parts]))
        return [CheckPart(a["sku_ids"], a["gains"]) for a in _unpack(blob)]

    def figures(self) -> dict[str, float]:
        return {} if self.lead is None else self.lead.figures()

    def close(self) -> None:
        if self.lead is not None:
            self.lead.close()

    def _broadcast(self, blob: bytes | None) -> bytes:
        """Rank 0's `blob` on every rank (its length, then its bytes)."""
        if not dist.is_initialized():
            assert blob is not None
            return blob
        size = broadcast_ints([0 if blob is None else len(blob)], self.device)[0]
        data = (torch.frombuffer(bytearray(blob), dtype=torch.uint8) if blob is not None
                else torch.empty(size, dtype=torch.uint8))
        data = data.to(self.device)
        dist.broadcast(data, src=0)
        return data.cpu().numpy().tobytes()


def _pack(parts: list[dict[str, np.ndarray]]) -> bytes:
    arrays = {f"{i}/{k}": np.ascontiguousarray(v) for i, part in enumerate(parts) for k, v in part.items()}
    return st_save(arrays, metadata={"parts": str(len(parts))})


def _unpack(blob: bytes) -> list[dict[str, np.ndarray]]:
    arrays = st_load(blob)
    size = int.from_bytes(blob[:8], "little")
    count = int(json.loads(blob[8:8 + size])["__metadata__"]["parts"])
    return [{k.split("/", 1)[1]: v for k, v in arrays.items() if k.split("/", 1)[0] == str(i)}
            for i in range(count)]
