"""modes/decoupled/labellers.py: a collector still unreachable after deploy.reconnect_timeout_s
follows collection's rule. Within deploy.max_lost_share of the job's states the labelling
proceeds without its part (and says so in its figures); above it, the iteration fails.
The collectors are stand-ins that answer through the real Label service code and a real
local store. The gRPC path is covered by tests/integration/test_dcl_training.py."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import grpc
import numpy as np
import pytest
import torch

from skurl.config import Config
from skurl.learn.dcl import DclSpec
from skurl.learn.dcl_parts import LabelPart, SamplePlan
from skurl.learn.label_wire import decode_job
from skurl.learn.labelling import LabelJob
from skurl.modes.decoupled.label_service import answer
from skurl.modes.decoupled.labellers import GrpcLabellers
from skurl.rpc.errors import ServerUnavailableError
from skurl.rpc.gen import skurl_pb2 as pb
from skurl.store.local import LocalRolloutStore

SPEC = DclSpec(states=20, horizon=4, budget=4, warmup=2, spread=1, temperature=0.0)
W = {"pi.0.weight": torch.zeros(3, 2)}


@dataclass
class OwnSkus:
    """A labeller that labels the planned states among its own SKUs (label 1 everywhere)."""

    skus: np.ndarray

    def answer(self, job: LabelJob) -> LabelPart:
        ids = np.concatenate([s[np.isin(s, self.skus)] for s in job.plan.sku_ids])
        m = ids.size
        return LabelPart(ids.astype(np.int64), np.full(m, job.plan.days[0], np.int64), np.zeros((m, 2), np.float32),
                         np.ones(m, np.int64), None, np.zeros(m), np.zeros(m, bool), 10 * m, 20 * m)


class StandIn:
    """A collector client: answers Label through the service code, or is lost for good."""

    def __init__(self, cid: str, skus: np.ndarray, store: LocalRolloutStore, lost: bool = False) -> None:
        self.cid, self.labeller, self.store, self.lost = cid, OwnSkus(skus), store, lost

    def label(self, blob: bytes, timeout_s: float, grid_center: tuple[str, str] = ("", "")) -> pb.LabelReply:
        if self.lost:
            raise ServerUnavailableError(f"collector {self.cid} is unreachable", "127.0.0.1:1",
                                         grpc.StatusCode.UNAVAILABLE)
        decode_job(blob)  # what the real collector would refuse
        return answer(pb.LabelRequest(job=blob), self.labeller, self.store, self.cid)  # type: ignore[arg-type]


def _labellers(tmp_path: Path, sizes: list[int], lost: str, max_lost_share: float) -> GrpcLabellers:
    cfg = Config()
    cfg = dataclasses.replace(cfg, deploy=dataclasses.replace(cfg.deploy, reconnect_timeout_s=0.01,
                                                              max_lost_share=max_lost_share))
    store = LocalRolloutStore(str(tmp_path / "store"))
    edges = np.cumsum([0, *sizes])
    clients = {f"c{i}": StandIn(f"c{i}", np.arange(edges[i], edges[i + 1]), store, lost=f"c{i}" == lost)
               for i in range(len(sizes))}
    return GrpcLabellers(SimpleNamespace(clients=clients, cfg=cfg, store=store,  # type: ignore[arg-type]
                                         grid_center=("", "")))


def _job(n: int) -> LabelJob:
    return LabelJob(0, 0, 7, 0, SamplePlan((3,), (np.arange(n, dtype=np.int64),), 10), SPEC, True, W)


def test_a_small_lost_share_proceeds_without_its_part_and_says_so(tmp_path: Path) -> None:
    labellers = _labellers(tmp_path, [1, 19], lost="", max_lost_share=0.1)
    assert sum(p.sku_ids.size for p in labellers.label(_job(20))) == 20  # learns each one's share
    labellers.figures()
    for c in labellers.collectors.clients.values():
        c.lost = c.cid == "c0"  # 1 of 20 states: 5%
    parts = labellers.label(_job(20))
    assert [p.sku_ids.tolist() for p in parts] == [list(range(1, 20))]
    assert labellers.figures()["dcl_label_lost_share"] == pytest.approx(0.05)


def test_a_lost_share_above_the_threshold_fails_the_iteration(tmp_path: Path) -> None:
    labellers = _labellers(tmp_path, [10, 10], lost="c1", max_lost_share=0.1)
    with pytest.raises(ServerUnavailableError, match="c1"):
        labellers.label(_job(20))  # no label job yet: each collector counts 1/2


def test_every_collector_lost_fails_even_with_a_share_of_one(tmp_path: Path) -> None:
    labellers = _labellers(tmp_path, [20], lost="c0", max_lost_share=1.0)
    with pytest.raises(ServerUnavailableError):
        labellers.label(_job(20))
