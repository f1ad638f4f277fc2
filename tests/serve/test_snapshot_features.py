"""The one feature function: a snapshot taken from the simulator gives the simulator's own
observation, bit for bit, on every day (perishables, delays, promotions, backorders)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from skurl.config import SimConfig
from skurl.serve.features import observations
from skurl.serve.snapshot import column_names, from_env, read_table, write_snapshot
from skurl.serve.validate import catalog_rows, snapshot_from_table
from skurl.sim import VectorEnv
from skurl.sim.testing import order_up_to, random_catalog


def test_snapshot_features_equal_the_simulators_every_day(tmp_path: Path) -> None:
    for backorders in (False, True):
        catalog = random_catalog(400, seed=11)
        env = VectorEnv(catalog, SimConfig(days=30, backorders=backorders, substitution=True))
        obs = env.reset(seed=5)
        orders = np.zeros(len(catalog))
        lead = catalog.lead_time.astype(np.float64)
        for day in range(30):
            snap = from_env(env)
            path = write_snapshot(snap, tmp_path / f"s{day}.parquet")
            back = snapshot_from_table(read_table(path), snap.widths)
            rows = catalog_rows(back, catalog, snap.widths, env.cfg.review_days)
            feats = observations(back, rows)
            assert np.array_equal(feats, obs.features), (backorders, day)
            assert feats.tobytes() == np.ascontiguousarray(obs.features).tobytes()
            raw = obs.raw
            order_up_to(raw.on_hand, raw.pipeline, raw.backlog, raw.forecast, lead, orders)
            obs = env.step(orders * 1.2).obs
    assert pq.read_schema(path).names == column_names(snap.widths)


def test_snapshot_rows_in_any_order_give_the_same_rows(tmp_path: Path) -> None:
    catalog = random_catalog(100, seed=3)
    env = VectorEnv(catalog, SimConfig(days=5))
    obs = env.reset(seed=1)
    obs = env.step(np.full(len(catalog), 3.0)).obs
    snap = from_env(env)
    perm = np.random.default_rng(0).permutation(len(snap))
    shuffled = snap.take(perm)
    feats = observations(shuffled, catalog_rows(shuffled, catalog, snap.widths, 1))
    assert np.array_equal(feats, obs.features[perm])
