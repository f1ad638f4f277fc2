"""Step throughput of the simulator in process vs. over gRPC on loopback.

    python -m skurl.rpc.bench --skus 100000 --steps 30 [--shards 1 2] [--json] [--set ...]

Servers run as separate `skurl serve-sim` processes (as in a deployment), so client and
server do not share a GIL. Every variant steps the same catalog with the same cheap
order-up-to rule from the raw state; the figure is SKU-steps per second over `steps`
days after one warm-up day (the first call compiles and allocates). The `lean` variants
ask for lean replies (what a collector reads: no raw state but today's forecast), so
they order today's forecast instead, in process too (`in_process_lean_rule`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from skurl.config import Config, load_config
from skurl.sim.api import Env, Obs

if TYPE_CHECKING:
    from collections.abc import Callable

    from skurl.sim.api import Obs


def order_up_to(obs: Obs) -> np.ndarray:
    raw = obs.raw
    target = raw.forecast[:, :4].sum(axis=1) * 1.2
    return np.maximum(np.round(target - raw.on_hand - raw.pipeline.sum(axis=1)), 0)


def order_forecast(obs: Obs) -> np.ndarray:
    return np.round(obs.raw.forecast[:, 0].astype(np.float64))


def time_env(env: Env, steps: int, seed: int = 0,
             rule: Callable[[Obs], np.ndarray] = order_up_to) -> float:
    """SKU-steps per second of `steps` days after a warm-up day."""
    obs = env.reset(seed)
    obs = env.step(rule(obs)).obs
    start = time.perf_counter()
    for _ in range(steps):
        obs = env.step(rule(obs)).obs
    return env.num_skus * steps / (time.perf_counter() - start)


def start_servers(overrides: list[str], shards: int) -> tuple[list[subprocess.Popen], list[str]]:
    procs, addresses = [], []
    env = {**os.environ, "GRPC_VERBOSITY": "ERROR"}
    with tempfile.TemporaryDirectory() as logs:
        # stderr to files, not pipes: a server never blocks on a full pipe nobody reads.
        for i in range(shards):
            cmd = [sys.executable, "-m", "skurl.cli", "serve-sim", "--port", "0", "--shard",
                   f"{i}/{shards}", *[a for s in overrides for a in ("--set", s)]]
            with open(os.path.join(logs, f"{i}.err"), "w") as err:
                procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err,
                                              text=True, env=env))
        for i, p in enumerate(procs):
            line = p.stdout.readline() if p.stdout else ""
            match = re.search(r" on (\S+:\d+)", line)
            if not match:
                stop_servers(procs)
                with open(os.path.join(logs, f"{i}.err")) as err:
                    tail = err.read().strip().splitlines()
                raise RuntimeError(f"serve-sim did not start: {tail[-1] if tail else line!r}")
            addresses.append(match.group(1))
    return procs, addresses


def stop_servers(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait(timeout=30)


def run(cfg: Config, overrides: list[str], steps: int, shard_counts: list[int]) -> dict[str, Any]:
    from skurl.catalog import load_catalog
    from skurl.rpc.env_client import RemoteEnv
    from skurl.rpc.multi_shard import MultiShardEnv
    from skurl.sim.env import VectorEnv

    catalog = load_catalog(cfg.catalog)
    local = VectorEnv(catalog, cfg.sim)
    out: dict[str, Any] = {"skus": len(catalog), "steps": steps,
                           "in_process_sku_steps_per_s": time_env(local, steps),
                           "in_process_lean_rule_sku_steps_per_s": time_env(local, steps,
                                                                             rule=order_forecast)}
    local.close()
    for shards in shard_counts:
        procs, addresses = start_servers(overrides, shards)
        try:
            with MultiShardEnv.from_addresses(addresses, cfg.rpc) as env:
                out[f"remote_{shards}_shards_sku_steps_per_s"] = time_env(env, steps)
            lean = [RemoteEnv(a, cfg.rpc, lean=True) for a in addresses]
            with MultiShardEnv(lean, [e.catalog_rows for e in lean]) as env:
                out[f"remote_{shards}_shards_lean_sku_steps_per_s"] = time_env(
                    env, steps, rule=order_forecast)
        finally:
            stop_servers(procs)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m skurl.rpc.bench", description=__doc__)
    p.add_argument("--skus", type=int, default=100_000)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--shards", type=int, nargs="+", default=[1, 2])
    p.add_argument("--set", dest="overrides", action="append", default=[])
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    overrides = [f"catalog.skus={args.skus}", f"sim.days={args.steps + 2}", *args.overrides]
    result = run(load_config(None, overrides), overrides, args.steps, args.shards)
    if args.json:
        print(json.dumps(result))
    else:
        base = result["in_process_sku_steps_per_s"]
        for key, value in result.items():
            if key.endswith("_per_s"):
                print(f"{key:40s} {value:14,.0f}  ({value / base:.2f}x in-process)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
