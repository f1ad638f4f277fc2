"""The process mains of the decoupled deployment's roles (docs/architecture.md, Modes): collector and learner.

A collector process drives some sim servers' shards (modes/decoupled/shard_envs.py) with the
policy, serves CollectorService (modes/decoupled/collector_server.py) for the learner, follows the
weights on the sync backend (Redis, or the learner's WeightSyncService) into the
servicer's slot, writes each episode as its shard of the iteration to the rollout store,
and exports collector_* metrics, the barrier wait and the episode's business metrics.
The learner role is the loop with GrpcCollectors (modes/decoupled/wiring.py) over collectors given by
address. `skurl collector` / `skurl learner` (commands/roles_cmd.py) run them alone, for a
deployment across machines; `skurl train --mode decoupled` starts them all on one.
"""

from __future__ import annotations

import json
import logging
import signal
import socket
import threading
import time
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

from skurl.collect.staleness import refuse_unbuilt
from skurl.config import Config
from skurl.errors import ConfigError
from skurl.modes.decoupled.collector_server import CollectorServer, CollectorServicer
from skurl.rpc.servicer_base import rpc_method
from skurl.sync import open_subscriber
from skurl.sync.api import WeightSubscriber, WeightSyncTimeout

if TYPE_CHECKING:
    import grpc

    from skurl.buffer.rollout import Rollout
    from skurl.catalog.schema import Catalog
    from skurl.collect.collector import Collector
    from skurl.learn.labelling import Labeller
    from skurl.modes.decoupled.shard_envs import CatalogSchemaEnv
    from skurl.rpc.gen import skurl_pb2 as pb
    from skurl.sim.api import Env
    from skurl.store.api import RolloutStore
    from skurl.store.shard_queue_redis import RedisShardQueue

log = logging.getLogger("skurl.modes")
READY = "skurl-ready "  # prefix of the one line a role prints once it serves (then JSON)
_FOLLOW_POLL_S = 0.5


def check_decoupled(cfg: Config) -> None:
    """Settings a decoupled role cannot work with: one line naming the key."""
    if cfg.sync.backend == "inproc":
        raise ConfigError("sync.backend = 'inproc': in-process weights cannot reach other "
                          "processes; expected redis or grpc for --mode decoupled")
    if cfg.deploy.collectors > cfg.deploy.sim_servers:
        raise ConfigError(f"deploy.collectors = {cfg.deploy.collectors}: expected at most "
                          f"deploy.sim_servers = {cfg.deploy.sim_servers} (each collector drives "
                          "whole sim servers)")
    if cfg.collect.skus:
        raise ConfigError(f"collect.skus = {cfg.collect.skus}: --mode decoupled "
                          "collects every SKU of the sim servers each iteration; expected 0 "
                          "(use ppo.sample_skus to train on a sample)")
    refuse_unbuilt(cfg.collect, "decoupled")  # before any process, directory or store exists


