"""Zipkin's lost-sales instances with long lead times (6, 8, 10), where exact DP is out of
reach: the best base-stock and the best capped base-stock (Xin 2021) found by skurl's tuner.

Poisson mean 5, h = 1, p in {4, 9, 19, 39}, lost sales, sim.reward=cost. Each policy is
tuned on tuning seeds (the CRN search of `skurl eval --tune`, lost_sales_base_stock.py's
path) and scored on the same held-out evaluation seeds, so the two columns are paired;
the capped base-stock is the bar a learned policy must beat on these instances.

    .venv/bin/python benchmarks/lost_sales_long_lead.py [--lead 6 8 10] [--penalty 4 9] [--json out.json]
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from lost_sales_base_stock import instance_parser, run_instance

LEADS = (6, 8, 10)


def main(argv: list[str] | None = None) -> int:
    ap = instance_parser(__doc__.split("\n")[0], LEADS)
    args = ap.parse_args(argv)
    rows = []
    print(f"{'L':>2} {'p':>4} {'S':>3} {'base-stock':>17} {'S':>3} {'r':>3} {'capped base-stock':>17} "
          f"{'gain %':>6} {'s':>6}")
    for lead, p in itertools.product(args.lead, args.penalty):
        plain = run_instance(lead, p, args, "base-stock")
        capped = run_instance(lead, p, args, "capped-base-stock")
        gain = 100 * (1 - capped["eval_cost"] / plain["eval_cost"])
        rows.append({"lead_time": lead, "penalty": p, "base_stock": plain, "capped_base_stock": capped,
                     "capped_gain_pct": round(gain, 3)})
        print(f"{lead:>2} {p:>4g} {plain['level']:>3} {plain['eval_cost']:>8.4f} ± {plain['eval_se']:.4f} "
              f"{capped['level']:>3} {capped['cap']:>3} {capped['eval_cost']:>8.4f} ± {capped['eval_se']:.4f} "
              f"{gain:>6.2f} {plain['seconds'] + capped['seconds']:>6.0f}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"mean": 5.0, "holding": 1.0, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
