"""Decoupled mode's processes on one machine: deploy.sim_servers `skurl serve-sim` and
deploy.collectors `skurl collector` children on free loopback ports, watched by a
supervisor thread that restarts one that dies or stops answering health checks on its own
port (collectors replay a lost sim server's episode); RUN_DIR/decoupled/cluster.json lists
them. InProcessRoles: the same servicers inside this process (tests, debugging)."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from skurl.atomic import write_text
from skurl.config import Config, StoreConfig, config_to_dict
from skurl.errors import UserError
from skurl.modes.decoupled.roles import READY
from skurl.rpc.health import Liveness
from skurl.telemetry.metrics import get_metrics

if TYPE_CHECKING:
    from skurl.collect.collectors import Collected, Collectors, SampleIndex

PARENT_FD_ENV = "SKURL_PARENT_FD"
log = logging.getLogger("skurl.modes")
CLUSTER_DIR = "decoupled"
_SIM_READY = re.compile(r"serving shard \d+/\d+ \(\d+ SKUs\) on (\S+?)(?:; metrics on (\S+))?$")
_POLL_S = 0.2


@dataclass
class Child:
    """One role process: its `skurl` arguments, port (kept over restarts), log, info."""

    name: str
    args: list[str]
    log_path: Path
    port: int = 0
    metrics_port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    info: dict[str, Any] = field(default_factory=dict)
    restarts: int = 0
    lifeline: int | None = None  # write end of the child's parent-liveness pipe


class LocalCluster:
    """deploy.sim_servers sim servers and deploy.collectors collectors on this machine."""

    def __init__(self, cfg: Config, run_dir: Path, weights_address: str | None) -> None:
        self.cfg = cfg
        self.dir = run_dir / CLUSTER_DIR
        self.run_name = run_dir.name
        self.weights_address = weights_address
        self.sims: list[Child] = []
        self.collectors: list[Child] = []
        self.failed: str | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        d = cfg.deploy
        self._liveness = Liveness(d.health_timeout_s, d.health_failures, d.health_interval_s,
                                  cfg.rpc)

    @property
    def collector_addresses(self) -> list[str]:
        return [c.info["address"] for c in self.collectors]

    def start(self) -> None:
        """Sim servers and collectors at once (the sims' ports are picked first, so the
        collectors know them and connect as soon as the servers listen), then the
        supervisor."""
        self._spawn_all(self._sim_children(pick_ports=True))
        self._spawn_all(self._collector_children())
        self._wait_all([*self.sims, *self.collectors])
        self.supervise()

    def start_sims(self) -> list[str]:
        """Only the deploy.sim_servers `skurl serve-sim` processes; their addresses."""
        self._wait_all(self._spawn_all(self._sim_children(pick_ports=False)))
        return [s.info["address"] for s in self.sims]

    def _metrics_port(self, offset: int) -> int:
        base = self.cfg.deploy.metrics_base_port  # learner on it, then sims, then collectors
        return base + offset if base else 0

    def _sim_children(self, pick_ports: bool) -> list[Child]:
        self.dir.mkdir(parents=True, exist_ok=True)
        sim_cfg = self._write_config("sim.yaml", self.cfg)
        n = self.cfg.deploy.sim_servers
        self.sims = [Child(f"sim-{i}", ["serve-sim", "--config", str(sim_cfg), "--shard", f"{i}/{n}"],
                           self.dir / f"sim-{i}.log", port=_free_port() if pick_ports else 0,
                           metrics_port=self._metrics_port(1 + i)) for i in range(n)]
        return self.sims

    def _collector_children(self) -> list[Child]:
        d = self.cfg.deploy
        roles = dataclasses.replace(self.cfg, deploy=dataclasses.replace(
            d, sim_addresses=[s.info.get("address") or f"127.0.0.1:{s.port}" for s in self.sims],
            weights_address=self.weights_address or ""))
        role_cfg = self._write_config("roles.yaml", roles)
        n, k = len(self.sims), d.collectors
        self.collectors = [Child(f"c{j}", ["collector", "--config", str(role_cfg), "--index", f"{j}/{k}",
                                           "--id", f"c{j}", "--run", self.run_name],
                                 self.dir / f"c{j}.log", metrics_port=self._metrics_port(1 + n + j))
                           for j in range(k)]
        return self.collectors

    def supervise(self) -> None:
        """Start the thread that restarts dead processes."""
        self._thread = threading.Thread(target=self._supervise, name="supervisor", daemon=True)
        self._thread.start()

    @property
    def restarts(self) -> int:
        """Restarts of all children so far."""
        return sum(c.restarts for c in (*self.sims, *self.collectors))

    def describe(self) -> dict[str, Any]:
        def child(c: Child) -> dict[str, Any]:
            return dict(c.info, name=c.name, pid=c.proc.pid if c.proc else None, restarts=c.restarts)

        return {"weights": self.weights_address, "sims": [child(c) for c in self.sims],
                "collectors": [child(c) for c in self.collectors]}

    def write_description(self) -> None:
        """RUN_DIR/decoupled/cluster.json: addresses, current pids and restarts (rewritten
        after each restart, atomically, so operators and chaos tests read live pids)."""
        write_text(self.dir / "cluster.json", json.dumps(self.describe(), indent=1))

    def stop(self) -> None:
        """Collectors first (they close their sessions on the sim servers), then sims."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        for group in (self.collectors, self.sims):
            _terminate([c.proc for c in group if c.proc is not None])
            for c in group:
                if c.lifeline is not None:
                    os.close(c.lifeline)
                    c.lifeline = None

    # -------------------------------------------------------------------- internals
    def _write_config(self, name: str, cfg: Config) -> Path:
        path = self.dir / name
        path.write_text(yaml.safe_dump(config_to_dict(cfg), sort_keys=False))
        return path

    def _spawn(self, child: Child) -> None:
        cmd = [sys.executable, "-m", "skurl.cli", *child.args, "--host", "127.0.0.1",
               "--port", str(child.port), "--metrics-port", str(child.metrics_port)]
        env = {**os.environ, "GRPC_VERBOSITY": "ERROR", "PYTHONUNBUFFERED": "1"}
        if child.lifeline is not None:  # a restart: the old child's pipe is done
            os.close(child.lifeline)
        with child.log_path.open("ab") as out:  # the child keeps its own descriptor
            child.proc, child.lifeline = lifeline_popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                                        env=env, stdin=subprocess.DEVNULL)
        child.info["log"] = str(child.log_path)

    def _spawn_all(self, children: list[Child]) -> list[Child]:
        for c in children:
            c.info["log_offset"] = c.log_path.stat().st_size if c.log_path.exists() else 0
            self._spawn(c)
        return children

    def _wait_all(self, children: list[Child]) -> None:
        deadline = time.monotonic() + self.cfg.deploy.start_timeout_s
        for c in children:
            c.info.update(self._wait_ready(c, c.info.pop("log_offset", 0), deadline))
            c.port = int(c.info["address"].rsplit(":", 1)[1])
            c.metrics_port = int(c.info["metrics"].rsplit(":", 1)[1].split("/")[0])

    def _wait_ready(self, child: Child, offset: int, deadline: float) -> dict[str, Any]:
        """The child's READY information, read from its log (UserError if it exits or
        does not get ready by the deadline, with its last log line)."""
        assert child.proc is not None
        while True:
            with child.log_path.open("rb") as f:
                f.seek(offset)
                lines = f.read().decode(errors="replace").splitlines()
            for line in lines:
                info = _parse_ready(line)
                if info is not None:
                    return info
            if child.proc.poll() is not None:
                last = next((x for x in reversed(lines) if x.strip()), "(no output)")
                raise UserError(f"{child.name} exited with code {child.proc.returncode} before "
                                f"it was ready: {last.strip()} (log: {child.log_path})")
            if time.monotonic() > deadline:
                raise UserError(f"{child.name} was not ready within deploy.start_timeout_s="
                                f"{self.cfg.deploy.start_timeout_s:g} s (log: {child.log_path})")
            time.sleep(_POLL_S)

    def _supervise(self) -> None:
        """Restart a dead child on its own port, up to deploy.max_restarts times; a live one
        that stops answering its grpc.health.v1 checks is killed first (rpc/health.py)."""
        while not self._stopping.wait(_POLL_S):
            for c in (*self.sims, *self.collectors):
                if c.proc is None or self._stopping.is_set():
                    continue
                if c.proc.poll() is None:
                    if not self._hung(c):
                        continue
                    log.warning("%s stopped answering grpc.health.v1 checks; killing it", c.name)
                    c.proc.kill()
                    c.proc.wait()
                if c.restarts >= self.cfg.deploy.max_restarts:
                    if self.failed is None:
                        self.failed = (f"{c.name} died {c.restarts + 1} times (code "
                                       f"{c.proc.returncode}); see {c.log_path}")
                        log.error("%s", self.failed)
                    continue
                c.restarts += 1
                log.warning("%s exited with code %s; restarting it on port %d (restart %d of %d)",
                            c.name, c.proc.returncode, c.port, c.restarts, self.cfg.deploy.max_restarts)
                self._spawn(c)
                self._liveness.restarted(c.name, hold_s=self.cfg.deploy.start_timeout_s)
                get_metrics().process_restarts_total.labels(child=c.name).inc()
                self.write_description()

    def _hung(self, child: Child) -> bool:
        """deploy.health_interval_s > 0: the child failed deploy.health_failures checks in a row."""
        address = child.info.get("address")
        return bool(self.cfg.deploy.health_interval_s and address
                    and self._liveness.stopped_answering(child.name, address))


