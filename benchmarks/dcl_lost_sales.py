"""Deep Controlled Learning (learn/dcl.py) on Zipkin's lost-sales instances: start from the
warm start of the shipped config (the tuned capped base-stock cloned into the policy net),
run K iterations of CRN-rollout policy iteration, and print each policy's held-out cost and
gap to the exact optimum next to the time spent.

    .venv/bin/python benchmarks/dcl_lost_sales.py --instances L2p9 L4p39 --iterations 3

Everything runs in this process, on the config's training env (catalog, grid, network size,
eval settings from --config and --set); the held-out evaluation is `skurl eval --run`'s
(eval.seed, eval.days after eval.warmup, eval.skus SKUs).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lost_sales_grid import REFERENCE, parse_instances


def run(lead: int, p: int, args: argparse.Namespace) -> list[dict]:
    import torch

    from skurl.collect.evaluate import eval_subset, evaluate
    from skurl.config import load_config
    from skurl.learn.dcl import DclSpec
    from skurl.learn.dcl_parts import label_states
    from skurl.learn.imitate import clone, record
    from skurl.learn.learner import Learner
    from skurl.policy.baselines import make_policy
    from skurl.policy.learned import LearnedPolicy
    from skurl.policy.rollout_q import learned_rollout
    from skurl.train.core import build_core, set_threads
    from skurl.train.warm_start import teacher_params

    sets = [f"catalog.lead_time={lead}", f"catalog.lost_sale_cost={p}", f"train.torch_threads={args.threads}",
            f"sim.threads={args.threads}", *args.set]
    cfg = load_config(args.config, sets)
    set_threads(cfg)
    t = cfg.train
    optimal = REFERENCE[(lead, p)][0]
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        began = time.perf_counter()
        core = build_core(cfg, Path(tmp), resume=False)
        learner = Learner(cfg, core.schema.dim, core.grid.n, "cpu")
        model, env = learner.model, core.local_env(0)
        eval_catalog = eval_subset(core.catalog, cfg.eval.skus)
        eval_grid = core.grid.bind(eval_catalog) if core.grid.needs_catalog else core.grid

        def score(stage: str, k: int, extra: dict) -> None:
            policy = LearnedPolicy(model, eval_grid)
            res = evaluate(eval_catalog, cfg.sim, policy, days=cfg.eval.days, warmup=cfg.eval.warmup,
                           seed=cfg.eval.seed)
            cost = res.avg_cost_per_sku_day
            row = {"instance": f"L{lead}p{p}", "stage": stage, "iteration": k, "cost": cost, "cost_se": res.cost_se,
                   "optimal": optimal, "gap_pct": 100 * (cost / optimal - 1),
                   "seconds": time.perf_counter() - began, **extra}
            rows.append(row)
            print(f"L{lead}p{p:<3} {stage:<6} {k:>2} {cost:>8.4f} {res.cost_se:>7.4f} {optimal:>8.4f} "
                  f"{row['gap_pct']:>+8.3f}% {row['seconds']:>7.0f} "
                  + " ".join(f"{key}={v:.4g}" for key, v in extra.items()), flush=True)

        params, _ = teacher_params(core, env.catalog)
        teacher = make_policy(t.warm_start, env.catalog, cfg.sim, params)
        demos = record(env, teacher, core.grid, seed=t.seed, episodes=t.warm_start_episodes, max_skus=t.warm_start_skus)
        clone(model, demos, steps=t.warm_start_steps, smoothing=t.warm_start_smoothing, seed=t.seed,
              normalize_obs=cfg.ppo.normalize_obs, stats_decay=cfg.ppo.stats_decay,
              max_grad_norm=cfg.ppo.max_grad_norm, device=torch.device("cpu"))
        score("clone", 0, {})
        spec = DclSpec(states=args.states, horizon=args.horizon, budget=args.budget, warmup=args.warmup,
                       spread=args.spread, window=args.window, temperature=args.temperature,
                       confirm=args.confirm, confirm_z=args.confirm_z)
        train_grid = core.grid.bind(env.catalog) if core.grid.needs_catalog else core.grid
        for k in range(args.iterations):
            policy = LearnedPolicy(model, train_grid)
            lab = label_states(env, policy, learned_rollout(policy), core.grid, spec, seed=t.seed, iteration=k)
            fit = clone(model, lab.demos, steps=args.fit_steps, smoothing=0.0, seed=t.seed + 1 + k,
                        normalize_obs=False, stats_decay=cfg.ppo.stats_decay,
                        max_grad_norm=cfg.ppo.max_grad_norm, device=torch.device("cpu"))
            score("dcl", k + 1, {"label_changed": lab.changed, "q_gap": lab.q_gap,
                                 "fit_accuracy": fit["warm_start_accuracy"], "rollout_Msku_days": lab.sku_days / 1e6})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--instances", nargs="+", default=["L2p9"], help="LxPy names, or 'all'")
    ap.add_argument("--iterations", type=int, default=3, help="DCL iterations after the warm start")
    ap.add_argument("--states", type=int, default=8000, help="labelled states per iteration")
    ap.add_argument("--horizon", type=int, default=40, help="rollout days H")
    ap.add_argument("--budget", type=int, default=200, help="rollouts per state")
    ap.add_argument("--warmup", type=int, default=20, help="days of the policy before states are sampled")
    ap.add_argument("--spread", type=int, default=8, help="days the states are spread over")
    ap.add_argument("--window", type=int, default=0, help="candidate actions: the policy's +- this (0: all)")
    ap.add_argument("--temperature", type=float, default=0.0,
                    help="0: fit the Q-best label; > 0: soft targets, softmax of Q / (this x its standard error)")
    ap.add_argument("--confirm", type=int, default=0, help="fresh paired rollouts testing a changed label")
    ap.add_argument("--confirm-z", type=float, default=2.0, help="t-statistic a changed label needs")
    ap.add_argument("--fit-steps", type=int, default=1500, help="cross-entropy minibatch steps per iteration")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--config", default="configs/lost_sales.yaml")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    print(f"{'inst':<6} {'stage':<6} {'it':>2} {'cost':>8} {'se':>7} {'optimal':>8} {'gap':>9} {'secs':>7}", flush=True)
    rows = [r for lead, p in parse_instances(args.instances) for r in run(lead, p, args)]
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
