"""What every part of a run shares, fixed before any mode's parts are built: the catalog,
its observation widths (saved in the run dir's env spec), the training shards, the action
grid and the stage timer."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from skurl import atomic
from skurl.catalog import Catalog, load_catalog
from skurl.collect.evaluate import make_env
from skurl.config import Config, SimConfig
from skurl.errors import UserError
from skurl.learn.threads import set_torch_threads
from skurl.policy.actions import ActionGrid
from skurl.policy.learned import grid_for
from skurl.sim.api import ObsSchema
from skurl.sim.layout import catalog_widths, schema_for
from skurl.telemetry.stages import StageTimer

if TYPE_CHECKING:
    from skurl.sim.env import VectorEnv

TRAINED = "ppo"  # the trained policy's name (evaluations, reports) and its weights' model key
ENV_SPEC_FILE = "env_spec.json"  # the run's observation widths and schema: every part shows these


def seed_global_rngs(seed: int) -> None:
    """The process-wide torch, numpy and python RNGs from the run seed. Training draws from
    explicit generators, not from these, but checkpoints record them (rng/*,
    learn/checkpoint.py): seeded from OS entropy, they made identical runs' checkpoints
    differ (issue 42)."""
    import random

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def set_threads(cfg: Config) -> int:
    threads = cfg.train.torch_threads or os.cpu_count() or 1
    set_torch_threads(threads)
    return threads


def training_shards(catalog: Catalog, collect_skus: int) -> list[np.ndarray]:
    """Row indices of the SKU sets collected in turn (one per iteration, round robin):
    the whole catalog, or group-closed shards of about `collect_skus` SKUs."""
    n = len(catalog)
    if collect_skus == 0 or collect_skus >= n:
        return [np.arange(n, dtype=np.int64)]
    from skurl.catalog.partition import partition

    shards = partition(catalog, -(-n // collect_skus), "equal")
    return [s for s in shards if s.size]


def run_widths(run_dir: Path, catalog: Catalog, resume: bool, at_least: tuple[int, int]) -> tuple[int, int]:
    """The run's (shelf-life, pipeline) widths: a resumed run's saved ones (its network takes
    those), else the catalog's; written to the env spec so every process reads the same."""
    path = run_dir / ENV_SPEC_FILE
    saved = (0, 0)
    if resume and path.is_file():
        try:
            spec = json.loads(path.read_text(encoding="utf-8"))
            saved = (int(spec["widths"][0]), int(spec["widths"][1]))
        except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
            raise UserError(f"{path}: unreadable env spec ({exc}); expected JSON with 'widths': [A, P]") from None
    own = catalog_widths(catalog)
    widths = (max(own[0], saved[0], at_least[0]), max(own[1], saved[1], at_least[1]))
    if resume and saved != (0, 0) and widths != saved:
        raise UserError(f"{path}: the run's network takes shelf-life/pipeline widths {saved}, but the catalog "
                        f"needs {widths}; expected a catalog that fits the trained widths")
    return widths


def save_env_spec(run_dir: Path, widths: tuple[int, int], network: bool = False) -> None:
    schema = schema_for(*widths, network)
    atomic.write_text(run_dir / ENV_SPEC_FILE, json.dumps(
        {"widths": list(widths), "obs_dim": schema.dim, "fields": [list(f) for f in schema.fields]}) + "\n")


@dataclass
class RunCore:
    """The catalog-side facts of a run (its parts read them; none changes them)."""

    cfg: Config
    run_dir: Path
    catalog: Catalog
    widths: tuple[int, int]
    shards: list[np.ndarray]
    grid: ActionGrid
    resumed: bool = False  # the run continues from its latest checkpoint
    timer: StageTimer = field(default_factory=StageTimer)
    first_scalars: dict[str, Any] = field(default_factory=dict)  # for this process's first record
    _envs: dict[int, Any] = field(default_factory=dict)
    _units: dict[int, np.ndarray] = field(default_factory=dict)

    @property
    def schema(self) -> ObsSchema:
        return schema_for(*self.widths, self.catalog.has_network)

    def shard_catalog(self, shard: int) -> Catalog:
        rows = self.shards[shard]
        return self.catalog if rows.size == len(self.catalog) else self.catalog.subset(rows)

    def local_env(self, shard: int) -> VectorEnv:
        """An in-process env of training shard `shard` (built once)."""
        if shard not in self._envs:
            self._envs[shard] = make_env(self.shard_catalog(shard), self.cfg.sim, self.widths)
        return self._envs[shard]

    def sample_env(self, shard: int, index: np.ndarray) -> tuple[VectorEnv, np.ndarray] | None:
        """sample_units_env for rows `index` of training shard `shard` (its units computed once)."""
        from skurl.catalog.partition import units

        if shard not in self._units:
            self._units[shard] = units(self.shard_catalog(shard))
        return sample_units_env(self.shard_catalog(shard), self._units[shard], index, self.cfg.sim, self.widths)


def sample_units_env(catalog: Catalog, unit: np.ndarray, index: np.ndarray, sim: SimConfig,
                     widths: tuple[int, int]) -> tuple[VectorEnv, np.ndarray] | None:
    """An env of just the units (substitution groups, supply networks, lone SKUs; `unit`:
    catalog/partition.py units) that hold rows `index` of `catalog`, and the positions of
    those rows in it; None when that is the whole catalog or needs another observation
    schema. A SKU's episode is the same in it as in the whole catalog's env (per-SKU random
    streams, shard invariance), so a collection for the learner's SKU sample
    (ppo.sample_skus) simulates and infers only these rows."""
    taken = np.zeros(int(unit.max(initial=-1)) + 1, dtype=bool)
    taken[unit[index]] = True
    rows = np.flatnonzero(taken[unit])
    if rows.size == unit.size:
        return None
    part = catalog.subset(rows)
    if part.has_network != catalog.has_network:
        return None
    return make_env(part, sim, widths), np.searchsorted(rows, index)


def build_core(cfg: Config, run_dir: Path, *, resume: bool, tune_center: bool = True,
               at_least: tuple[int, int] = (0, 0)) -> RunCore:
    """The run's core; `tune_center` False: the grid's size only (a follower rank)."""
    catalog = load_catalog(cfg.catalog)
    core = RunCore(cfg, run_dir, catalog, run_widths(run_dir, catalog, resume, at_least),
                   training_shards(catalog, cfg.collect.skus), grid_for(cfg), resumed=resume)
    if tune_center and core.grid.needs_center:
        core.grid = _centred(core, resume)
    return core


def _centred(core: RunCore, resume: bool) -> ActionGrid:
    """policy.actions.z_center=tuned: the grid centred on the baseline's per-SKU factors,
    tuned on the training catalog at a fresh start (a resumed run reads back the ones it
    started with). The tuning's seconds go into the first record."""
    from skurl.policy.grid_center import CENTER_FILE, ensure_center

    began = time.perf_counter()
    if not resume:  # a fresh start tunes anew: a leftover file may be another config's
        (core.run_dir / CENTER_FILE).unlink(missing_ok=True)
    center = ensure_center(core.cfg, core.run_dir, core.catalog)
    core.first_scalars["grid_center_seconds"] = time.perf_counter() - began
    return core.grid.with_center(center)
