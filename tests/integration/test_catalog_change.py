"""`skurl train --resume RUN --catalog NEW`: a run on a 300-SKU catalog file continues on a
catalog with 10% of its SKUs removed (those with the longest lead times, so NEW alone
would make narrower features) and 10% new ones added; the network carries over, the new
SKUs show in metrics and the report, the removed ones are gone from the learner's
statistics; catalogs with duplicate ids or that need wider features are one-line errors."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from skurl.catalog import load_catalog
from skurl.catalog.io import write_catalog
from skurl.catalog.schema import Catalog
from skurl.cli import main
from skurl.config import load_config
from skurl.learn.checkpoint import latest_checkpoint, load_checkpoint
from skurl.modes import colocated
from skurl.policy.learned import CONFIG_FILE
from skurl.sim.layout import catalog_widths
from skurl.telemetry.logger import read_metrics
from skurl.train import run as training
from skurl.train.catalog_change import CHANGE_FILE, CatalogChange

SKUS, CHANGED = 300, 30
SETTINGS = ["catalog.kind=file", "sim.days=10", "policy.hidden=[16,16]", "ppo.epochs=1", "ppo.minibatch=512",
            "ppo.reward_scale=sku", "train.iterations=2", "train.checkpoint_every=1", "train.eval_every=0",
            "train.torch_threads=1", "eval.days=5", "eval.warmup=1"]


def synthetic(skus: int, seed: int) -> Catalog:
    return load_catalog(load_config(None, [f"catalog.skus={skus}", f"catalog.seed={seed}"]).catalog)


def changed_catalog(old: Catalog) -> Catalog:
    """`old` without its CHANGED longest-pipeline SKUs (no substitution group members, so
    no group loses half of itself) plus CHANGED new SKUs (new ids, fitting the widths)."""
    pipeline = old.lead_time.astype(np.int64) + old.delay_max
    candidates = np.flatnonzero(old.group < 0)
    removed = candidates[np.argsort(-pipeline[candidates], kind="stable")[:CHANGED]]
    kept = old.subset(np.setdiff1d(np.arange(len(old)), removed))
    new = synthetic(CHANGED, seed=99)
    new.sku_id = np.arange(CHANGED, dtype=np.int64) + int(old.sku_id.max()) + 1
    new.group[:] = -1
    new.lead_time = np.minimum(new.lead_time, 3)
    new.delay_max[:] = 0
    new.shelf_life = np.minimum(new.shelf_life, old.max_shelf_life)
    return Catalog.concat([kept, new])


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Catalog]:
    root = tmp_path_factory.mktemp("change")
    old = synthetic(SKUS, seed=3)
    write_catalog(old, root / "old.csv")
    run_dir = root / "run"
    training.start(colocated.mode, load_config(None, [*SETTINGS, f"catalog.path={root / 'old.csv'}"]), run_dir, baseline=False)
    return root, run_dir, old


def test_resume_on_a_catalog_with_skus_added_and_removed(trained: tuple[Path, Path, Catalog]) -> None:
    root, run_dir, old = trained
    new = changed_catalog(old)
    assert catalog_widths(new)[1] < catalog_widths(old)[1]  # NEW alone would be narrower
    write_catalog(new, root / "new.parquet")
    assert main(["train", "--resume", str(run_dir), "--catalog", str(root / "new.parquet"),
                 "--iterations", "3"]) == 0
    records = read_metrics(run_dir / "metrics.jsonl")
    assert [r["iteration"] for r in records] == [0, 1, 2]
    first = records[2]
    assert first["new_skus"] == CHANGED and first["transitions"] == 10 * len(new)
    assert np.isfinite(first["new_skus_reward_mean"])
    assert first["new_skus_eval_cost"] > 0 and first["new_skus_baseline_cost"] > 0  # from their first iteration
    report = (run_dir / "report.md").read_text()
    assert "## New SKUs" in report and "| 2 | 30 |" in report
    change = CatalogChange.load(run_dir)
    assert change is not None and change.iteration == 2 and change.removed == CHANGED
    assert change.widths == catalog_widths(old)
    tensors, _ = load_checkpoint(latest_checkpoint(run_dir))
    ids = tensors["reward_scaler/ids"]
    assert torch.equal(ids, torch.from_numpy(np.sort(new.sku_id)))  # removed ones gone, new ones in

    # A later plain resume keeps the network's widths (recorded at the change).
    assert main(["train", "--resume", str(run_dir), "--iterations", "4", "--no-baseline"]) == 0
    assert [r["iteration"] for r in read_metrics(run_dir / "metrics.jsonl")] == [0, 1, 2, 3]
    assert (run_dir / CHANGE_FILE).is_file()


def test_bad_new_catalogs_are_one_line_errors(trained: tuple[Path, Path, Catalog], tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    _, run_dir, old = trained
    wide = old.subset(np.arange(len(old)))
    wide.lead_time[5] = 60  # needs 60+ pipeline features; the network has fewer
    write_catalog(wide, tmp_path / "wide.csv")
    write_catalog(old, tmp_path / "ok.csv")
    lines = (tmp_path / "ok.csv").read_text().splitlines()
    dup_file = tmp_path / "dup.csv"
    dup_file.write_text("\n".join([*lines, lines[1]]) + "\n")  # the first SKU twice
    before = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    for path, expected in ((dup_file, "duplicated"), (tmp_path / "wide.csv", "does not fit the trained network")):
        assert main(["train", "--resume", str(run_dir), "--catalog", str(path), "--no-baseline"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and expected in err[0], err
    assert main(["train", "--resume", str(run_dir), "--set", f"catalog.path={tmp_path / 'wide.csv'}"]) == 2
    assert "does not fit the trained network" in capsys.readouterr().err  # --set catalog.* is a change too
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == before  # nothing trained
    # The run's own catalog edited in place (wider than its network), then a change: one line too.
    edited = tmp_path / "edited"
    shutil.copytree(run_dir, edited)
    (edited / CHANGE_FILE).unlink(missing_ok=True)
    cfg = yaml.safe_load((edited / CONFIG_FILE).read_text())
    cfg["catalog"].update(kind="file", path=str(tmp_path / "wide.csv"))
    (edited / CONFIG_FILE).write_text(yaml.safe_dump(cfg))
    assert main(["train", "--resume", str(edited), "--catalog", str(tmp_path / "ok.csv"), "--no-baseline"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the checkpoint's network takes" in err[0], err
