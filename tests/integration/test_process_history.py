"""A run's result does not depend on what its process ran before. MKL's default code paths
rounded differently after another run in the same process (a pytest session, a notebook),
so an in-process run and the same run in a fresh process (a torchrun rank) differed in the
last bits; skurl sets MKL_CBWR=AUTO,STRICT when imported (skurl/__init__.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

PPO = ["catalog.skus=240", "sim.days=8", "policy.hidden=[16,16]", "ppo.epochs=2", "ppo.minibatch=256",
       "train.iterations=2", "train.checkpoint_every=1", "train.eval_every=0", "train.torch_threads=1",
       "sim.threads=1", "collect.infer_dtype=float32"]
# Another catalog, reward and action grid: before the fix, running this first changed PPO's weights.
BEFORE = ["catalog.kind=uniform", "catalog.skus=60", "catalog.lead_time=2", "catalog.lost_sale_cost=9",
          "sim.days=24", "sim.backorders=false", "sim.reward=cost", "policy.actions.kind=units",
          "policy.actions.n=12", "policy.actions.step=1", "policy.hidden=[16,16]", "train.iterations=1",
          "train.eval_every=0", "train.torch_threads=1", "sim.threads=1"]

RUNS = """
import json, sys
from pathlib import Path
from safetensors.torch import save_file
from skurl.train import run as training
from skurl.config import load_config
from skurl.modes import colocated
from skurl.learn.checkpoint import latest_checkpoint, model_state
out, runs = Path(sys.argv[1]), json.loads(sys.argv[2])
for i, settings in enumerate(runs):
    training.start(colocated.mode, load_config(None, settings), out / str(i), baseline=False)
state, _ = model_state(latest_checkpoint(out / str(len(runs) - 1)))
save_file({k: v.contiguous() for k, v in state.items()}, str(out / "last.safetensors"))
"""


def last_weights(out: Path, runs: list[list[str]]) -> dict[str, torch.Tensor]:
    """The weights of the last of `runs`, trained one after another in one fresh process."""
    env = {k: v for k, v in os.environ.items() if k != "MKL_CBWR"}  # skurl's own setting
    proc = subprocess.run([sys.executable, "-c", RUNS, str(out), json.dumps(runs)], env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return load_file(out / "last.safetensors")


@pytest.mark.integration
def test_a_run_after_another_in_one_process_equals_it_alone(tmp_path: Path) -> None:
    alone = last_weights(tmp_path / "alone", [PPO])
    after = last_weights(tmp_path / "after", [BEFORE, PPO])
    assert set(alone) == set(after)
    for k in alone:
        assert torch.equal(alone[k], after[k]), k