class RoleCollectorServicer(CollectorServicer):
    """CollectorService of a collector process: weights arrive from a follower thread
    (`offer`), and each Collect records the barrier wait, timings and business totals in
    its shard's manifest and in this process's metrics."""

    _collector: Collector
    _store: RolloutStore

    def __init__(self, collector_id: str, collector: Collector, env: CatalogSchemaEnv, cfg: Config,
                 store: RolloutStore,
                 run_name: str, shard_envs: list[Any] | None = None) -> None:
        # One rollout kept for GetBuffer (debugging): the learner reads the store.
        super().__init__(collector_id, collector, cfg.rpc, store=store, keep_iterations=1,
                         model_key=cfg.sync.key)
        self._env = env  # CatalogSchemaEnv: business totals of the last episode
        self._backorders = cfg.sim.backorders
        self._shard_envs = list(shard_envs or [])  # ReplayingRemoteEnvs: recoveries
        self._run_name = run_name
        self._received: dict[int, float] = {}  # version -> unix time it was offered
        self._barrier_wait = 0.0
        self._center_sha = ""  # the cover grid's tuned centre in use (modes/decoupled/remote_grid.py)
        self._full_cfg = cfg
        self._labeller: tuple[str, Labeller] | None = None  # DCL's, by grid centre (label_service.py)
        self.announce: RedisShardQueue | None = None  # the run's shard stream (modes/decoupled/shard_stream.py), where used

    def _prepare(self, request: pb.CollectRequest) -> None:
        """Centre the cover grid on the blob the request names, once per centre."""
        from skurl.modes.decoupled.remote_grid import fetch_center

        sha = request.grid_center_sha256
        if sha and sha != self._center_sha:
            self._collector.use_center(fetch_center(self._store, request.grid_center_blob, sha))
            self._center_sha = sha

    @rpc_method
    def Label(self, request: pb.LabelRequest, context: grpc.ServicerContext) -> pb.LabelReply:
        """A DCL label or check job on this collector's SKUs (modes/decoupled/label_service.py)."""
        from skurl.modes.decoupled.label_service import answer

        with self._collect_lock:  # one episode or job at a time
            return answer(request, self._label_env(request), self._store, self.collector_id)

    def _label_env(self, request: pb.LabelRequest) -> Labeller:
        from skurl.learn.labelling import Labeller
        from skurl.modes.decoupled.remote_grid import fetch_center
        from skurl.policy.learned import grid_for

        sha = request.grid_center_sha256
        if self._labeller is None or self._labeller[0] != sha:
            center = fetch_center(self._store, request.grid_center_blob, sha) if sha else None
            cfg = self._full_cfg
            self._labeller = (sha, Labeller(_catalog_rows(cfg, self._env), cfg.sim, grid_for(cfg).with_center(center)))
        return self._labeller[1]

    def offer(self, version: int, tensors: dict[str, Any]) -> bool:
        """Hold `version` for the next Collect when it is newer than the held one."""
        self._received[int(version)] = time.time()  # before a waiter can wake on it
        if self._pending.offer(int(version), tensors):
            return True
        self._received.pop(int(version), None)
        return False

    def _wait_for(self, version: int, timeout_s: float, *,
                  alive: Callable[[], bool] | None = None) -> tuple[int, dict[str, Any]]:
        from skurl.telemetry.metrics import get_metrics

        start = time.perf_counter()
        held = super()._wait_for(version, timeout_s, alive=alive)
        self._barrier_wait = time.perf_counter() - start
        metrics = get_metrics()
        metrics.barrier_wait_seconds.observe(self._barrier_wait)
        # Lag as this side sees it: from the learner's request (sent right after it
        # published) to holding the version; the learner logs the exact publish-to-held lag.
        metrics.collector_weight_sync_lag_seconds.set(self._barrier_wait)
        return held

    def _store_shard(self, iteration: int, rollout: Rollout) -> str:
        from skurl.telemetry.metrics import get_metrics

        stats = self._collector.stats
        business = self._env.business(self._backorders)
        meta = {"policy_version": int(rollout.policy_version), "sku_count": rollout.num_skus,
                "rows": rollout.transitions, "seed": rollout.seed, "episode": rollout.episode,
                "barrier_wait_s": self._barrier_wait,
                "weights_received_unix": self._received.get(int(rollout.policy_version)),
                "collect_s": stats.seconds, "simulate_s": stats.sim_seconds,
                "infer_s": stats.infer_seconds,
                "sim_replays": sum(e.recoveries for e in self._shard_envs),
                "totals": dict(self._env.totals), "sku_days": rollout.transitions,
                "host": socket.gethostname()}
        manifest = self._store.put_shard(iteration, self.collector_id, packed_arrays(rollout),
                                         meta)
        if self.announce is not None:  # stored first: an entry always names a shard that is there
            self.announce.put(manifest)
        m = get_metrics()
        m.collector_episodes_total.inc()
        m.collector_episode_duration_seconds.observe(stats.seconds)
        m.collector_steps_per_second.set(rollout.transitions / max(stats.seconds, 1e-9))
        m.collector_buffer_size.set(rollout.transitions)
        m.record_business(self._run_name, "collect", business)
        return manifest.to_json().decode()


def packed_arrays(rollout: Rollout) -> dict[str, Any]:
    """The rollout's arrays for the store, its obs [T, N, D] packed day by day
    (buffer/obs_delta.py: ~1/13 of the bytes to compress; the learner unpacks them)."""
    from skurl.buffer.obs_delta import encode_days
    from skurl.buffer.rollout import Columns

    arrays = rollout.arrays()
    return {**{k: v for k, v in arrays.items() if k != Columns.OBS},
            **encode_days(arrays[Columns.OBS])}


class WeightFollower:
    """Background thread: each newer version on the subscriber goes into `offer`."""

    def __init__(self, subscriber: WeightSubscriber, offer: Callable[[int, dict[str, Any]], object]) -> None:
        self.subscriber = subscriber
        self._offer = offer
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="weights-follower", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        want = 0
        while not self._stop.is_set():
            try:
                version, tensors = self.subscriber.wait_for(want, timeout=_FOLLOW_POLL_S)
            except WeightSyncTimeout:
                continue
            except Exception:  # the barrier relies on this thread: log and keep following
                log.exception("weights follower")
                self._stop.wait(_FOLLOW_POLL_S)
                continue
            self._offer(version, tensors)
            want = version + 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.subscriber.close()


