"""`skurl train --resume RUN --catalog NEW`: continue a run on a changed SKU set. SKU ids
are the identity; the network, its feature widths and the per-SKU reward statistics carry
over, new SKUs start from their category's statistics (docs/catalog_change.md)."""

from __future__ import annotations

import io
import json
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from skurl import atomic
from skurl.catalog import Catalog, load_catalog
from skurl.collect.collectors import Collected, Collectors, SampleIndex
from skurl.config import Config, load_config
from skurl.errors import CatalogError, UserError
from skurl.learn.checkpoint import load_latest, no_checkpoint_error
from skurl.policy.learned import run_config_file
from skurl.sim.layout import catalog_widths, schema_for
from skurl.train.evaluation import BASELINE, BASELINE_FILE, TRAINED
from skurl.train.mode import Observer, Scalars

if TYPE_CHECKING:
    from skurl.collect.evaluate import EvalResult
    from skurl.learn.learner import Learner
    from skurl.train.core import RunCore
    from skurl.train.loop import TrainResult
    from skurl.train.run import ModeFor

log = logging.getLogger("skurl.catalog_change")

CHANGE_FILE = "catalog_change.json"
NEW_SKUS_FILE = "new_skus.npy"


@dataclass
class CatalogChange:
    """The run's latest SKU-set change and the feature widths its network was built for."""

    widths: tuple[int, int]  # (A, P) of the network's input
    iteration: int | None = None  # first iteration on the changed set (None: never changed)
    added: np.ndarray | None = None  # ids of the SKUs new at that change
    removed: int = 0
    skus: int = 0
    baseline_new_skus_cost: float | None = None  # tuned baseline's cost on the new SKUs

    def save(self, run_dir: Path) -> None:
        data = {"widths": list(self.widths), "iteration": self.iteration, "added": int(self.added.size)
                if self.added is not None else 0, "removed": self.removed, "skus": self.skus,
                "baseline_new_skus_cost": self.baseline_new_skus_cost}
        if self.added is not None:
            buf = io.BytesIO()
            np.save(buf, self.added)
            atomic.write_bytes(run_dir / NEW_SKUS_FILE, buf.getvalue())
        atomic.write_text(run_dir / CHANGE_FILE, json.dumps(data, indent=1))

    @classmethod
    def load(cls, run_dir: Path) -> CatalogChange | None:
        path = run_dir / CHANGE_FILE
        if not path.is_file():
            return None
        data = json.loads(path.read_text())
        added = np.load(run_dir / NEW_SKUS_FILE) if (run_dir / NEW_SKUS_FILE).is_file() else None
        return cls((int(data["widths"][0]), int(data["widths"][1])), data.get("iteration"), added,
                   int(data.get("removed", 0)), int(data.get("skus", 0)), data.get("baseline_new_skus_cost"))


def check_fits(catalog: Catalog, widths: tuple[int, int], where: str) -> None:
    """CatalogError (one line, naming a SKU and field) when `catalog` needs wider features
    than the trained network's (A, P)."""
    a, p = widths
    need_p = catalog.lead_time.astype(np.int64) + catalog.delay_max
    if int(need_p.max()) > p:
        i = int(np.argmax(need_p))
        raise CatalogError(f"{where}: SKU {int(catalog.sku_id[i])}: lead_time + delay_max = {int(need_p[i])} "
                           f"does not fit the trained network's {p} pipeline features, expected at most {p}")
    if int(catalog.shelf_life.max()) > a:
        i = int(np.argmax(catalog.shelf_life))
        raise CatalogError(f"{where}: SKU {int(catalog.sku_id[i])}: shelf_life = {int(catalog.shelf_life[i])} "
                           f"does not fit the trained network's {a} shelf-life features, expected at most {a}")


def category_of(catalog: Catalog, sku_ids: np.ndarray) -> np.ndarray:
    """int64 category of each id in `sku_ids` (all in `catalog`)."""
    order = np.argsort(catalog.sku_id, kind="stable")
    at = order[np.searchsorted(catalog.sku_id, sku_ids, sorter=order)]
    return catalog.category[at].astype(np.int64)


