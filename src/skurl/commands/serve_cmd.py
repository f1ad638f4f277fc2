"""`skurl serve-sim`: an EnvService for one shard of the configured catalog.

    skurl serve-sim --port 50051 --shard 0/4 [--host 0.0.0.0] [--config FILE] [--set ...]

The catalog is partitioned with substitution groups kept together (deploy.partition),
and this server simulates shard i of n. It prints one line with its address once it
listens, then serves until SIGTERM or SIGINT, when it stops gracefully: calls in flight
finish (up to --grace seconds), new ones are refused.
"""

from __future__ import annotations

import argparse
import sys

from skurl.commands.common import add_config_flags, config_from_args, seconds
from skurl.errors import UserError
from skurl.telemetry.metrics import as_role


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve-sim", help="serve one catalog shard's simulator over gRPC")
    add_config_flags(p)
    p.add_argument("--shard", default="0/1", metavar="I/N",
                   help="serve shard I of N of the catalog (default 0/1: all of it)")
    p.add_argument("--port", type=int, default=None,
                   help="port to listen on; 0 = any free port (default deploy.base_port + I)")
    p.add_argument("--host", default="127.0.0.1",
                   help="interface to listen on (0.0.0.0 for other machines; default loopback)")
    p.add_argument("--max-sessions", type=int, default=8,
                   help="most env sessions (collectors, evaluators) served at once")
    p.add_argument("--grace", type=seconds, default=5.0,
                   help="seconds calls in flight may take to finish on shutdown")
    p.add_argument("--metrics-port", type=int, default=None,
                   help="also serve Prometheus /metrics on this port (0 = any free port)")
    p.set_defaults(func=as_role("sim", _serve))


def _serve(args: argparse.Namespace) -> int:
    from skurl.catalog import load_catalog
    from skurl.catalog.partition import parse_shard, partition
    from skurl.rpc.env_server import serve_env
    from skurl.sim.layout import catalog_widths

    index, count = parse_shard(args.shard)
    cfg = config_from_args(args)
    port = cfg.deploy.base_port + index if args.port is None else args.port
    if not 0 <= port <= 65535:
        raise UserError(f"--port {port}: expected 0..65535")
    if args.max_sessions < 1:
        raise UserError(f"--max-sessions {args.max_sessions}: expected an integer >= 1")
    catalog = load_catalog(cfg.catalog)
    rows = partition(catalog, count, cfg.deploy.partition)[index]
    if rows.size == 0:
        raise UserError(f"--shard {index}/{count}: this shard is empty ({len(catalog)} SKUs "
                        f"cannot fill {count} shards with groups kept together); use fewer")
    server = serve_env(catalog.subset(rows), cfg.sim, cfg.rpc, shard=(index, count),
                       catalog_rows=rows, host=args.host, port=port,
                       max_sessions=args.max_sessions, min_widths=catalog_widths(catalog))
    metrics_note = _start_metrics(args.metrics_port, args.host)
    print(f"serving shard {index}/{count} ({rows.size} SKUs) on {server.address}{metrics_note}",
          flush=True)
    from skurl.modes.decoupled.roles import wait_for_signal

    wait_for_signal()
    sys.stdout.flush()
    server.stop(args.grace)
    print(f"stopped {server.address}", flush=True)
    return 0


def _start_metrics(port: int | None, host: str) -> str:
    if port is None:
        return ""
    from skurl.telemetry.metrics import serve_metrics

    served = serve_metrics(port, addr=host)
    return f"; metrics on {host}:{served.port}/metrics"
