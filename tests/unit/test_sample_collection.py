"""Collecting for the learner's SKU sample (ppo.sample_skus) in an env of the sample's units
only (RunCore.sample_env): the sampled SKUs' columns are the ones a collection of the
whole shard gives, bit for bit, with substitution groups and with supply networks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from skurl.buffer.rollout import Rollout
from skurl.catalog.partition import units
from skurl.collect.collectors import LocalCollectors
from skurl.config import load_config
from skurl.policy.nets import ActorCritic
from skurl.sync.inproc import InProcWeights
from skurl.telemetry.stages import StageTimer
from skurl.train.core import RunCore, build_core

BASE = ["sim.days=8", "policy.hidden=[16,16]", "sim.threads=1", "collect.infer_dtype=float32"]
CATALOGS = {
    "groups": ["catalog.skus=120", "catalog.synthetic.substitution_share=0.5"],
    "dc": ["catalog.skus=120", "catalog.synthetic.network=dc"],
}


def core_for(tmp_path: Path, name: str) -> RunCore:
    cfg = load_config(None, [*BASE, *CATALOGS[name]])
    return build_core(cfg, tmp_path, resume=False, tune_center=False)


def collect(core: RunCore, index: np.ndarray, narrow: bool) -> Rollout:
    torch.manual_seed(5)
    model = ActorCritic(core.schema.dim, core.grid.n, core.cfg.policy.hidden)
    weights = InProcWeights()
    weights.publish(0, model.state_dict())
    collectors = LocalCollectors(core.local_env, len(core.shards), model, core.grid, weights,
                                 StageTimer(prometheus=False), collect=core.cfg.collect,
                                 sample_env=core.sample_env if narrow else None)
    rollout = collectors.collect(0, 7, 0, lambda n: index).rollout
    return rollout if rollout.num_skus == index.size else rollout.select_skus(index)


@pytest.mark.parametrize("name", sorted(CATALOGS))
def test_the_sample_units_env_gives_the_whole_shards_columns(tmp_path: Path, name: str) -> None:
    core = core_for(tmp_path, name)
    index = np.sort(np.random.default_rng(1).choice(len(core.catalog), 20, replace=False))
    narrowed = core.sample_env(0, index)
    assert narrowed is not None
    env, positions = narrowed
    assert positions.size == index.size and env.num_skus < len(core.catalog)
    assert np.array_equal(env.sku_ids[positions], core.catalog.sku_id[index])
    unit = units(core.catalog)  # closed: every member of a sampled SKU's unit is simulated
    assert np.array_equal(np.sort(env.sku_ids), np.sort(core.catalog.sku_id[np.isin(unit, unit[index])]))
    want, got = collect(core, index, narrow=False), collect(core, index, narrow=True)
    for key, a in want.arrays().items():
        b = got.arrays()[key]
        assert a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8)), key


def test_a_sample_touching_every_unit_collects_the_whole_shard(tmp_path: Path) -> None:
    core = core_for(tmp_path, "dc")
    unit = units(core.catalog)
    _, first = np.unique(unit, return_index=True)
    assert core.sample_env(0, np.sort(first)) is None
