"""train.keep_best: the run's result is the best policy of its in-training evaluations,
picked on validation seeds.

PPO's greedy policy swings between evaluations (on the embedded synthetic catalog by up to
4% of profit between evaluations 10 iterations apart, late in training), so the last
iteration's weights are one draw, not the best the run found. Each evaluated policy is also
scored on a validation seed (the baseline's first tuning seed, policy/tuning.py: never one
of the held-out evaluation seeds), and the best one's checkpoint is kept in RUN_DIR/best.
The run's final eval.json (on the held-out seeds, as before) and `skurl eval --run` use it,
so the policy is picked without looking at the seeds it is reported on. Scores are only
compared on the same evaluation SKUs: a run resumed on a changed catalog starts afresh.
"""

from __future__ import annotations

import math
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from skurl.catalog import Catalog
from skurl.catalog.schema import catalog_digest
from skurl.collect.evaluate import EvalResult
from skurl.learn.checkpoint import (
    BEST_DIR,
    DamagedCheckpointError,
    best_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from skurl.policy.tuning import tuning_seed

if TYPE_CHECKING:
    from skurl.learn.learner import Learner

SCORE_KEY = "validation_score"


def validation_seed(eval_seed: int) -> int:
    return tuning_seed(eval_seed)


def objective(profit: float, cost: float, reward: str) -> float:
    """Higher is better: profit per SKU-day, or minus the cost under sim.reward=cost."""
    return profit if reward == "profit" else -cost


def validation_score(result: EvalResult, reward: str) -> float:
    return objective(result.avg_profit_per_sku_day, result.avg_cost_per_sku_day, reward)


class BestKeeper:
    """The best validation score so far and its checkpoint (restored from RUN_DIR/best, so a
    resumed run keeps comparing against the policy the first part of the run kept, unless
    it was scored on other SKUs)."""

    def __init__(self, run_dir: str | Path, eval_catalog: Catalog, start: int = 0) -> None:
        """`start`: the learner's iteration the run starts from (0, or its checkpoint's)."""
        self.root = Path(run_dir) / BEST_DIR
        self.digest = catalog_digest(eval_catalog)
        self.path = best_checkpoint(run_dir)
        self.score = -math.inf
        self.iteration: int | None = None  # the kept policy's: after this many updates
        if self.path is None:
            return
        try:
            _, meta = load_checkpoint(self.path)  # checks its sha256: it may be shipped at the end
        except DamagedCheckpointError as exc:
            print(f"skurl: {exc}; the kept best policy is dropped (later evaluations pick anew)", file=sys.stderr)
            shutil.rmtree(self.path)
            self.path = None
            return
        if meta.get("catalog_sha256") != self.digest:
            self.path = None  # scored on other SKUs: not a candidate (the next kept one replaces it)
        elif int(meta["iteration"]) > start:
            # Kept after the checkpoint the run restarts from (it crashed before its next
            # checkpoint, or a fresh run reuses the dir of one that crashed before its first):
            # the redone iterations find it again, or, with changed settings, do not. Removed,
            # as save_checkpoint(keep=1) would keep it over an earlier iteration's policy.
            shutil.rmtree(self.path)
            self.path = None
        else:
            self.score, self.iteration = float(meta[SCORE_KEY]), int(meta["iteration"])

    def offer(self, learner: Learner, score: float, seed: int) -> bool:
        """Keep the learner's current state if `score` beats the best so far (a tie keeps
        the earlier policy)."""
        if not score > self.score:
            return False
        meta = {SCORE_KEY: score, "validation_seed": seed, "catalog_sha256": self.digest}
        self.path = save_checkpoint(self.root, learner, meta=meta, keep=1)
        self.score, self.iteration = score, int(learner.iteration)
        return True