def seed_new_sku_stats(scaler: Any, catalog: Catalog, added: np.ndarray) -> int:
    """Per-SKU reward statistics for `catalog`'s SKU set: drop ids not in it, start the ids
    in `added` from their category's pooled moments (module docstring). Returns the number
    of new SKUs seeded (0 when the scaler keeps no per-SKU statistics)."""
    if not hasattr(scaler, "ids"):
        return 0
    device = scaler.ids.device
    ids, mean, var, count = (t.cpu() for t in (scaler.ids, scaler.mean, scaler.var, scaler.count))
    new_ids = torch.from_numpy(np.array(added, np.int64))
    keep = torch.isin(ids, torch.from_numpy(np.array(catalog.sku_id))) & ~torch.isin(ids, new_ids)
    ids, mean, var, count = ids[keep], mean[keep], var[keep], count[keep]
    known_cat, new_cat = (torch.from_numpy(category_of(catalog, x.numpy())) for x in (ids, new_ids))
    n = int(new_ids.numel())
    new_mean, new_var, new_count = (torch.zeros(n, dtype=torch.float64) for _ in range(3))
    if ids.numel():
        for c in new_cat.unique().tolist():  # a loop per category, not per SKU
            pool = known_cat == c
            if not bool(pool.any()):
                pool = torch.ones_like(known_cat, dtype=torch.bool)
            w = count[pool].clamp_min(1e-12)
            at = new_cat == c
            new_mean[at] = float((w * mean[pool]).sum() / w.sum())
            new_var[at] = float((w * var[pool]).sum() / w.sum())
            new_count[at] = float(count[pool].median())
    all_ids = torch.cat([ids, new_ids])
    order = torch.argsort(all_ids)
    scaler.ids = all_ids[order].to(device)
    scaler.mean = torch.cat([mean, new_mean])[order].to(device)
    scaler.var = torch.cat([var, new_var])[order].to(device)
    scaler.count = torch.cat([count, new_count])[order].to(device)
    return n


def trained_widths(run_dir: Path, cfg: Config) -> tuple[int, int]:
    """(A, P) the run's network was built for."""
    change = CatalogChange.load(run_dir)
    if change is not None:
        return change.widths
    return catalog_widths(load_catalog(cfg.catalog))


class ChangeSteps(Observer):
    """The steps a changed SKU set adds around a Trainer (built on the changed catalog at
    the network's feature widths, `change.widths`): new SKUs' reward statistics seeded from
    their category's, an evaluation at the change, and new_skus_* scalars. `old_ids` None:
    the SKU set does not change now (a run changed earlier, resumed through here)."""

    def __init__(self, core: RunCore, learner: Learner, eval_catalog: Catalog | None, change: CatalogChange,
                 old_ids: np.ndarray | None) -> None:
        self.run_dir, self.eval_catalog, self.change = core.run_dir, eval_catalog, change
        self._scores: dict[str, Any] = {}
        run_dir = core.run_dir
        if old_ids is not None and change.added is not None:  # changed now: seed statistics, re-tune the baseline
            baseline = run_dir / BASELINE_FILE
            if baseline.is_file():
                baseline.rename(run_dir / f"baseline.before_iter_{learner.iteration}.json")
            seeded = seed_new_sku_stats(learner.reward_scaler, core.catalog, change.added)
            print(f"skurl: --catalog: from iteration {change.iteration} on {change.skus} SKUs: "
                  f"{change.added.size} added, {change.removed} removed (shards recomputed; "
                  f"{seeded} new SKUs' reward statistics start from their category's)", file=sys.stderr)
            change.save(run_dir)
        self.new = np.asarray(change.added if change.added is not None else [], np.int64)

    def wrap(self, inner: Collectors) -> Collectors:
        """The run's collectors, adding the new SKUs' scalars."""
        return _NewSkuRewards(inner, self.new)

    def evaluation_due(self, it: int) -> bool:
        return bool(self.new.size and self.change.iteration == it)

    def on_scored(self, name: str, result: EvalResult) -> None:
        self._scores[name] = result
        if name == BASELINE and self.new.size and self.change.baseline_new_skus_cost is None:
            self.change.baseline_new_skus_cost = self._new_cost(result)
            self.change.save(self.run_dir)

    def on_evaluated(self, it: int, scalars: Scalars, trained: Scalars) -> None:
        if self.new.size and TRAINED in self._scores:
            cost = self._new_cost(self._scores[TRAINED])
            if cost is not None:
                scalars["new_skus_eval_cost"] = cost
                if self.change.baseline_new_skus_cost is not None:
                    scalars["new_skus_baseline_cost"] = self.change.baseline_new_skus_cost

    def _new_cost(self, result: EvalResult) -> float | None:
        assert self.eval_catalog is not None  # only an evaluating (lead) run scores policies
        mask = np.isin(self.eval_catalog.sku_id, self.new)
        return float(result.per_sku_cost[mask].mean()) if mask.any() else None


