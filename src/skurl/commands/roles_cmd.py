"""`skurl collector` and `skurl learner`: the decoupled deployment's roles, started alone.

    skurl serve-sim --shard 0/2 --port 50051 ...          # on each simulator machine
    skurl collector --index 0/2 --id c0 --port 50061 \\
        --set deploy.sim_addresses=[10.0.0.5:50051,10.0.0.6:50051] --set sync.backend=redis
    skurl learner --run-dir runs/big \\
        --set deploy.collector_addresses=[10.0.0.7:50061,10.0.0.8:50061] --set sync.backend=redis

`skurl train --mode decoupled` starts all of them on one machine instead.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from skurl.commands.common import add_config_flags, config_from_args
from skurl.errors import UserError
from skurl.telemetry.metrics import as_role


def register(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser("collector", help="serve a collector (decoupled mode): drives sim servers "
                       "with the policy, writes rollout shards")
    add_config_flags(c)
    c.add_argument("--index", default="0/1", metavar="J/K",
                   help="this is collector J of K: it drives its share of deploy.sim_addresses")
    c.add_argument("--id", dest="collector_id", help="collector id in shard names (default cJ)")
    c.add_argument("--host", default="127.0.0.1", help="interface to listen on (0.0.0.0 for other machines)")
    c.add_argument("--port", type=int, default=0, help="CollectorService port (0 = any free port)")
    c.add_argument("--metrics-port", type=int, default=None,
                   help="Prometheus /metrics port (default deploy.metrics_base_port; 0 = any free port)")
    c.add_argument("--run", default="skurl", help="the run's name: the business metrics' label, and under bounded staleness the shard stream rl:shards:RUN (the learner's run directory name)")
    c.set_defaults(func=as_role("collector", _collector))

    learner = sub.add_parser("learner", help="run the learner (decoupled mode) over running "
                             "collectors (deploy.collector_addresses)")
    add_config_flags(learner)
    learner.add_argument("--run-dir", help="where checkpoints, logs and the report go (default runs/TIMESTAMP)")
    learner.add_argument("--resume", metavar="RUN_DIR",
                         help="continue a run from its latest checkpoint with its own config")
    learner.add_argument("--host", default="127.0.0.1",
                         help="interface of /metrics and, with sync.backend=grpc, of the weights "
                         "service (0.0.0.0 for other machines)")
    learner.add_argument("--metrics-port", type=int, default=None,
                         help="Prometheus /metrics port (default deploy.metrics_base_port; 0 = any free port)")
    learner.add_argument("--no-baseline", action="store_true", help="skip the tuned baseline")
    learner.set_defaults(func=as_role("learner", _learner))


def _log_to_stderr() -> None:
    """Role processes are services: their INFO lines (addresses, recoveries) go to stderr."""
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")


def _index(text: str) -> tuple[int, int]:
    try:
        j, k = (int(x) for x in text.split("/"))
    except ValueError:
        raise UserError(f"--index {text!r}: expected J/K, e.g. 0/2") from None
    if not 0 <= j < k:
        raise UserError(f"--index {text!r}: expected 0 <= J < K")
    return j, k


def _port(value: int | None, flag: str) -> None:
    if value is not None and not 0 <= value <= 65535:
        raise UserError(f"{flag} {value}: expected a port in 0..65535")


def _collector(args: argparse.Namespace) -> int:
    from skurl.modes.decoupled.roles import run_collector

    j, k = _index(args.index)
    _port(args.port, "--port")
    _log_to_stderr()
    _port(args.metrics_port, "--metrics-port")
    cfg = config_from_args(args)
    metrics_port = cfg.deploy.metrics_base_port if args.metrics_port is None else args.metrics_port
    return run_collector(cfg, args.collector_id or f"c{j}", j, k, host=args.host, port=args.port,
                         metrics_port=metrics_port, run_name=args.run)


def _learner(args: argparse.Namespace) -> int:
    from skurl.modes.decoupled.wiring import run_learner

    _port(args.metrics_port, "--metrics-port")
    _log_to_stderr()
    if args.resume:
        if args.config or args.run_dir:
            raise UserError("skurl learner: --resume RUN_DIR takes the run's own config and "
                            "directory; drop --config/--run-dir (use --set to change keys)")
        from skurl.config import load_config
        from skurl.policy.learned import CONFIG_FILE

        cfg_file = Path(args.resume) / CONFIG_FILE
        if not cfg_file.is_file():
            raise UserError(f"--resume {args.resume}: no {CONFIG_FILE}; expected a run directory")
        cfg = load_config(cfg_file, list(args.overrides))
        run_dir = Path(args.resume)
    else:
        cfg = config_from_args(args)
        run_dir = Path(args.run_dir or f"runs/{time.strftime('%Y%m%d-%H%M%S')}")
    result = run_learner(cfg, run_dir, resume=bool(args.resume), baseline=not args.no_baseline,
                         metrics_port=args.metrics_port, host=args.host)
    print(f"run {result.run_dir}: {result.iterations} iterations; report: {result.run_dir / 'report.md'}")
    return 0
