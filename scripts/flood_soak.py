"""Flood soak (issue 42): a sim server (`skurl serve-sim`), a weight server and a collector
(`skurl collector`) run as their own processes on loopback while this process calls every
RPC of skurl.proto with the hostile-client suite's malformed requests
(tests/integration/test_hostile_clients.py), round after round, for --minutes. Every
--interval seconds it floods sessions and streams, samples each server's resident memory
and checks, on each server,
that health answers SERVING and, through the collector, that a valid Collect still gives
the rollout it gave before the flood.

After the warm-up (the first --warmup share of the samples), the median RSS of the last
tenth may exceed that of the first tenth by at most --max-growth (5%) on every server;
every health check and valid Collect must pass, and no call may outlive its deadline (a
hung handler). Prints one JSON line; exit status 0 when all holds, 1 otherwise.

    .venv/bin/python scripts/flood_soak.py --minutes 30
    .venv/bin/python scripts/flood_soak.py --minutes 1 --interval 2     # a quick look"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import numpy as np
import psutil
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
import test_hostile_clients as hostile  # noqa: E402  (the suite's cases, one source of truth)

from skurl.catalog import load_catalog  # noqa: E402
from skurl.config import load_config  # noqa: E402
from skurl.policy.learned import grid_for  # noqa: E402
from skurl.policy.nets import ActorCritic  # noqa: E402
from skurl.rpc.gen import skurl_pb2 as pb  # noqa: E402
from skurl.rpc.gen import skurl_pb2_grpc as pb_grpc  # noqa: E402
from skurl.rpc.health import probe  # noqa: E402
from skurl.sim.env import VectorEnv  # noqa: E402
from skurl.sync.grpc import GrpcWeightPublisher  # noqa: E402

BASE = ["catalog.skus=16", "catalog.seed=2", "sim.days=4", "sim.threads=1", "policy.hidden=[8,8]",
        "train.torch_threads=1", "collect.infer_dtype=float32", "sync.backend=grpc", "sync.timeout_s=10",
        "rpc.timeout_s=30"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_weights(port: int) -> None:
    """The weight server as a process of its own (--serve-weights): serve until SIGTERM."""
    from skurl.rpc.weights_server import WeightSyncServer

    server = WeightSyncServer(load_config(None, BASE).rpc, "127.0.0.1", port)
    signal.signal(signal.SIGTERM, lambda *_: (server.stop(0), sys.exit(0)))
    while True:
        time.sleep(3600)


def start(cmd: list[str], log: Path, address: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not probe(address, 1.0):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"flood_soak: {cmd[2:4]} did not start serving at {address}; see {log}")
        time.sleep(0.5)
    return proc


def sets(values: list[str]) -> list[str]:
    return [a for v in values for a in ("--set", v)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30.0, help="how long to flood")
    ap.add_argument("--interval", type=float, default=10.0, help="seconds between samples")
    ap.add_argument("--warmup", type=float, default=0.2, help="share of the samples left out as warm-up")
    ap.add_argument("--max-growth", type=float, default=0.05, help="largest allowed RSS growth after warm-up")
    ap.add_argument("--dir", type=Path, default=None, help="work dir (default: a new temporary one)")
    ap.add_argument("--serve-weights", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve_weights is not None:
        serve_weights(args.serve_weights)
        return 0
    root = args.dir or Path(tempfile.mkdtemp(prefix="skurl-flood-"))
    root.mkdir(parents=True, exist_ok=True)
    skurl = [sys.executable, "-m", "skurl.cli"]
    ports = {name: free_port() for name in ("sim", "weights", "collector")}
    addr = {name: f"127.0.0.1:{p}" for name, p in ports.items()}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        procs["sim"] = start([*skurl, "serve-sim", *sets(BASE), "--port", str(ports["sim"])], root / "sim.log",
                             addr["sim"])
        procs["weights"] = start([sys.executable, __file__, "--serve-weights", str(ports["weights"])],
                                 root / "weights.log", addr["weights"])
        role = [*BASE, f"deploy.sim_addresses=[{addr['sim']}]", f"deploy.weights_address={addr['weights']}",
                f"store.url={root / 'store'}"]
        procs["collector"] = start([*skurl, "collector", *sets(role), "--port", str(ports["collector"])],
                                   root / "collector.log", addr["collector"])
        return flood(args, load_config(None, role), addr, procs, root)
    finally:
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()


def chain_for(cfg: Any, addr: dict[str, str]) -> Any:
    """What the suite's case builders read of its Chain: stubs on the three servers, the
    good weights (published as version 1), the catalog's size, the Collect it makes."""
    catalog = load_catalog(cfg.catalog)
    torch.manual_seed(0)
    model = ActorCritic(VectorEnv(catalog, cfg.sim).schema.dim, grid_for(cfg).n, cfg.policy.hidden)
    good = {k: v.clone() for k, v in model.state_dict().items()}  # finite outputs: the comparison means something
    publisher = GrpcWeightPublisher(addr["weights"], cfg.rpc)
    publisher.publish(1, good)
    publisher.close()
    opts = hostile.channel_options(cfg.rpc)
    ch = {k: grpc.insecure_channel(a, options=opts) for k, a in addr.items()}
    c = hostile.Chain(cfg, SimpleNamespace(servicer=SimpleNamespace(num_skus=len(catalog))), None, None,
                      pb_grpc.EnvServiceStub(ch["sim"]), pb_grpc.WeightSyncServiceStub(ch["weights"]),
                      pb_grpc.CollectorServiceStub(ch["collector"]), good, {})
    c.baseline = c.collect()
    return c


