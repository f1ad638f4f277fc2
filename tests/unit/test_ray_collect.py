"""The decisions of modes/ray/collectors.py without Ray: which lost shares an iteration
proceeds without, and how the surviving collectors' rollouts are put together."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from skurl.buffer.assemble import AssemblyError, ShardAssembly
from skurl.buffer.rollout import Rollout
from skurl.config import load_config
from skurl.modes.ray.collectors import Placement, RayCollectors, Share
from skurl.sim.api import ObsSchema
from skurl.telemetry.metrics import use_registry


def rollout(ids: np.ndarray, days: int = 3, dim: int = 2) -> Rollout:
    r = Rollout.allocate(days, ids, dim)
    for arr in r.arrays().values():
        arr[...] = 0
    r.sku_ids[:] = ids
    r.rewards[:] = ids[None, :].astype(np.float32)  # a column carries its SKU id
    r.last_obs[:] = ids[:, None]
    return r


def test_assembly_puts_columns_in_row_order_and_keeps_only_the_rows_present() -> None:
    ids = np.array([10, 11, 12, 13, 14, 15])
    a, b = np.array([0, 2, 4]), np.array([1, 5])  # collector of row 3 lost
    assembly = ShardAssembly(ids, 3, 2)
    parts = [rollout(ids[a]).arrays(), rollout(ids[b]).arrays()]
    out = assembly.assemble(parts, version=1, seed=2, episode=3, missing_ok=True)
    assert out.num_skus == 5
    assert out.sku_ids.tolist() == [10, 11, 12, 14, 15]
    assert out.rewards[2].tolist() == [10, 11, 12, 14, 15] and out.last_obs[:, 0].tolist() == [10, 11, 12, 14, 15]
    assert (out.policy_version, out.seed, out.episode) == (1, 2, 3)
    with pytest.raises(AssemblyError, match="SKU 13 is in 0 shards"):
        assembly.assemble(parts, version=1, seed=2, episode=3)  # without missing_ok every SKU is needed
    with pytest.raises(AssemblyError, match="SKU 10 is in 2 shards"):
        assembly.assemble([*parts, rollout(ids[a]).arrays()], version=1, seed=2, episode=3, missing_ok=True)


def collectors(max_lost_share: float, sizes: list[int]) -> tuple[RayCollectors, list[int]]:
    replaced: list[int] = []
    cfg = load_config(None, [f"deploy.max_lost_share={max_lost_share}"])
    run: Any = SimpleNamespace(cfg=cfg, replace_collector=replaced.append)
    start = np.cumsum([0, *sizes])
    shares = [Share(i, np.arange(start[i], start[i + 1]), []) for i in range(len(sizes))]
    return RayCollectors(run, Placement("k", int(start[-1]), ObsSchema(fields=()), shares, [])), replaced


@pytest.mark.parametrize(("threshold", "lost", "waited"), [(0.05, [0], False), (0.049, [0], True),
                                                          (0.5, [1], True), (1.0, [0, 1], True)])
def test_proceed_at_most_the_threshold_else_wait(threshold: float, lost: list[int], waited: bool) -> None:
    rc, replaced = collectors(threshold, [5, 95])
    with use_registry(CollectorRegistry()) as m:
        loss = rc._handle_loss([rc.placement.shares[i] for i in lost])
    assert loss.waited is waited and loss.collectors == [f"ray-collector-{i}" for i in lost]
    assert loss.skus == sum((5, 95)[i] for i in lost) and loss.share == pytest.approx(loss.skus / 100)
    assert replaced == lost  # replaced either way, before the next iteration
    assert m.registry.get_sample_value("collector_shares_lost_total") == (0 if waited else len(lost))
    assert m.registry.get_sample_value("collector_lost_skus_total") == (0 if waited else loss.skus)
