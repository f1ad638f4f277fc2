"""A run's trained policy inside the simulator, day by day, with the snapshot of each day:
what `skurl snapshot` writes and what the parity tests compare recommend against."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from skurl.errors import UserError
from skurl.serve.snapshot import Snapshot, from_env


def run_env(run_dir: Path, skus: int | None = None):
    """The run's catalog in a VectorEnv and its greedy LearnedPolicy bound to it."""
    from skurl.catalog import load_catalog
    from skurl.config import load_config
    from skurl.learn.run_policy import policy_of_run
    from skurl.policy.learned import run_config_file
    from skurl.sim import VectorEnv

    cfg = load_config(run_config_file(run_dir, "--run"))
    catalog = load_catalog(cfg.catalog, skus)
    env = VectorEnv(catalog, cfg.sim)
    return env, policy_of_run(run_dir, catalog=catalog), cfg


def episode(run_dir: Path, seed: int, days: int | None = None) -> Iterator[tuple[Snapshot, np.ndarray]]:
    """(snapshot at the start of day d, the orders the policy places on day d) for d = 0, 1, ...
    of episode 0 under `seed` (sim.days days, or `days`)."""
    env, policy, cfg = run_env(run_dir)
    days = cfg.sim.days if days is None else days
    if not 0 < days <= cfg.sim.days:
        raise UserError(f"--day {days - 1}: expected 0..{cfg.sim.days - 1} (the run's sim.days = {cfg.sim.days})")
    obs = env.reset(seed=seed)
    policy.reset()
    for _ in range(days):
        snap = from_env(env)
        orders = policy.orders(obs)
        yield snap, orders
        obs = env.step(orders).obs


def snapshot_on(run_dir: Path, day: int, seed: int) -> Snapshot:
    """The simulator's snapshot at the start of `day` (0-based) under the run's policy."""
    if day < 0:
        raise UserError(f"--day {day}: expected a day >= 0")
    *_, (snap, _) = episode(run_dir, seed, day + 1)
    return snap
