"""Settings of the service side of skurl (docs/architecture.md: Wire formats and services, Modes): weight sync, rollout store, gRPC
transport, the decoupled deployment and Ray. Part of `skurl.config` (imported there, with
the same help-text conventions); apart only to keep each file to one responsibility.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from skurl.config.loader import check, opt, section

SyncBackend = Literal["inproc", "redis", "grpc"]
_SYNC_KEY = re.compile(r"[A-Za-z0-9_.-]{1,128}")


@dataclass(frozen=True)
class SyncConfig:
    backend: SyncBackend = opt(
        "inproc", "how weights travel from learner to collectors: inproc (one process) | redis | grpc"
    )
    redis_url: str = opt(
        "redis://127.0.0.1:6379/0", "Redis server for sync.backend=redis (and the shard stream): "
        "redis://[user@]host:port/db, or rediss:// for TLS (?ssl_ca_certs=/ca.pem&ssl_certfile=..."
        "&ssl_keyfile=... for a private CA and client certificates); a password here is masked in "
        "logs, but prefer sync.redis_password_file (docs/security.md)")
    redis_password_file: str = opt(
        "", "file whose first line is the Redis password (AUTH / ACL user of sync.redis_url); "
        "empty = the URL's own password, if any")
    key: str = opt("policy", "model key: names the Redis keys rl:weights:{key}, rl:version:{key}")
    timeout_s: float = opt(60.0, "longest wait for a policy version at the sync barrier, seconds")
    poll_s: float = opt(
        0.5, "interval of the version-key poll that backs up the Redis channel, seconds"
    )
    weights_in_store: bool = opt(
        False, "Redis carries only the version signal; weights live in the rollout store (store.url)"
    )

    def __post_init__(self) -> None:
        check(bool(_SYNC_KEY.fullmatch(self.key)), "sync.key", self.key,
              "1-128 characters of letters, digits, '_', '-', '.'")
        check(self.redis_url.startswith(("redis://", "rediss://", "unix://")), "sync.redis_url",
              self.redis_url, "a URL like redis://host:6379/0")
        check(self.timeout_s > 0, "sync.timeout_s", self.timeout_s, "a number > 0")
        check(0 < self.poll_s <= 60, "sync.poll_s", self.poll_s, "a number in (0, 60]")


@dataclass(frozen=True)
class StoreConfig:
    url: str = opt("runs/rollouts", "rollout store: a directory path or s3://bucket/prefix")
    endpoint_url: str | None = opt(
        None, "S3-compatible endpoint (MinIO, moto_server), e.g. http://127.0.0.1:9000; null = AWS"
    )
    compression_level: int = opt(
        1, "zstd level of rollout shards: -5 (fastest) .. 22 (smallest); 1 packs rollouts as small as 3, 3x faster")
    create_bucket: bool = opt(False, "create the S3 bucket of store.url when it does not exist")
    timeout_s: float = opt(10.0, "S3 connect/read timeout, seconds")

    def __post_init__(self) -> None:
        check(bool(self.url.strip()), "store.url", self.url, "a directory path or s3://bucket/prefix")
        check(not self.url.startswith("s3://") or len(self.url) > len("s3://"), "store.url",
              self.url, "s3://bucket/prefix with a bucket name")
        check(self.endpoint_url is None or self.endpoint_url.startswith(("http://", "https://")),
              "store.endpoint_url", self.endpoint_url, "null or an http(s):// URL")
        check(-5 <= self.compression_level <= 22, "store.compression_level",
              self.compression_level, "an integer in -5..22")
        check(self.timeout_s > 0, "store.timeout_s", self.timeout_s, "a number > 0")


_HOST_PORT = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})")


def _is_host_port(address: str) -> bool:
    m = _HOST_PORT.fullmatch(address)
    return m is not None and 1 <= int(m.group(2)) <= 65535


@dataclass(frozen=True)
class TlsConfig:
    cert: str = opt("", "PEM certificate this process presents, as server and as client (mutual "
                    "TLS on every gRPC service); empty = no TLS. scripts/dev_certs.sh makes one")
    key: str = opt("", "PEM private key of rpc.tls.cert")
    ca: str = opt("", "PEM certificate of the CA that signed every peer's certificate: servers "
                  "require client certificates from it, clients check servers against it")
    server_name: str = opt("", "the name clients expect in servers' certificates instead of the "
                           "host they dial (e.g. behind a proxy); empty = the dialled host")

    def __post_init__(self) -> None:
        given = [bool(self.cert), bool(self.key), bool(self.ca)]
        check(all(given) or not any(given), "rpc.tls", {"cert": self.cert, "key": self.key,
              "ca": self.ca}, "all three of cert, key and ca, or none")


@dataclass(frozen=True)
class RpcConfig:
    max_message_mb: int = opt(
        512, "largest gRPC message in MiB, sent or received; one value sets client and server "
        "limits (a 100k-SKU step reply of the synthetic catalog is ~60 MiB)"
    )
    keepalive_s: float = opt(
        30.0, "seconds between keepalive pings on a connection (client and server); 0 = off"
    )
    timeout_s: float = opt(120.0, "deadline of each gRPC call in seconds")
    max_connection_age_s: float = opt(
        1800.0, "servers close each client connection after about this many seconds (the "
        "client reconnects, so long-running collectors rebalance across servers behind a load "
        "balancer); 0 = never"
    )
    max_connection_age_grace_s: float = opt(
        600.0, "seconds the calls in flight on an aged connection (a Collect, a Subscribe "
        "stream) may still take before the server cuts them, never less than rpc.timeout_s; "
        "keep it above a Collect's deadline (sync.timeout_s + rpc.timeout_s); a cut stream "
        "resubscribes"
    )
    session_idle_s: float = opt(
        3600.0, "a sim server closes a client session (env id) after this many seconds without "
        "a call, so crashed clients do not hold its session slots; keep it above the longest "
        "pause between a collector's episodes; 0 = never"
    )
    tls: TlsConfig = section(TlsConfig, "mutual TLS of every gRPC server and client (docs/security.md)")
    token_file: str = opt(
        "", "file whose first line is a bearer token: clients send it, servers refuse calls "
        "without it (UNAUTHENTICATED; health checks stay open); empty = no token"
    )
    require_tls: bool = opt(
        False, "refuse to start a gRPC server on a non-loopback address without rpc.tls (without "
        "this, such a server only logs a warning)"
    )

    def __post_init__(self) -> None:
        # gRPC lengths are signed 32-bit: 2 GiB - 1 byte is the hard ceiling.
        check(1 <= self.max_message_mb <= 2047, "rpc.max_message_mb", self.max_message_mb,
              "an integer in 1..2047")
        check(self.keepalive_s == 0 or 1 <= self.keepalive_s <= 86_400, "rpc.keepalive_s",
              self.keepalive_s, "0 (off) or seconds in 1..86400")
        check(0 < self.timeout_s <= 86_400, "rpc.timeout_s", self.timeout_s, "seconds in (0, 86400]")
        check(self.max_connection_age_s == 0 or 0.1 <= self.max_connection_age_s <= 31_536_000,
              "rpc.max_connection_age_s", self.max_connection_age_s,
              "0 (never) or seconds in 0.1..31536000")
        check(0 <= self.max_connection_age_grace_s <= 31_536_000, "rpc.max_connection_age_grace_s",
              self.max_connection_age_grace_s, "seconds in 0..31536000")
        check(self.session_idle_s == 0 or 1 <= self.session_idle_s <= 31_536_000,
              "rpc.session_idle_s", self.session_idle_s, "0 (never) or seconds in 1..31536000")


@dataclass(frozen=True)
class DeployConfig:
    sim_servers: int = opt(
        1, "simulator servers (catalog shards) in decoupled mode; on one machine one server "
        "already runs on every core (sim.threads), so more only add a gRPC hop and a merge per "
        "day: use more to spread the catalog over machines")
    collectors: int = opt(1, "collector processes in decoupled mode")
    sim_addresses: list[str] = opt(
        [], "host:port of each running sim server, shard order; empty = start sim_servers "
        "locally on base_port, base_port+1, ..."
    )
    base_port: int = opt(50051, "first port of locally started servers")
    partition: Literal["round_robin_cost", "equal", "lpt"] = opt(
        "round_robin_cost", "how SKUs are split across sim servers (substitution groups stay "
        "together): round_robin_cost | equal | lpt"
    )
    collector_addresses: list[str] = opt(
        [], "host:port of each running collector (`skurl collector`) for `skurl learner`; "
        "--mode decoupled starts its own on free loopback ports"
    )
    weights_address: str = opt(
        "", "host:port of the learner's WeightSyncService (sync.backend=grpc), for collectors "
        "started alone"
    )
    weights_port: int = opt(
        0, "port of the WeightSyncService the learner hosts (sync.backend=grpc); 0 = a free port"
    )
    metrics_base_port: int = opt(
        0, "Prometheus /metrics ports: learner on it, sim servers on the next ones, then "
        "collectors; 0 = a free port for each process"
    )
    start_timeout_s: float = opt(
        180.0, "longest wait for a locally started sim server or collector to be ready, seconds"
    )
    reconnect_timeout_s: float = opt(
        60.0, "how long a collector waits for a lost sim server to come back (then it replays "
        "the episode's orders from day 0), and the learner for a lost collector, seconds"
    )
    max_restarts: int = opt(
        3, "restarts of each locally started sim server or collector that dies, before the run fails"
    )
    collect_retries: int = opt(
        2, "per iteration: re-collections of a collector's share whose shard is corrupt or "
        "missing, and re-publications of weights no collector could load"
    )
    max_lost_share: float = opt(
        0.05, "every mode with remote collectors (decoupled, ray): when collectors die during an "
        "iteration and their SKUs are at most this share of the iteration's SKUs, the iteration "
        "trains without them (logged, counted in collector_shares_lost_total); above it, it waits "
        "for restarted or replacement collectors to collect them again. DCL's label jobs wait "
        "deploy.reconnect_timeout_s first, then apply the same share to their states"
    )
    health_interval_s: float = opt(
        5.0, "--mode decoupled: seconds between the supervisor's grpc.health.v1 checks of each "
        "running sim server and collector; 0 = only restart processes that exit"
    )
    health_timeout_s: float = opt(
        10.0, "longest wait for one health check's answer, seconds (a busy server still answers: "
        "checks run on their own handler threads)"
    )
    health_failures: int = opt(
        3, "consecutive failed health checks after which the supervisor kills a process that no "
        "longer answers and restarts it (counted in deploy.max_restarts)"
    )

    def __post_init__(self) -> None:
        check(1 <= self.sim_servers <= 4096, "deploy.sim_servers", self.sim_servers, "1..4096")
        check(1 <= self.collectors <= 4096, "deploy.collectors", self.collectors, "1..4096")
        check(self.base_port >= 1 and self.base_port + self.sim_servers - 1 <= 65535,
              "deploy.base_port", self.base_port,
              f"a port such that base_port + {self.sim_servers} - 1 <= 65535")
        for i, address in enumerate(self.sim_addresses):
            check(_is_host_port(address), f"deploy.sim_addresses[{i}]", address,
                  "host:port, e.g. 10.0.0.5:50051")
        check(len(self.sim_addresses) in (0, self.sim_servers), "deploy.sim_addresses",
              list(self.sim_addresses), f"empty or {self.sim_servers} addresses (deploy.sim_servers)")
        for i, address in enumerate(self.collector_addresses):
            check(_is_host_port(address), f"deploy.collector_addresses[{i}]", address,
                  "host:port, e.g. 10.0.0.6:50061")
        check(not self.weights_address or _is_host_port(self.weights_address),
              "deploy.weights_address", self.weights_address, "empty or host:port")
        for key in ("weights_port", "metrics_base_port"):
            v = getattr(self, key)
            check(0 <= v <= 65535, f"deploy.{key}", v, "a port in 0..65535 (0 = any free port)")
        check(self.start_timeout_s > 0, "deploy.start_timeout_s", self.start_timeout_s, "a number > 0")
        check(self.reconnect_timeout_s > 0, "deploy.reconnect_timeout_s", self.reconnect_timeout_s,
              "a number > 0")
        check(0 <= self.max_restarts <= 1000, "deploy.max_restarts", self.max_restarts, "0..1000")
        check(0 <= self.collect_retries <= 100, "deploy.collect_retries", self.collect_retries,
              "0..100")
        check(0 <= self.max_lost_share <= 1, "deploy.max_lost_share", self.max_lost_share,
              "a share in [0, 1]")
        check(self.health_interval_s == 0 or 0.1 <= self.health_interval_s <= 86_400,
              "deploy.health_interval_s", self.health_interval_s, "0 (off) or seconds in 0.1..86400")
        check(0 < self.health_timeout_s <= 3600, "deploy.health_timeout_s", self.health_timeout_s,
              "seconds in (0, 3600]")
        check(1 <= self.health_failures <= 1000, "deploy.health_failures", self.health_failures,
              "1..1000")


@dataclass(frozen=True)
class RayConfig:
    address: str | None = opt(
        None, "Ray cluster to join (--mode ray), e.g. 10.0.0.5:6379 or auto; null = start a local "
        "Ray instance (no dashboard)"
    )
    num_cpus: int = opt(0, "CPUs of a locally started Ray instance; 0 = this machine's cores")
    num_workers: int = opt(2, "simulator worker actors; each holds one shard of the SKUs")
    cpus_per_worker: float = opt(
        0.5, "Ray CPUs reserved per simulator worker (its numba threads unless sim.threads is set)"
    )
    collectors: int = opt(
        1, "collector actors; each drives num_workers / collectors simulator workers (1 keeps the "
        "whole catalog in one inference stream, as --mode colocated)"
    )
    cpus_per_collector: float = opt(
        0.5, "Ray CPUs reserved per collector; its torch threads follow train.torch_threads (0 = all "
        "cores: inference alternates with its workers' simulation)"
    )
    rollouts: Literal["object_store", "store"] = opt(
        "object_store", "how rollouts reach the learner: object_store (Ray's shared memory) | store "
        "(the rollout store at store.url, one shard per collector)"
    )
    get_timeout_s: float = opt(600.0, "longest wait of any ray.get (one simulated day, one episode), seconds")
    max_restarts: int = opt(
        3, "restarts of a dead simulator worker before it is replaced by a new actor; its shard is "
        "rebuilt by replaying the episode's orders"
    )

    actor_resource: str | None = opt(
        None, "a custom Ray resource each simulator worker and collector actor takes one unit of: actors then "
        "run only on nodes started with it (ray start --resources '{\"skurl\": 8}', a KubeRay worker group), "
        "off the head; null = any node with CPUs free"
    )
    spread: bool = opt(False, "place the actors with Ray's SPREAD strategy (across the nodes) instead of packed")

    def __post_init__(self) -> None:
        check(self.actor_resource is None or (self.actor_resource.strip() == self.actor_resource != ""
                                             and self.actor_resource not in ("CPU", "GPU", "memory")),
              "ray.actor_resource", self.actor_resource, "null or a custom resource name (not CPU, GPU, memory)")
        check(self.address is None or bool(self.address.strip()), "ray.address", self.address,
              "null or host:port / auto / ray://host:port")
        check(self.num_cpus >= 0, "ray.num_cpus", self.num_cpus, "an integer >= 0")
        check(1 <= self.num_workers <= 4096, "ray.num_workers", self.num_workers, "1..4096")
        check(1 <= self.collectors <= self.num_workers, "ray.collectors", self.collectors,
              f"1..ray.num_workers ({self.num_workers})")
        for key in ("cpus_per_worker", "cpus_per_collector"):
            v = getattr(self, key)
            check(0 < v <= 1024, f"ray.{key}", v, "a number of CPUs in (0, 1024]")
        check(self.get_timeout_s > 0, "ray.get_timeout_s", self.get_timeout_s, "a number > 0")
        check(0 <= self.max_restarts <= 1000, "ray.max_restarts", self.max_restarts, "0..1000")


def redis_url_of(sync: SyncConfig) -> str:
    """sync.redis_url with the password of sync.redis_password_file in it (never log it:
    skurl.config.secrets.redact_url)."""
    from pathlib import Path

    from skurl.config.secrets import with_password
    from skurl.errors import ConfigError

    if not sync.redis_password_file:
        return sync.redis_url
    try:
        lines = Path(sync.redis_password_file).expanduser().read_text().splitlines()
    except OSError as exc:
        raise ConfigError(f"sync.redis_password_file = {sync.redis_password_file!r}: cannot read "
                          f"it ({exc.strerror})") from None
    password = lines[0].strip() if lines else ""
    if not password:
        raise ConfigError(f"sync.redis_password_file = {sync.redis_password_file!r}: the first "
                          "line is empty, expected the password")
    return with_password(sync.redis_url, password)
