"""How fast could `skurl bench learn` be on this machine if the learner did nothing but its
matrix multiplies? An upper bound for the transitions x epochs/s figure (issue 3 asks for
150k on CPU).

More: docs/benchmarks.md (benchmarks/learn_gemm_bound.py)."""

from __future__ import annotations

import argparse
import json

import torch

from skurl.config import load_config
from skurl.learn.gemm_bound import gemm_bound, peak_sgemm_gflops
from skurl.policy.nets import ActorCritic

BENCH_OBS_DIM = 70  # what `skurl bench learn` uses (commands/bench_train.py)
TARGET = 150_000  # issue 3: transitions x epochs/s on CPU


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=None)
    ap.add_argument("--set", action="append", default=[], dest="overrides")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (the learner uses the machine's cores)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = load_config(args.config, args.overrides)
    model = ActorCritic(BENCH_OBS_DIM, cfg.policy.actions.n, cfg.policy.hidden)
    batch = cfg.ppo.minibatch
    # the learner's schedule too: policy and value nets side by side, one thread each (ppo.side_by_side)
    side_by_side = cfg.ppo.side_by_side and args.threads >= 2
    bound = gemm_bound(model, batch, side_by_side=side_by_side)
    rows, gemm_s = bound["gemms"], bound["gemm_ms_per_minibatch"] / 1e3
    out = {
        "threads": args.threads, "schedule": bound["schedule"], "schedule_ms": bound["schedule_ms"], "minibatch": batch, "hidden": list(cfg.policy.hidden),
        "actions": cfg.policy.actions.n, "obs_dim": BENCH_OBS_DIM,
        "flops_per_transition_epoch": bound["flops_per_transition_epoch"],
        "gemm_ms_per_minibatch": round(gemm_s * 1e3, 3),
        "gemm_gflops": round(bound["gemm_gflops"], 1),
        "peak_sgemm_gflops": round(peak_sgemm_gflops(), 1),
        "ceiling_transition_epochs_per_s": round(batch / gemm_s),
        "target": TARGET,
        "gemm_share_of_target_budget": round(gemm_s / (batch / TARGET), 3),
        "gemms": rows,
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return
    for r in rows:
        shape = "" if bound["schedule"] == "side by side" else f" [{r['m']}x{r['k']}]@[{r['k']}x{r['n']}]"
        print(f"  {r['gemm']:<40}{shape} {r['ms']:.3f} ms {r['gflops']:.0f} GFLOP/s")
    print(f"{out['flops_per_transition_epoch'] / 1e3:.0f} kFLOP per transition-epoch; GEMMs alone "
          f"{out['gemm_ms_per_minibatch']:.2f} ms per minibatch of {batch} ({out['gemm_gflops']} GFLOP/s; "
          f"best sgemm here {out['peak_sgemm_gflops']} GFLOP/s, {args.threads} threads)")
    print(f"ceiling with zero non-GEMM work: {out['ceiling_transition_epochs_per_s']:,} transitions x epochs/s; "
          f"the GEMMs alone use {out['gemm_share_of_target_budget']:.0%} of the time budget of {TARGET:,}/s")


if __name__ == "__main__":
    main()
