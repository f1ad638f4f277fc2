"""learn/dcl_parts.py and learn/labelling.py: DCL's labelling and paired check cut over any SKU
partition merge into the bits one env over the whole shard gives (substitution groups,
per-row horizons, soft targets and a correction's sampler included)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from skurl.catalog.partition import partition
from skurl.config import ActionsConfig, SimConfig
from skurl.learn.dcl import DclSpec
from skurl.learn.dcl_check import merge_checks
from skurl.learn.dcl_parts import LabelPart, merge_parts, sample_plan
from skurl.learn.labelling import CheckJob, LabelJob, check_on, label_on
from skurl.policy.actions import ActionGrid
from skurl.policy.nets import ActorCritic
from skurl.sim import VectorEnv
from skurl.sim.layout import catalog_widths
from skurl.sim.testing import random_catalog

SPEC = DclSpec(states=36, horizon=5, budget=8, warmup=3, spread=3, temperature=1.0)


def _world(n: int = 40):
    catalog = random_catalog(n, 11, group_share=0.5)
    sim = SimConfig(days=16, threads=1)
    grid = ActionGrid.from_config(ActionsConfig(kind="units", n=8, step=2))
    widths = catalog_widths(catalog)
    env = VectorEnv(catalog, sim, widths)
    torch.manual_seed(0)
    model = ActorCritic(env.reset(0, 0).features.shape[1], grid.n, (16, 16))
    incumbent = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():  # another policy: a correction labels the states it visits
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return catalog, sim, grid, widths, incumbent, {k: v.clone() for k, v in model.state_dict().items()}


def _jobs(catalog, incumbent, sampler):
    ids = np.asarray(catalog.sku_id, np.int64)
    plan = sample_plan(ids, 16, SPEC, seed=5, iteration=2)
    label = LabelJob(2, 1, 5, 0, plan, SPEC, True, incumbent, sampler)
    check = CheckJob(2, 5, 0, 2, 3, incumbent, sampler)
    return ids, label, check


@pytest.mark.parametrize("shards", [2, 3])
def test_any_partition_labels_and_checks_what_one_env_does(shards: int) -> None:
    catalog, sim, grid, widths, incumbent, sampler = _world()
    assert (catalog.group >= 0).sum() >= 8  # grouped rows are cloned with their groups
    ids, job, check = _jobs(catalog, incumbent, sampler)
    whole = VectorEnv(catalog, sim, widths)
    want = merge_parts([label_on(whole, grid, job)], ids)
    want_check = merge_checks([check_on(whole, grid, check)], ids)
    envs = [VectorEnv(catalog.subset(rows), sim, widths) for rows in partition(catalog, shards, "equal")]
    parts = [label_on(env, grid, job) for env in envs][::-1]  # the order parts arrive in does not matter
    got = merge_parts(parts, ids)
    assert sum(p.sku_ids.size for p in parts) == want.demos.labels.size == SPEC.states
    assert min(p.sku_ids.size for p in parts) > 0
    np.testing.assert_array_equal(got.demos.obs, want.demos.obs)
    np.testing.assert_array_equal(got.demos.labels, want.demos.labels)
    assert got.demos.targets is not None and want.demos.targets is not None
    np.testing.assert_array_equal(got.demos.targets, want.demos.targets)
    np.testing.assert_array_equal(got.rows, want.rows)
    assert (got.q_gap, got.changed, got.sku_days) == (want.q_gap, want.changed, want.sku_days)
    got_check = merge_checks([check_on(env, grid, check) for env in envs], ids)
    assert got_check == want_check and got_check.samples == 2 * len(catalog)


def test_a_part_survives_its_array_form_and_overlaps_are_refused() -> None:
    catalog, sim, grid, widths, incumbent, _ = _world(24)
    ids, job, _ = _jobs(catalog, incumbent, None)
    part = label_on(VectorEnv(catalog, sim, widths), grid, dataclasses.replace(job, part=0))
    back = LabelPart.from_arrays(part.arrays())
    for f in dataclasses.fields(LabelPart):
        a, b = getattr(part, f.name), getattr(back, f.name)
        assert np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b, f.name
    with pytest.raises(ValueError, match="two parts"):
        merge_parts([part, back], ids)
    with pytest.raises(ValueError, match="outside the training shard"):
        merge_parts([part], ids[1:])


def test_the_plan_is_a_function_of_the_shard_seed_and_iteration() -> None:
    ids = np.arange(100, 160, dtype=np.int64)[::-1].copy()
    a = sample_plan(ids, 20, SPEC, seed=1, iteration=0)
    b = sample_plan(ids, 20, SPEC, seed=1, iteration=1)
    assert a.states == SPEC.states and a.days == (3, 4, 5)
    assert all(np.isin(s, ids).all() for s in a.sku_ids)
    assert any(not np.array_equal(x, y) for x, y in zip(a.sku_ids, b.sku_ids, strict=True))
