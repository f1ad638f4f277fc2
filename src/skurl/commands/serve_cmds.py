"""`skurl snapshot`, `skurl export`, `skurl recommend`: the daily serving job (serve/).

    skurl export --run RUN [--out FILE.onnx] [--probabilities]
    skurl snapshot --run RUN [--day D] [--seed S] --out STATE.parquet
    skurl recommend (--model FILE.onnx | --run RUN) --state STATE.parquet --out ORDERS.parquet
                    [--catalog CAT] [--ab GROUPS.parquet (--model-b OTHER.onnx | --policy-b NAME
                                                          | --policy-a NAME)]
"""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    ex = sub.add_parser("export", help="write a run's policy as one ONNX decision graph")
    ex.add_argument("--run", type=Path, required=True, help="run directory of `skurl train`")
    ex.add_argument("--out", type=Path, default=None, help="ONNX file (default RUN/policy.onnx)")
    ex.add_argument("--probabilities", action="store_true",
                    help="also output every action's probability (output 'probabilities' [N, A])")
    ex.set_defaults(func=_export)
    sn = sub.add_parser("snapshot", help="write the simulator's inventory snapshot on a day of a run's policy")
    sn.add_argument("--run", type=Path, required=True, help="run directory of `skurl train`")
    sn.add_argument("--day", type=int, default=0, help="day of the episode (0-based; default 0)")
    sn.add_argument("--seed", type=int, default=0, help="run seed of the simulated episode (default 0)")
    sn.add_argument("--out", type=Path, required=True, help="snapshot Parquet file (docs/snapshot.md)")
    sn.set_defaults(func=_snapshot)
    rc = sub.add_parser("recommend", help="orders for every SKU of an inventory snapshot")
    rc.add_argument("--model", type=Path, default=None, help="ONNX file of `skurl export`")
    rc.add_argument("--run", type=Path, default=None, help="run directory (its policy in torch) instead of --model")
    rc.add_argument("--state", type=Path, required=True, help="inventory snapshot Parquet file")
    rc.add_argument("--out", type=Path, required=True, help="orders Parquet file (written atomically)")
    rc.add_argument("--catalog", type=Path, default=None,
                    help="catalog Parquet/CSV file (default: the catalog of the model's config)")
    rc.add_argument("--ab", type=Path, default=None, help="A/B groups file of `skurl ab assign`")
    rc.add_argument("--model-b", type=Path, default=None, help="ONNX model of group B")
    rc.add_argument("--policy-b", default=None, metavar="NAME", help="tuned baseline of group B")
    rc.add_argument("--policy-a", default=None, metavar="NAME",
                    help="tuned baseline of group A (the control); the model then serves group B")
    rc.add_argument("--threads", type=int, default=0, help="onnxruntime threads (0 = its default)")
    rc.set_defaults(func=_recommend)


def _export(args: argparse.Namespace) -> int:
    from skurl.errors import require

    require("onnx", "onnxscript", what="skurl export")  # torch.onnx.export needs both
    from skurl.serve.export import export_run

    out = args.out if args.out is not None else args.run / "policy.onnx"
    export_run(args.run, out, probabilities=args.probabilities)
    print(f"exported {args.run} to {out}")
    return 0


def _snapshot(args: argparse.Namespace) -> int:
    from skurl.serve.simulate import snapshot_on
    from skurl.serve.snapshot import write_snapshot

    snap = snapshot_on(args.run, args.day, args.seed)
    write_snapshot(snap, args.out)
    print(f"snapshot of {len(snap)} SKUs on day {args.day} (seed {args.seed}) -> {args.out}")
    return 0


def load_catalog_for(path: Path | None, info: object):
    from skurl.catalog import load_catalog
    from skurl.catalog.io import read_catalog

    return read_catalog(path) if path is not None else load_catalog(info.cfg.catalog)  # type: ignore[attr-defined]


def _recommend(args: argparse.Namespace) -> int:
    from skurl.errors import UserError, require

    if args.model is not None or args.model_b is not None:
        require("onnxruntime", "onnx", what="skurl recommend --model")
    from skurl.serve.models import OnnxModel, open_model
    from skurl.serve.recommend import recommend, write_orders

    sides = [a for a in (args.model_b, args.policy_b, args.policy_a) if a is not None]
    if args.ab is None and sides:
        raise UserError("--model-b/--policy-b/--policy-a: only with --ab GROUPS.parquet")
    if args.ab is not None and len(sides) != 1:
        raise UserError("--ab: give exactly one of --model-b FILE.onnx or --policy-b NAME (group B), "
                        "or --policy-a NAME (group A, the model on B)")
    for name in (args.policy_a, args.policy_b):
        if name is not None:
            from skurl.policy.baselines import check_policy_name

            check_policy_name(name)
    model = open_model(args.model, args.run, args.threads)
    model_b = OnnxModel(args.model_b, args.threads) if args.model_b is not None else None
    catalog = load_catalog_for(args.catalog, model.info)
    orders = recommend(model, args.state, catalog, ab=args.ab, model_b=model_b, policy_b=args.policy_b,
                       policy_a=args.policy_a)
    write_orders(orders, args.out)
    print(f"{len(orders.sku_id)} orders ({float(orders.order_units.sum()):.0f} units) -> {args.out}")
    return 0
