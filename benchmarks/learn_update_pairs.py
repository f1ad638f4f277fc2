"""The fused PPO update against autograd's (the same bits), paired and interleaved in one
process: on a shared, noisy machine a burst of other load falls on both alike.

One Learner per variant, the same synthetic rollout as `skurl bench learn`; after a warm-up
update each, `--pairs` rounds time one update of each, in alternating order. Prints the
median wall and CPU seconds per update of each variant, their ratios, and the load average.

    .venv/bin/python benchmarks/learn_update_pairs.py --transitions 50000 --pairs 5 --threads 2
    .venv/bin/python benchmarks/learn_update_pairs.py --threads 1 --set ppo.side_by_side=false
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import torch

from skurl.commands.bench_train import _random_rollout
from skurl.config import load_config
from skurl.learn.learner import Learner

OBS_DIM, DAYS = 70, 100  # as `skurl bench learn`


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=None)
    ap.add_argument("--set", action="append", default=[], dest="overrides")
    ap.add_argument("--transitions", type=int, default=50_000)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = load_config(args.config, args.overrides)
    rollout = _random_rollout(DAYS, args.transitions // DAYS, OBS_DIM, cfg.policy.actions.n)
    learners = {"autograd": Learner(cfg, OBS_DIM, cfg.policy.actions.n), "fused": Learner(cfg, OBS_DIM, cfg.policy.actions.n)}
    learners["autograd"].fused = False
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in learners}
    for learner in learners.values():
        learner.update(rollout)  # warm-up
    loads = [os.getloadavg()[0]]
    for k in range(args.pairs):
        for name in (("autograd", "fused") if k % 2 == 0 else ("fused", "autograd")):
            learner = learners[name]
            rollout.policy_version = learner.version
            w, c = time.perf_counter(), time.process_time()
            learner.update(rollout)
            times[name].append((time.perf_counter() - w, time.process_time() - c))
        loads.append(os.getloadavg()[0])
    same = all(torch.equal(a, b) for a, b in zip(learners["autograd"].model.state_dict().values(),
                                                  learners["fused"].model.state_dict().values(), strict=True))
    med = {name: {"wall_s": float(np.median([t[0] for t in ts])), "cpu_s": float(np.median([t[1] for t in ts]))}
           for name, ts in times.items()}
    print(json.dumps({
        "transitions": rollout.transitions, "epochs": cfg.ppo.epochs, "minibatch": cfg.ppo.minibatch,
        "threads": args.threads, "side_by_side": cfg.ppo.side_by_side, "pairs": args.pairs, "median": med,
        "fused_over_autograd_wall": med["fused"]["wall_s"] / med["autograd"]["wall_s"],
        "fused_over_autograd_cpu": med["fused"]["cpu_s"] / med["autograd"]["cpu_s"],
        "same_weights": same, "load_avg_1m": [round(x, 2) for x in loads],
        "runs": {name: [[round(w, 3), round(c, 3)] for w, c in ts] for name, ts in times.items()},
    }))


if __name__ == "__main__":
    main()
