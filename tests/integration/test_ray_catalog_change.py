"""`skurl train --mode ray --resume RUN --catalog NEW`: the Ray placements (2 simulator
workers) are recomputed for a catalog with 10% of the SKUs removed and 10% added, at the
network's feature widths; the new SKUs show in the metrics."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

ray = pytest.importorskip("ray")

from test_catalog_change import CHANGED, SETTINGS, changed_catalog, synthetic  # noqa: E402
from test_ray_mode import local_ray  # noqa: E402, F401 (the module's Ray instance)

from skurl.catalog.io import write_catalog  # noqa: E402
from skurl.cli import main  # noqa: E402
from skurl.config import load_config  # noqa: E402
from skurl.learn.checkpoint import latest_checkpoint, load_checkpoint  # noqa: E402
from skurl.modes.ray import wiring as ray_mode  # noqa: E402
from skurl.telemetry.logger import read_metrics  # noqa: E402
from skurl.train import run as training  # noqa: E402


def test_ray_resume_on_a_changed_catalog(tmp_path: Path) -> None:
    old = synthetic(300, seed=3)
    write_catalog(old, tmp_path / "old.csv")
    run_dir = tmp_path / "run"
    cfg = load_config(None, [*SETTINGS, f"catalog.path={tmp_path / 'old.csv'}", "ray.num_workers=2"])
    training.start(ray_mode.mode, cfg, run_dir, baseline=False)
    new = changed_catalog(old)
    write_catalog(new, tmp_path / "new.csv")
    assert main(["train", "--mode", "ray", "--resume", str(run_dir), "--catalog", str(tmp_path / "new.csv"),
                 "--iterations", "3", "--no-baseline"]) == 0
    last = read_metrics(run_dir / "metrics.jsonl")[-1]
    assert last["iteration"] == 2 and last["new_skus"] == CHANGED and last["transitions"] == 10 * len(new)
    assert np.isfinite(last["new_skus_reward_mean"]) and last["new_skus_eval_cost"] > 0
    ids = load_checkpoint(latest_checkpoint(run_dir))[0]["reward_scaler/ids"]
    assert torch.equal(ids, torch.from_numpy(np.sort(new.sku_id)))
