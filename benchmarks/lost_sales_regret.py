"""Where a trained lost-sales policy loses against the optimal one, decision by decision.

Runs the run's greedy policy (as `skurl eval --run` does) on a lost-sales instance, and at
every decision after a warm-up looks up the exact optimal order of the same state (relative
value iteration, lost_sales_optimal.py) and the regret of the order taken: the one-step
lookahead E[relative value after the order] minus its minimum over orders. The mean regret
per decision approximates the policy's excess average cost; the histogram of (order -
optimal order) says whether it errs by noise (symmetric) or by bias (one-sided, e.g.
too-short credit horizons making the policy under-order).

    .venv/bin/python benchmarks/lost_sales_regret.py RUN_DIR [--skus 1000] [--days 300] [--sample]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lost_sales_optimal import (
    HOLDING,
    MEAN,
    backorder_level,
    build_model,
    enumerate_states,
    relative_value_iteration,
)


class PolicyProbe:
    """Why the policy errs: how sharp its action distribution is (probability of its
    greedy action, of the optimal action) and how well its value net ranks states
    against the exact relative values h(s) (V_net should be -h + const: the correlation
    of V_net with -h over visited states, and of their differences over random pairs)."""

    def __init__(self) -> None:
        self.p_greedy: list[np.ndarray] = []
        self.p_optimal: list[np.ndarray] = []
        self.v_net: list[np.ndarray] = []
        self.v_exact: list[np.ndarray] = []

    def add(self, policy: object, features: np.ndarray, optimal_q: np.ndarray, v_exact: np.ndarray) -> None:
        import torch

        x = torch.from_numpy(np.ascontiguousarray(features, np.float32))
        with torch.inference_mode():
            probs = torch.softmax(policy.nets.logits(x).double(), -1).numpy()  # type: ignore[attr-defined]
            values = policy.nets.values(x).double().numpy()  # type: ignore[attr-defined]
        q = np.minimum(optimal_q, probs.shape[1] - 1)
        self.p_greedy.append(probs.max(1))
        self.p_optimal.append(probs[np.arange(q.size), q])
        self.v_net.append(values.reshape(-1))
        self.v_exact.append(-v_exact)

    def report(self, pairs: int = 200_000, seed: int = 0) -> None:
        pg, po = np.concatenate(self.p_greedy), np.concatenate(self.p_optimal)
        vn, ve = np.concatenate(self.v_net), np.concatenate(self.v_exact)
        rng = np.random.default_rng(seed)
        i, j = rng.integers(0, vn.size, pairs), rng.integers(0, vn.size, pairs)
        dn, de = vn[i] - vn[j], ve[i] - ve[j]
        slope = float(np.dot(dn, de) / max(np.dot(de, de), 1e-12))
        print(f"policy: mean P(greedy action) {pg.mean():.3f}, mean P(optimal action) {po.mean():.3f}; "
              f"critic vs exact -h(s): corr {np.corrcoef(vn, ve)[0, 1]:.3f}, "
              f"slope of V_net differences on exact ones {slope:.3g} (net units per cost unit)")


def lookahead(lead: int, penalty: float, margin: int = 2,
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, float, np.ndarray]:
    """Per (state, order) pair the expected relative value after ordering; each state's
    first pair and the lookup of states; the bound; the optimal average cost; the
    relative value of each state."""
    bound = backorder_level(MEAN, lead, HOLDING, penalty) + margin
    model = build_model(lead, bound, MEAN, HOLDING, penalty)
    g, v, _ = relative_value_iteration(model)
    cont = np.bincount(model.out_pair, weights=model.out_prob * v[model.out_next], minlength=model.pair_state.size)
    _, lookup = enumerate_states(lead, bound)
    return cont, model.pair_first, lookup, bound, g, v


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run", help="RUN_DIR of `skurl train --config configs/lost_sales.yaml`")
    ap.add_argument("--skus", type=int, default=1000)
    ap.add_argument("--days", type=int, default=300, help="decisions scored per SKU (after 100 warm-up days)")
    ap.add_argument("--sample", action="store_true", help="sampled actions instead of greedy")
    args = ap.parse_args(argv)

    from skurl.catalog import load_catalog
    from skurl.collect.evaluate import make_env
    from skurl.config import load_config
    from skurl.policy.learned import LearnedPolicy

    warmup = 100
    cfg = load_config(Path(args.run) / "config.yaml", [f"catalog.skus={args.skus}", f"sim.days={warmup + args.days}"])
    lead, penalty = cfg.catalog.lead_time, cfg.catalog.lost_sale_cost
    cont, first, lookup, bound, g, v = lookahead(lead, penalty)
    last = np.append(first[1:], cont.size)
    best = np.minimum.reduceat(cont, first)
    catalog = load_catalog(cfg.catalog)
    env = make_env(catalog, cfg.sim)
    policy = LearnedPolicy.from_run(args.run, sample=args.sample, sku_ids=catalog.sku_id)
    obs = env.reset(cfg.eval.seed, 0)
    regrets, deltas, outside = [], [], 0
    probe = PolicyProbe()
    for day in range(warmup + args.days):
        orders = policy.orders(obs)
        if day >= warmup:
            state = np.concatenate([obs.raw.on_hand[:, None], obs.raw.pipeline[:, :lead - 1]], axis=1).astype(np.int64)
            inside = state.sum(axis=1) <= bound
            outside += int((~inside).sum())
            s = lookup[tuple(state[inside].T)]
            q = np.minimum(orders[inside].astype(np.int64), last[s] - first[s] - 1)  # orders past the bound: its edge
            regrets.append(cont[first[s] + q] - best[s])
            optimal_q = np.array([np.argmin(cont[a:b]) for a, b in zip(first[s], last[s], strict=True)])
            deltas.append(orders[inside].astype(np.int64) - optimal_q)
            probe.add(policy, obs.features[inside], optimal_q, v[s])
        obs = env.step(orders).obs
    regret, delta = np.concatenate(regrets), np.concatenate(deltas)
    values, counts = np.unique(delta, return_counts=True)
    print(f"L{lead} p{penalty:g}: optimal average cost {g:.4f}; mean regret per decision {regret.mean():.4f} "
          f"({100 * regret.mean() / g:.2f}% of it); optimal decisions {np.mean(delta == 0):.1%}; "
          f"states past the bound (skipped) {outside}")
    print("order - optimal order:", {int(v): int(c) for v, c in zip(values, counts, strict=True)})
    probe.report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
