"""Issue 42, defect 14: two identical runs (separate processes, as a user runs them twice)
write byte-identical checkpoints, rng/* included."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

from skurl.learn.checkpoint import latest_checkpoint, load_checkpoint

SRC = Path(__file__).resolve().parents[2] / "src"
TINY = ["catalog.skus=24", "sim.days=4", "policy.hidden=[8,8]", "ppo.epochs=1", "ppo.minibatch=64",
        "train.iterations=1", "train.checkpoint_every=1", "train.eval_every=0", "sim.threads=1",
        "train.torch_threads=1"]


def _train(run_dir: Path) -> dict[str, torch.Tensor]:
    sets = [a for kv in TINY for a in ("--set", kv)]
    subprocess.run([sys.executable, "-m", "skurl.cli", "train", "--run-dir", str(run_dir), "--no-baseline",
                    *sets], check=True, capture_output=True, timeout=600,
                   env={**os.environ, "PYTHONPATH": str(SRC)})
    path = latest_checkpoint(run_dir)
    assert path is not None
    return load_checkpoint(path)[0]


def test_identical_runs_write_identical_checkpoints(tmp_path: Path) -> None:
    a, b = _train(tmp_path / "a"), _train(tmp_path / "b")
    assert set(a) == set(b) and any(k.startswith("rng/") for k in a)
    for k in a:
        assert torch.equal(a[k], b[k]), k
