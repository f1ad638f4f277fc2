"""`skurl register --run RUN --name NAME [--alias champion|challenger]`: backtest the run
against its tuned baseline on held-out seeds and register its ONNX model in MLflow only if
it wins (commands/register.py). Exit 0 registered, 1 refused by the backtest, 2 bad input.

    skurl register --run runs/R --name replenishment --alias challenger --set tracking.uri=http://127.0.0.1:5000
"""

from __future__ import annotations

import argparse
from pathlib import Path

from skurl.commands.common import print_json
from skurl.commands.register import ALIASES, BASELINE, default_export, register_model, run_backtest
from skurl.config import load_config
from skurl.errors import UserError, require

NOT_REGISTERED = 1


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("register", help="backtest a trained run and register its ONNX model in MLflow if it "
                       "beats the tuned baseline")
    p.add_argument("--run", required=True, metavar="RUN_DIR", help="a run directory of `skurl train`")
    p.add_argument("--name", required=True, help="registered model name")
    p.add_argument("--alias", choices=ALIASES, help="point this alias at the new version")
    p.add_argument("--episodes", type=int, default=3, help="held-out seeds of the backtest (eval.seed, +1, ...)")
    p.add_argument("--min-improvement", type=float, default=0.0, metavar="X",
                   help="register only when the run beats the baseline's objective by more than this "
                   "share (0.01 = 1%%; default 0: strictly better)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override eval.*, catalog.*, sim.* or tracking.* keys of the run's config (repeatable)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, export=default_export) -> int:
    from skurl.commands.eval_cmd import _check_run_overrides
    from skurl.policy.learned import run_config_file

    # before the backtest: registering exports to ONNX and logs to MLflow
    require("onnx", "onnxscript", "mlflow", what="skurl register")
    if args.episodes < 1:
        raise UserError(f"skurl register: --episodes {args.episodes}, expected an integer >= 1")
    if not args.name.strip():
        raise UserError("skurl register: --name is empty; expected a registered model name")
    run_dir = Path(args.run)
    config_file = run_config_file(run_dir, "skurl register --run")
    _check_run_overrides(args.overrides)
    cfg = load_config(config_file, list(args.overrides))
    backtest = run_backtest(run_dir, cfg, episodes=args.episodes)
    passed = backtest.improvement > args.min_improvement
    out = {"registered": passed, "objective": backtest.objective, "improvement": backtest.improvement,
           "min_improvement": args.min_improvement, "tags": backtest.tags()}
    if passed:
        out["model"] = register_model(run_dir, cfg, backtest, name=args.name, alias=args.alias, export=export)
    if args.json:
        print_json(out)
    else:
        key = f"avg_{backtest.objective}_per_sku_day"
        figures = (f"{backtest.objective}/SKU-day {backtest.policy[key]:.4f} vs {BASELINE} "
                   f"{backtest.baseline[key]:.4f} ({backtest.improvement:+.2%}) on seeds {backtest.policy['seeds']}")
        if passed:
            model = out["model"]
            print(f"registered {model['name']} version {model['version']}"
                  + (f" as {model['alias']}" if model["alias"] else "") + f": {figures}")
        else:
            print(f"not registered: {figures}; expected an improvement above {args.min_improvement:+.2%}")
    return 0 if passed else NOT_REGISTERED
