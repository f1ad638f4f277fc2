"""--mode ray with rollouts through the rollout store (ray.rollouts=store) and 2 collector
actors, each driving one of the 2 simulator workers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

ray = pytest.importorskip("ray")

from test_ray_mode import ITERATIONS, config, final_weights  # noqa: E402

from skurl.config import RayConfig  # noqa: E402
from skurl.modes import colocated  # noqa: E402
from skurl.modes.ray import wiring as ray_mode  # noqa: E402
from skurl.modes.ray.cluster import start_ray  # noqa: E402
from skurl.store.local import LocalRolloutStore  # noqa: E402
from skurl.train import run as training  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Iterator[None]:
    started = start_ray(RayConfig(num_cpus=2))
    yield
    if started:
        ray.shutdown()


def test_rollouts_through_the_store_with_two_collectors(tmp_path: Path) -> None:
    training.start(colocated.mode, config(), tmp_path / "colocated", baseline=False)
    store_dir = tmp_path / "rollouts"
    cfg = config("ray.rollouts=store", "ray.collectors=2", f"store.url={store_dir}")
    training.start(ray_mode.mode, cfg, tmp_path / "ray", baseline=False)
    store = LocalRolloutStore(store_dir)
    assert store.iterations() == [ITERATIONS - 2, ITERATIONS - 1]  # older ones pruned
    shards = store.list_shards(ITERATIONS - 1)
    assert [m.collector_id for m in shards] == ["ray-collector-0", "ray-collector-1"]
    assert sum(m.sku_count for m in shards) == cfg.catalog.skus
    # Two collectors batch inference differently from one, so equality holds to float
    # rounding of the networks (sampled actions agree), not bit for bit.
    want, got = final_weights(tmp_path / "colocated"), final_weights(tmp_path / "ray")
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-4, atol=1e-5)