def stream_flood(c: Any) -> list[str]:
    """The suite's floods of sessions and streams: 12 sessions (the limit is 8), 70 Subscribe
    streams (the limit is 64), 5 Attach streams on one session; all closed again."""
    full = {hostile.OK, hostile.FULL}
    codes = {hostile.code_of(lambda i=i: c.env.GetInfo(pb.InfoRequest(env_id=f"flood-{i}", open=True),
                                                       timeout=hostile.T)) for i in range(12)}
    for i in range(12):
        c.env.Close(pb.CloseRequest(env_id=f"flood-{i}"), timeout=hostile.T)
    streams = [c.sync.Subscribe(pb.SubscribeRequest(key="policy", after_version=10**6), timeout=30)
               for _ in range(70)]
    c.env.Reset(pb.ResetRequest(env_id="hostile", seed=1), timeout=hostile.T)
    streams += [c.env.Attach(pb.AttachRequest(env_id="hostile"), timeout=30) for _ in range(5)]
    time.sleep(0.5)
    for s in streams:
        s.cancel()
    return [] if codes <= full else [f"session flood: codes {sorted(str(x) for x in codes)}"]


def flood(args: argparse.Namespace, cfg: Any, addr: dict[str, str], procs: dict[str, subprocess.Popen[bytes]],
          root: Path) -> int:
    c = chain_for(cfg, addr)
    cases = {**hostile._env_cases(c), **hostile._weight_cases(c), **hostile._collector_cases(c)}
    rss: dict[str, list[float]] = {name: [] for name in procs}
    problems: list[str] = []
    calls = unexpected = slowest = 0.0
    end = time.monotonic() + args.minutes * 60
    next_sample = time.monotonic()
    while time.monotonic() < end and len(problems) < 20:
        for name, (call, expected) in cases.items():
            t0 = time.monotonic()
            code = hostile.code_of(call)
            slowest = max(slowest, time.monotonic() - t0)
            calls += 1
            unexpected += code not in expected
            if time.monotonic() - t0 > hostile.T + 5:
                problems.append(f"{name}: the call outlived its deadline ({time.monotonic() - t0:.1f} s)")
        if time.monotonic() >= next_sample:
            next_sample += args.interval
            problems += stream_flood(c)
            for name, p in procs.items():
                rss[name].append(psutil.Process(p.pid).memory_info().rss / 2**20)
                if not probe(addr[name], 5.0):
                    problems.append(f"{name}: health did not answer SERVING")
            again = c.collect()
            if any(not np.array_equal(again[k], v, equal_nan=v.dtype.kind == "f") for k, v in c.baseline.items()):
                problems.append("a valid Collect gave another rollout than before the flood")
    growth = {}
    for name, series in rss.items():
        skip = int(len(series) * args.warmup)
        kept = series[skip:]
        tenth = max(1, len(kept) // 10)
        first, last = statistics.median(kept[:tenth]), statistics.median(kept[-tenth:])
        growth[name] = {"rss_mb_first": round(first, 1), "rss_mb_last": round(last, 1),
                        "growth": round(last / first - 1.0, 4), "samples": len(series)}
        if last > first * (1.0 + args.max_growth):
            problems.append(f"{name}: RSS grew {last / first - 1.0:.1%} ({first:.1f} -> {last:.1f} MB)")
    print(json.dumps({"minutes": args.minutes, "calls": int(calls), "unexpected_codes": int(unexpected),
                      "slowest_call_s": round(slowest, 2), "servers": growth, "problems": problems,
                      "dir": str(root)}))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