class CollectorProcess:
    """Everything a collector process runs; `close()` stops it all."""

    def __init__(self, cfg: Config, collector_id: str, index: int, count: int, *,
                 host: str = "127.0.0.1", port: int = 0, metrics_port: int = 0,
                 run_name: str = "skurl") -> None:
        from skurl.collect.collector import Collector
        from skurl.modes.decoupled.remote_grid import needs_raw
        from skurl.modes.decoupled.shard_envs import assign_shards, collector_env
        from skurl.modes.decoupled.shard_stream import open_stream, uses_stream
        from skurl.policy.learned import grid_for
        from skurl.policy.nets import ActorCritic
        from skurl.rpc.feature_delta import warm_up as warm_up_delta
        from skurl.store import open_store
        from skurl.telemetry.metrics import serve_metrics
        from skurl.telemetry.stages import StageTimer
        from skurl.train.core import set_threads

        check_decoupled(cfg)
        addresses = list(cfg.deploy.sim_addresses)
        if not addresses:
            raise ConfigError("deploy.sim_addresses is empty: a collector needs the host:port "
                              "of every sim server, in shard order")
        if not 0 <= index < count:
            raise ConfigError(f"collector index {index}/{count}: expected 0 <= index < count")
        set_threads(cfg)
        warm_up_delta()  # compiled before the first Collect has a deadline
        self._closers: list[Any] = []
        try:
            shards = assign_shards(len(addresses), count)[index]
            env, shard_envs = collector_env(addresses, shards, cfg.rpc,
                                            cfg.deploy.reconnect_timeout_s,
                                            cfg.deploy.start_timeout_s, raw=needs_raw(cfg))
            self._closers.append(env)
            grid = grid_for(cfg)
            model = ActorCritic(env.schema.dim, grid.n, cfg.policy.hidden)
            collector = Collector.from_config(env, model, grid, cfg.collect, timer=StageTimer(),
                                              catalog=_catalog_rows(cfg, env) if needs_raw(cfg) else None)
            self.servicer = RoleCollectorServicer(collector_id, collector, env, cfg,
                                                  open_store(cfg.store), run_name, shard_envs)
            if uses_stream(cfg):  # bounded staleness: each stored shard announced on the run's stream
                self.servicer.announce = open_stream(cfg, run_name, collector_id)
                self._closers.append(self.servicer.announce)
            self.server = CollectorServer(self.servicer, cfg.rpc, host, port)
            self._closers.append(self.server)
            self.follower = WeightFollower(open_subscriber(cfg, model.state_dict()),
                                           self.servicer.offer)
            self._closers.append(self.follower)
            self.metrics = serve_metrics(metrics_port, addr=host)
            self._closers.append(self.metrics)
        except BaseException:
            self.close()
            raise
        self.info = {"role": "collector", "id": collector_id, "address": self.server.address,
                     "metrics": self.metrics.url, "shards": shards, "skus": env.num_skus}

    def close(self) -> None:
        for closer in reversed(self._closers):
            try:
                closer.stop() if isinstance(closer, CollectorServer) else closer.close()
            except Exception:  # keep closing the rest
                log.exception("closing %s", type(closer).__name__)
        self._closers = []


def _catalog_rows(cfg: Config, env: Env) -> Catalog:
    """The catalog rows of the collector's SKUs, in its env's order (the cover grid's)."""
    from skurl.catalog import load_catalog
    from skurl.modes.decoupled.remote_grid import catalog_rows_for

    return catalog_rows_for(load_catalog(cfg.catalog), env.sku_ids, "collector")


def run_collector(cfg: Config, collector_id: str, index: int, count: int, *,
                  host: str = "127.0.0.1", port: int = 0, metrics_port: int = 0,
                  run_name: str = "skurl", out: IO[str] | None = None) -> int:
    """`skurl collector`: serve until SIGTERM/SIGINT; one READY line once serving."""
    process = CollectorProcess(cfg, collector_id, index, count, host=host, port=port,
                               metrics_port=metrics_port, run_name=run_name)
    try:
        announce(process.info, out)
        wait_for_signal()
    finally:
        process.close()
    return 0


def announce(info: dict[str, Any], out: IO[str] | None = None) -> None:
    """The READY line a launcher waits for: role, address, metrics URL as JSON."""
    import sys

    stream = out or sys.stdout
    stream.write(READY + json.dumps(info) + "\n")
    stream.flush()


def wait_for_signal() -> None:
    """Block until SIGTERM or SIGINT (handlers only set an event), or until the launching
    process dies (the pipe of supervisor.lifeline_popen reaches EOF)."""
    stop = threading.Event()

    def handler(signum: int, frame: object) -> None:
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handler)
    watch_parent(stop)
    while not stop.wait(0.5):
        pass


def watch_parent(stop: threading.Event) -> None:
    """Set `stop` when the parent's lifeline pipe (SKURL_PARENT_FD) closes."""
    import os

    fd = os.environ.pop("SKURL_PARENT_FD", "")
    if not fd.isdigit():
        return

    def wait_eof() -> None:
        try:
            while os.read(int(fd), 1):
                pass
        except OSError:
            pass
        log.warning("the launching process is gone; stopping")
        stop.set()

    threading.Thread(target=wait_eof, name="parent-lifeline", daemon=True).start()