def lifeline_popen(cmd: list[str], **kwargs: Any) -> tuple[subprocess.Popen[bytes], int]:
    """Popen a skurl role that stops when this process dies, however it dies (SIGKILL
    included): the child holds the read end of a pipe (SKURL_PARENT_FD) and stops on its
    EOF (roles.wait_for_signal), which the kernel delivers when the write end returned
    here closes. Works whichever thread spawned the child, unlike PR_SET_PDEATHSIG."""
    read, write = os.pipe()
    env = {**(kwargs.pop("env", None) or os.environ), PARENT_FD_ENV: str(read)}
    try:
        proc = subprocess.Popen(cmd, env=env, pass_fds=(read,), **kwargs)
    except BaseException:
        os.close(write)
        raise
    finally:
        os.close(read)
    return proc, write


def _terminate(procs: list[subprocess.Popen[bytes]], grace_s: float = 10.0) -> None:
    """SIGTERM (a graceful stop), then SIGKILL for whoever is still there after grace_s."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _free_port() -> int:
    """A loopback port free right now (a server started on it soon will very likely get it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _parse_ready(line: str) -> dict[str, Any] | None:
    if line.startswith(READY):
        info: dict[str, Any] = json.loads(line[len(READY):])
        return info
    m = _SIM_READY.search(line.strip())
    if m:
        metrics = m.group(2) or ""
        return {"role": "sim", "address": m.group(1),
                "metrics": f"http://{metrics}" if metrics and "://" not in metrics else metrics}
    return None


class InProcessRoles:
    """Sim servers and collectors as servers inside this process (tests, debugging): the
    same servicers and clients as the processes above, without their start-up cost."""

    def __init__(self, cfg: Config, weights_address: str | None = None, run_name: str = "skurl") -> None:
        from skurl.catalog import load_catalog
        from skurl.modes.decoupled.roles import CollectorProcess
        from skurl.rpc.env_server import serve_shards

        d = cfg.deploy
        self.sims = serve_shards(load_catalog(cfg.catalog), cfg.sim, cfg.rpc, d.sim_servers,
                                 d.partition)
        self.collectors: list[Any] = []
        try:
            self.cfg = dataclasses.replace(cfg, deploy=dataclasses.replace(
                d, sim_addresses=[s.address for s in self.sims],
                weights_address=weights_address or ""))
            for j in range(d.collectors):
                self.collectors.append(CollectorProcess(self.cfg, f"c{j}", j, d.collectors, run_name=run_name))
        except BaseException:
            self.close()
            raise

    @property
    def collector_addresses(self) -> list[str]:
        return [c.info["address"] for c in self.collectors]

    def close(self) -> None:
        for c in self.collectors:
            c.close()
        for s in self.sims:
            s.stop(0)


class RestartsCounted:
    """The run's collectors, each iteration's scalars adding the restarts so far
    (metrics.jsonl and TensorBoard): `process_restarts`, the supervisor's, and with
    sync.backend=redis `redis_restarts`, those of Redis seen between publishes."""

    def __init__(self, inner: Collectors, cluster: LocalCluster, weights: object) -> None:
        self.inner, self.cluster, self.weights = inner, cluster, weights

    def collect(self, iteration: int, seed: int, version: int, sample: SampleIndex) -> Collected:
        got = self.inner.collect(iteration, seed, version, sample)
        got.scalars["process_restarts"] = float(self.cluster.restarts)
        if hasattr(self.weights, "server_restarts"):
            got.scalars["redis_restarts"] = float(self.weights.server_restarts())
        return got

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def with_run_store(cfg: Config, run_dir: Path) -> Config:
    """store.url left at its default means a directory inside the run dir (absolute, so
    every process finds the same one)."""
    if cfg.store.url != StoreConfig().url:
        return cfg
    url = str((run_dir / "rollouts").resolve())
    return dataclasses.replace(cfg, store=dataclasses.replace(cfg.store, url=url))
