"""`skurl bench sync`: weight publish latency, learner to every collector holding the version.

    skurl bench sync [--backend redis|grpc] [--subscribers 2] [--publishes 100]
                     [--interval 0.1] [--config FILE] [--set k=v ...] [--json]

More: docs/internals.md (commands/bench_sync.py)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np
import yaml

from skurl.commands.common import add_config_flags, config_from_args, print_json, seconds
from skurl.errors import UserError

if TYPE_CHECKING:
    from skurl.config import Config
    from skurl.sync.api import WeightBackend


def register_bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sync", help="weight publish latency to every subscriber (collector) process")
    add_config_flags(p)
    p.add_argument("--backend", choices=("redis", "grpc"), default=None,
                   help="weight sync backend (default: sync.backend when it is redis or grpc, else grpc)")
    p.add_argument("--subscribers", type=int, default=2, help="subscriber processes (collectors)")
    p.add_argument("--publishes", type=int, default=100, help="versions published (timed)")
    p.add_argument("--interval", type=seconds, default=0.1, help="seconds between publishes")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run_sync)


def run_sync(args: argparse.Namespace) -> int:
    from skurl.sync import open_backend
    from skurl.sync.grpc import HostedGrpcWeights

    if args.subscribers < 1 or args.publishes < 1 or args.interval < 0:
        raise UserError(f"bench sync: --subscribers {args.subscribers} --publishes {args.publishes} "
                        f"--interval {args.interval}, expected >= 1, >= 1 and >= 0")
    cfg = config_from_args(args)
    backend = args.backend or (cfg.sync.backend if cfg.sync.backend != "inproc" else "grpc")
    cfg = dataclasses.replace(cfg, sync=dataclasses.replace(cfg.sync, backend=backend,
                                                            key=f"bench-sync-{os.getpid()}"))
    tensors = _default_weights(cfg)
    weights = open_backend(cfg)  # one line and exit 2 when Redis is unreachable
    try:
        if isinstance(weights, HostedGrpcWeights):
            cfg = dataclasses.replace(cfg, deploy=dataclasses.replace(cfg.deploy, weights_address=weights.address))
        weights.publish(0, tensors)  # subscribers start from a held version
        with tempfile.TemporaryDirectory(prefix="skurl-bench-sync-") as tmp:
            subs = _Subscribers(cfg, Path(tmp), args.subscribers)
            try:
                subs.wait_for(0, cfg.deploy.start_timeout_s, "deploy.start_timeout_s")
                latencies, calls = _publish_all(weights, tensors, subs, args, cfg.sync.timeout_s)
            finally:
                subs.close()
    finally:
        weights.close()
    out = {"bench": "sync", "backend": backend, "subscribers": args.subscribers,
           "publishes": args.publishes, "weights_mb": round(sum(t.numel() * t.element_size()
                                                                for t in tensors.values()) / 1e6, 3),
           **_figures("latency_ms", latencies), **_figures("publish_call_ms", calls),
           "load_avg_1m": round(os.getloadavg()[0], 2)}
    if args.json:
        print_json(out)
    else:
        print(f"bench sync ({backend}, {args.subscribers} subscribers, {out['weights_mb']} MB): "
              f"publish -> all hold it: median {out['latency_ms_median']:.1f} ms, "
              f"p99 {out['latency_ms_p99']:.1f} ms, max {out['latency_ms_max']:.1f} ms; "
              f"publish() {out['publish_call_ms_median']:.1f} ms median "
              f"(load average {out['load_avg_1m']})")
    return 0


def _default_weights(cfg: Config) -> dict[str, Any]:
    from skurl.catalog import load_catalog
    from skurl.policy.learned import grid_for
    from skurl.policy.nets import ActorCritic
    from skurl.sim.layout import layout_for

    catalog = load_catalog(dataclasses.replace(cfg.catalog, skus=min(cfg.catalog.skus, 2000)))
    dim = layout_for(catalog, cfg.sim.review_days).schema.dim
    return ActorCritic(dim, grid_for(cfg).n, cfg.policy.hidden).state_dict()


def _publish_all(weights: WeightBackend, tensors: dict[str, Any], subs: _Subscribers, args: argparse.Namespace,
                 timeout_s: float) -> tuple[list[float], list[float]]:
    latencies, calls = [], []
    for version in range(1, args.publishes + 1):
        start = time.time()
        weights.publish(version, tensors)
        calls.append((time.time() - start) * 1e3)
        held = subs.wait_for(version, timeout_s)
        latencies.append((max(held) - start) * 1e3)
        time.sleep(args.interval)
    return latencies, calls


def _figures(name: str, values: list[float]) -> dict[str, float]:
    a = np.asarray(values, np.float64)
    return {f"{name}_median": round(float(np.median(a)), 3), f"{name}_p99": round(float(np.percentile(a, 99)), 3),
            f"{name}_max": round(float(a.max()), 3)}


class _Subscribers:
    """Subscriber processes; each prints `VERSION UNIX_TIME` once it holds a version."""

    def __init__(self, cfg: Config, tmp: Path, count: int) -> None:
        from skurl.config import config_to_dict

        path = tmp / "sync.yaml"
        path.write_text(yaml.safe_dump(config_to_dict(cfg), sort_keys=False))
        self._lines: queue.Queue[tuple[int, str]] = queue.Queue()
        self._procs = [subprocess.Popen([sys.executable, "-m", "skurl.commands.bench_sync", str(path)],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                       for _ in range(count)]
        for i, proc in enumerate(self._procs):
            assert proc.stdout is not None
            threading.Thread(target=self._read, args=(i, proc.stdout), daemon=True).start()
        self._held: list[dict[int, float]] = [{} for _ in self._procs]

    def _read(self, i: int, stream: IO[str]) -> None:
        for line in stream:
            self._lines.put((i, line.strip()))
        self._lines.put((i, ""))  # end of output: the process is gone

    def wait_for(self, version: int, timeout_s: float, key: str = "sync.timeout_s") -> list[float]:
        """Times at which every subscriber held `version` (UserError naming the config `key`
        of timeout_s on timeout, or on a subscriber's exit)."""
        deadline = time.monotonic() + timeout_s
        while not all(version in h for h in self._held):
            try:
                i, line = self._lines.get(timeout=max(deadline - time.monotonic(), 0.0))
            except queue.Empty:
                hint = " (is rpc.tls.* the same on both sides?)" if version == 0 else ""
                raise UserError(f"bench sync: version {version} did not reach every subscriber "
                                f"within {key}={timeout_s:g} s{hint}") from None
            if not line:
                stderr = self._procs[i].stderr
                err = stderr.read().strip().splitlines() if stderr else []
                raise UserError(f"bench sync: subscriber {i} exited: {(err or ['(no output)'])[-1]}")
            v, t = line.split()
            self._held[i][int(v)] = float(t)
        return [h[version] for h in self._held]

    def close(self) -> None:
        for proc in self._procs:
            proc.terminate()
        for proc in self._procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


def _subscribe(config_path: str) -> None:
    """A subscriber process: follow the versions as a collector does, print each held one."""
    from skurl.config import load_config
    from skurl.sync import open_subscriber
    from skurl.sync.api import WeightSyncTimeout

    cfg = load_config(config_path, [])
    subscriber = open_subscriber(cfg, _default_weights(cfg))
    want = 0
    try:
        while True:
            try:
                version, _ = subscriber.wait_for(want, timeout=1.0)
            except WeightSyncTimeout:
                continue
            print(f"{version} {time.time():.6f}", flush=True)
            want = version + 1
    finally:
        subscriber.close()


if __name__ == "__main__":
    _subscribe(sys.argv[1])
