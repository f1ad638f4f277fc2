"""How fast could `skurl bench learn` be on this machine if the learner did nothing but its
matrix multiplies? An upper bound for the transitions x epochs/s figure (issue 3 asks for
150k on CPU).

More: docs/benchmarks.md (benchmarks/learn_gemm_bound.py)."""

from __future__ import annotations

import argparse
import json
import time

import torch
from torch import nn

from skurl.config import load_config
from skurl.policy.nets import ActorCritic

BENCH_OBS_DIM = 70  # what `skurl bench learn` uses (commands/bench_train.py)
TARGET = 150_000  # issue 3: transitions x epochs/s on CPU


Operands = tuple[torch.Tensor, torch.Tensor]


def gemm_operands(model: ActorCritic, batch: int) -> list[tuple[str, Operands]]:
    """(name, (A, B)) of every GEMM A @ B in one forward + backward of a minibatch."""
    gemms = []
    for net_name, net in (("policy", model.policy), ("value", model.value)):
        layers = [m for m in net.modules() if isinstance(m, nn.Linear)]
        for j, layer in enumerate(layers):
            i, o = layer.in_features, layer.out_features
            x, g, w = torch.randn(batch, i), torch.randn(batch, o), torch.randn(o, i)
            tag = f"{net_name}.{j} {i}->{o}"
            gemms.append((f"{tag} forward", (x, w.t())))
            gemms.append((f"{tag} weight grad", (g.t(), x)))
            if j > 0:
                gemms.append((f"{tag} input grad", (g, w)))
    return gemms


def seconds_per_gemm(a: torch.Tensor, b: torch.Tensor, min_seconds: float = 0.3) -> float:
    """Best of 3 timed rounds of C = A @ B, each at least `min_seconds` long."""
    c = torch.empty(a.shape[0], b.shape[1])
    for _ in range(20):
        torch.mm(a, b, out=c)
    best = float("inf")
    for _ in range(3):
        reps, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < min_seconds:
            torch.mm(a, b, out=c)
            reps += 1
        best = min(best, elapsed / reps)
    return best


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
    rows = []
    for name, (a, b) in gemm_operands(model, batch):
        s = seconds_per_gemm(a, b)
        (m, k), n = a.shape, b.shape[1]
        rows.append({"gemm": name, "m": m, "k": k, "n": n, "ms": s * 1e3, "gflops": 2 * m * k * n / s / 1e9})
    gemm_s = sum(r["ms"] for r in rows) / 1e3
    flops = sum(2 * r["m"] * r["k"] * r["n"] for r in rows)
    square = seconds_per_gemm(torch.randn(2048, 2048), torch.randn(2048, 2048), 1.0)
    out = {
        "threads": args.threads, "minibatch": batch, "hidden": list(cfg.policy.hidden),
        "actions": cfg.policy.actions.n, "obs_dim": BENCH_OBS_DIM,
        "flops_per_transition_epoch": flops / batch,
        "gemm_ms_per_minibatch": round(gemm_s * 1e3, 3),
        "gemm_gflops": round(flops / gemm_s / 1e9, 1),
        "peak_sgemm_gflops": round(2 * 2048**3 / square / 1e9, 1),
        "ceiling_transition_epochs_per_s": round(batch / gemm_s),
        "target": TARGET,
        "gemm_share_of_target_budget": round(gemm_s / (batch / TARGET), 3),
        "gemms": rows,
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return
    for r in rows:
        print(f"  {r['gemm']:<32} [{r['m']}x{r['k']}]@[{r['k']}x{r['n']}] {r['ms']:.3f} ms {r['gflops']:.0f} GFLOP/s")
    print(f"{out['flops_per_transition_epoch'] / 1e3:.0f} kFLOP per transition-epoch; GEMMs alone "
          f"{out['gemm_ms_per_minibatch']:.2f} ms per minibatch of {batch} ({out['gemm_gflops']} GFLOP/s; "
          f"best sgemm here {out['peak_sgemm_gflops']} GFLOP/s, {args.threads} threads)")
    print(f"ceiling with zero non-GEMM work: {out['ceiling_transition_epochs_per_s']:,} transitions x epochs/s; "
          f"the GEMMs alone use {out['gemm_share_of_target_budget']:.0%} of the time budget of {TARGET:,}/s")


if __name__ == "__main__":
    main()
