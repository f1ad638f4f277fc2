"""A training run's policy, loaded from its run directory: config, the checkpoint
train.keep_best kept or the newest intact one, and the grid centre it was trained with.
Loading reads checkpoints (learn/), so it lives here, not with LearnedPolicy (policy/).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from skurl.catalog.schema import Catalog
from skurl.config import load_config
from skurl.errors import UserError
from skurl.learn.checkpoint import (
    best_checkpoint,
    first_intact_model,
    list_checkpoints,
    no_checkpoint_error,
)
from skurl.policy.grid_center import CENTER_FILE, load_center
from skurl.policy.learned import LearnedPolicy, grid_for, run_config_file
from skurl.policy.nets import ActorCritic


def policy_of_run(run_dir: str | Path, *, catalog: Catalog | None = None, **kw: Any) -> LearnedPolicy:
    """The policy of a training run: RUN_DIR/config.yaml + the checkpoint train.keep_best
    kept in RUN_DIR/best, else its newest, skipping damaged ones for the next (the first
    intact); `catalog`: the SKUs it will order for, in the env's row order (needed by
    policy.actions.kind=cover); `kw` goes to LearnedPolicy."""
    run = Path(run_dir)
    cfg = load_config(run_config_file(run, "run"))
    best = best_checkpoint(run) if cfg.train.keep_best else None
    candidates = ([best] if best is not None else []) + list_checkpoints(run)[::-1]
    if not candidates:
        raise no_checkpoint_error(run, f"run '{run}'")
    path, state, meta = first_intact_model(candidates)
    info = {"run": str(run), "checkpoint": path.name, "iteration": meta["iteration"], "version": meta["version"],
            **({"selected": "best"} if path == best else {})}
    grid = grid_for(cfg)
    if grid.needs_center:  # only a tuned cover grid reads the run's centre
        center = load_center(run)
        if center is None:
            raise UserError(f"run '{run}': policy.actions.z_center=tuned but no {CENTER_FILE} (expected the "
                            "file `skurl train` writes before its first iteration)")
        grid = grid.with_center(center)
    return LearnedPolicy(ActorCritic.from_state(state), grid if catalog is None else grid.bind(catalog),
                         info=info, **kw)