class _NewSkuRewards:
    """Collectors whose iteration scalars add the new SKUs' count and mean reward per SKU-day
    (of those in the learner's SKU sample, under ppo.sample_skus)."""

    def __init__(self, inner: Collectors, new_ids: np.ndarray) -> None:
        self.inner, self.new_ids = inner, new_ids

    def collect(self, iteration: int, seed: int, version: int, sample: SampleIndex) -> Collected:
        batch = self.inner.collect(iteration, seed, version, sample)
        if self.new_ids.size:
            batch.scalars["new_skus"] = float(self.new_ids.size)
        rollout = batch.rollout
        mask = np.isin(rollout.sku_ids, self.new_ids)
        index = sample(rollout.num_skus)  # under ppo.sample_skus, the trained sample's (every mode alike)
        if index is not None:
            mask &= np.isin(np.arange(rollout.num_skus), index)
        if mask.any():
            batch.scalars["new_skus_reward_mean"] = float(rollout.rewards[:, mask].mean(dtype=np.float64))
        return batch

    def close(self) -> None:
        self.inner.close()


def prepare(run_dir: str | Path, catalog_path: str | None, overrides: list[str]) -> tuple[Config, CatalogChange, np.ndarray | None]:
    """The resumed run's config (on `catalog_path` if given, or on catalog.* overrides), its
    change record and the previous SKU ids (None when the catalog does not change now)."""
    run_dir = Path(run_dir)
    cfg_file = run_config_file(run_dir, "--resume")
    latest = load_latest(run_dir)
    if latest is None:
        raise no_checkpoint_error(run_dir, f"--resume {run_dir}")
    _, tensors, meta = latest
    saved = load_config(cfg_file)  # the catalog the run trained on until now
    widths = trained_widths(run_dir, saved)
    dim, want = int(tensors["model/obs_norm.mean"].shape[0]), schema_for(*widths).dim
    if dim != want:  # e.g. the run's catalog file was edited in place since it was trained
        raise UserError(f"--resume {run_dir}: the checkpoint's network takes {dim} features, but the run's "
                        f"catalog gives {want} (shelf-life/pipeline widths {widths}); expected the catalog it was trained on")
    moved = ["catalog.kind=file", f"catalog.path={catalog_path}"] if catalog_path else []
    cfg = load_config(cfg_file, [*overrides, *moved])
    change = CatalogChange.load(run_dir) or CatalogChange(widths)
    new = load_catalog(cfg.catalog)  # validated: duplicate ids, bad fields are one line each
    check_fits(new, widths, f"--catalog {catalog_path}" if catalog_path else f"catalog of {cfg_file}")
    if cfg.catalog == saved.catalog:
        return cfg, change, None
    old_ids = np.sort(load_catalog(saved.catalog).sku_id)
    added = np.setdiff1d(new.sku_id, old_ids)
    removed = int(np.setdiff1d(old_ids, new.sku_id).size)
    return cfg, CatalogChange(widths, int(meta["iteration"]), added, removed, len(new)), old_ids


def resume_changed(mode_for: ModeFor, run_dir: str | Path, catalog_path: str | None,
                   overrides: list[str] | None = None, *, baseline: bool = True,
                   stop_after: int | None = None) -> TrainResult:
    """Resume `run_dir` on `catalog_path` (or on its own catalog, keeping the network's
    feature widths of an earlier change), in the mode of `mode_for` (train/run.py)."""
    from skurl.train.loop import Trainer

    cfg, change, old_ids = prepare(run_dir, catalog_path, list(overrides or []))
    trainer = Trainer(cfg, run_dir, mode_for(cfg, Path(run_dir)), resume=True, baseline=baseline,
                      at_least=change.widths)
    evaluator = trainer.evaluator
    steps = ChangeSteps(trainer.core, trainer.learner, evaluator.catalog if evaluator else None, change, old_ids)
    trainer.observe(steps)
    trainer.wrap(steps.wrap)
    return trainer.run(stop_after)
