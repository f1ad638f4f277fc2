"""The embedded defaults: what a bare `skurl train` (and, without --config, `config show`,
`eval` and `catalog describe`) sets on top of the config classes' defaults."""

# Without --config, `skurl train` is a laptop-sized job on the synthetic catalog (about four
# minutes on 2 quiet CPU cores): every iteration trains on a fresh sample of SKUs (colocated,
# only the sample's units are simulated). --set keys still override these. 90 iterations: on
# held-out seeds the policy's profit was still rising steeply at 40 (2.4, 3.5, 5.0, 6.9 per SKU-day at
# iterations 10..40, against 9.13 for the tuned forecast-base-stock); at 90 it ended at 9.18.
# Profit vs the tuned baseline on the held-out seed, train.seed 0, 1, 2 (session 8, multiplier
# grid): -2.1%, +0.5%, -15.3% from random weights; +1.3%, -4.0%, -0.5% from the tuned
# forecast-base-stock's clone (train.warm_start, ~20 s); +1.3%, +1.4%, +1.6% when the run also
# ships the policy with the best validation score (train.keep_best: iterations 50, 30, 50 of
# 90). On two other catalogs (catalog.seed 1, 2) that grid ended at -0.3% and -0.7%: its clone
# started 5-11% below the baseline, and PPO fell further before it climbed back.
# Issue 43: 5 PPO epochs of 512-transition minibatches, not 10 of 1024 (the classes'): the same
# 490 Adam steps an iteration on half the arithmetic; learn (93% of the job) took 0.56x the time.
# Held-out profit (benchmarks/embedded_schedule.py, docs/performance.md): the same on catalog.seed
# 1 and 2 (keep-best shipped the clone under both), 0.08% lower on average on catalog.seed 0
# over train.seed 0, 1, 2 (-0.0139, +0.0024, -0.0127 per SKU-day; not significant).
# Fewer Adam steps were tried and not kept (docs/performance.md, "Fewer steps, tried"): 75
# iterations (0.495x the job issue 43 was filed against) and 4 epochs (0.52x) cost 0.09% and
# 0.04% of held-out profit over train.seed 0-4, most of PPO's gain over its clone.
EMBEDDED = ("catalog.skus=2000", "ppo.sample_skus=500", "ppo.reward_scale=sku", "train.iterations=90",
            "train.eval_every=10", "train.warm_start=forecast-s-S", "train.keep_best=true",
            "ppo.epochs=5", "ppo.minibatch=512")
# The grid of the embedded defaults (every --mode): order-up-to actions centred on the
# tuned baseline's own factors (policy/grid_center.py), so the clone is that baseline
# exactly and PPO only learns where to deviate (the multiplier grid, session 9: +1.3%, -0.3%,
# -0.7% profit on catalog.seed 0, 1, 2, and +0.3% total cost on seed 0; figures below).
# Remote collectors (--mode decoupled, ray) run it from their SKUs' catalog rows, the raw
# state in lean env replies and the centre the driver hands them (modes/decoupled/remote_grid.py).
# On this grid several offsets often order the same units (nothing, when stock is high), so
# the entropy bonus can spread the policy's mass for free; at ppo.ent_coef 0.01 entropy crept
# up all run (1.2 -> 1.8-2.0 of ln 21 = 3.0) and on catalog.seed 1 held-out profit fell from
# iteration 30 on (-3.9% by 90). At 0.001 entropy stays near 1 (session 10: profit +1.06%,
# +0.28%, +0.27% and total cost -0.51%, -0.51%, -0.44% on catalog.seed 0, 1, 2; at 0.01:
# +0.81%, +0.34%, +0.20% and -0.61%, -0.19%, -0.37%). Session 13, with the baseline (and so
# the grid centre and the clone) tuned on 10 replicas of each SKU instead of one 100-day
# episode (policy/tuning.py): catalog.seed 0 ended at 9.4714 profit vs 9.3348 (+1.5%; the
# old baseline made 9.2814), total cost -0.6%.
# Session 27: the centre (and the warm start's teacher) is the tuned forecast-driven (s, S),
# forecast-s-S: a quarter of these SKUs pay a fixed cost per order, and their EOQ is 12-157
# days of demand, so ordering up to the level every day paid 29% of forecast-base-stock's
# inventory cost in order costs (docs/dcl.md, "Lots"). The trained policy against the tuned
# forecast-base-stock on catalog.seed 0, 1, 2: inventory cost -33.5%, -22.6%, -30.1%, profit
# +5.25%, +2.08%, +2.19% (on seeds 1 and 2 keep-best shipped the clone: forecast-s-S itself).
EMBEDDED_GRID = ("policy.actions.kind=cover", "policy.actions.z_center=tuned", "policy.actions.n=21",
                 "policy.actions.z_min=-1.5", "policy.actions.z_max=1.5", "ppo.ent_coef=0.001",
                 "policy.actions.center_policy=forecast-s-S")
