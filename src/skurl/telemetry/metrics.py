"""The Prometheus metrics of the whole system, defined once, and the /metrics endpoint.

Each process exports only its own role's families (ROLE_FAMILIES: a sim server its step
histogram, a collector its collection figures, ...; `process_role`), so no endpoint
shows zeros for work it never does; every family still exists as an attribute in every
role (recording into one the role does not export is harmless). Role "all" (the default,
for libraries and tests) exports everything. Prometheus adds the `instance` label, so the
metrics carry labels only where one process holds several values (the stage of a timer;
the run and policy of a business result).

Use `get_metrics()` at the point of recording, e.g. `get_metrics().collector_episodes_total.inc()`;
tests swap in a fresh registry with `with use_registry(CollectorRegistry()) as m: ...`."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    start_http_server,
)

from skurl.errors import UserError

if TYPE_CHECKING:
    from contextlib import AbstractContextManager
    from wsgiref.simple_server import WSGIServer

    import torch

# Bucket edges span a 10^3-SKU step on a laptop (sub-millisecond) to a 10^7-SKU
# iteration on a cluster (minutes): factor-of-~2.5 steps keep quantiles readable.
_FAST_BUCKETS = (1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25,
                 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_SLOW_BUCKETS = (1e-3, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                 120.0, 300.0, 600.0, 1800.0, 3600.0)

BUSINESS_LABELS = ("run", "policy")

Role = Literal["all", "learner", "collector", "sim", "colocated"]
_BUSINESS = ("business_fill_rate", "business_lost_units", "business_backordered_units",
             "business_waste_units", "business_mean_on_hand", "business_cost_per_sku_day")
_UPDATE = ("learner_gradient_norm", "learner_weight_version", "learner_updates_total",
           "learner_policy_loss", "learner_value_loss", "learner_entropy", "learner_approx_kl",
           "learner_clip_fraction")
# The SkurlMetrics attributes each kind of process records (and so exports).
ROLE_FAMILIES: dict[str, tuple[str, ...]] = {
    "sim": ("sim_step_duration_seconds",),
    "collector": ("stage_seconds", "collector_episodes_total", "collector_steps_per_second",
                  "collector_episode_duration_seconds", "collector_weight_sync_lag_seconds",
                  "collector_buffer_size", "barrier_wait_seconds", "collector_reward_out_of_range_total",
                  *_BUSINESS),
    # the decoupled/ray learner: it also counts the collectors' shares it trained without
    "learner": ("stage_seconds", *_UPDATE, "learner_training_step_duration_seconds",
                "learner_gpu_memory_allocated_bytes", "barrier_wait_seconds",
                "collector_shares_lost_total", "collector_lost_skus_total", "process_restarts_total",
                *_BUSINESS),
    # learner and collector in one process (issue 42, defect 12: the README says so)
    "colocated": ("stage_seconds", *_UPDATE, "collector_reward_out_of_range_total",
                  "learner_training_step_duration_seconds", "learner_gpu_memory_allocated_bytes",
                  "collector_episodes_total", "collector_steps_per_second",
                  "collector_episode_duration_seconds", "collector_buffer_size", *_BUSINESS),
}
# Near-on-policy training (collect.staleness): the learner's lag figures, and the collection
# thread's idle time and breaker trips (it runs in the learner's process: collect/bounded.py,
# collect/staleness.py; a collector process counts its own).
_STALENESS = ("policy_lag_versions", "sample_freshness", "stale_shards_refused_total", "learner_idle_seconds_total",
              "collector_idle_seconds_total", "collector_breaker_trips_total")
ROLE_FAMILIES["colocated"] += _STALENESS
# DCL's labelling (train.algo=dcl, learn/labelling.py): recorded by the learner, whose labellers
# are the mode's collectors (the colocated learner labels itself: no idle collectors to show).
_DCL = ("dcl_collector_label_seconds", "dcl_rollout_sku_days_per_second", "dcl_rollout_row_days_per_second",
        "dcl_collector_idle_share", "dcl_label_shards_total")
ROLE_FAMILIES["learner"] += _DCL
ROLE_FAMILIES["colocated"] += _DCL
ROLE_FAMILIES["learner"] += _STALENESS
ROLE_FAMILIES["collector"] += ("collector_idle_seconds_total", "collector_breaker_trips_total")
# The shard queue (store/shard_queue.py) is read by the learner.
ROLE_FAMILIES["learner"] += ("shard_queue_refused_total", "shard_queue_resets_total")
# Weights refused as malformed (rpc/, sync/): a collector's pushes and subscriptions, the
# learner's hosted WeightSyncService.
ROLE_FAMILIES["collector"] += ("weights_rejected_total",)
ROLE_FAMILIES["learner"] += ("weights_rejected_total",)


def business_from_totals(totals: dict[str, float], sku_days: int, backorders: bool = False) -> dict[str, float]:
    """Fill rate, lost (or, under sim.backorders, backordered) and waste units, mean on-hand
    per SKU-day from summed day metrics (report.PolicyResult's keys, as record_business
    reads them; the day metric `lost` is the newly backordered units under backorders)."""
    demand, unmet = totals.get("demand", 0.0), totals.get("lost", 0.0)
    return {"fill_rate": totals.get("sales", 0.0) / demand if demand > 0 else 1.0,
            "lost_units": 0.0 if backorders else unmet, "backordered_units": unmet if backorders else 0.0,
            "waste_units": totals.get("waste", 0.0),
            "mean_on_hand": totals.get("on_hand_end", 0.0) / max(sku_days, 1)}


class SkurlMetrics:
    """All of skurl's metrics (attribute name = exported name, but `stage_seconds` is
    skurl_stage_seconds); `role`'s families are registered on `registry`."""

    def __init__(self, registry: CollectorRegistry, role: Role = "all") -> None:
        if role != "all" and role not in ROLE_FAMILIES:
            raise ValueError(f"metrics role {role!r}: expected all or one of {sorted(ROLE_FAMILIES)}")
        self.registry = registry
        self.role = role
        r = None  # built unregistered; _register_role adds the role's own
        self.stage_seconds = Histogram(
            "skurl_stage_seconds", "Wall seconds spent in a named stage of the loop",
            ["stage"], registry=r, buckets=_SLOW_BUCKETS)
        # collector
        self.collector_episodes_total = Counter(
            "collector_episodes_total", "Episodes collected (one per SKU batch per episode)",
            registry=r)
        self.collector_steps_per_second = Gauge(
            "collector_steps_per_second", "SKU-day transitions per second of the last collection",
            registry=r)
        self.collector_episode_duration_seconds = Histogram(
            "collector_episode_duration_seconds", "Wall seconds to collect one episode",
            registry=r, buckets=_SLOW_BUCKETS)
        self.collector_weight_sync_lag_seconds = Gauge(
            "collector_weight_sync_lag_seconds",
            "Seconds between the learner publishing a version and this collector holding it",
            registry=r)
        self.collector_buffer_size = Gauge(
            "collector_buffer_size", "Transitions held in the collector's buffer", registry=r)
        self.collector_shares_lost_total = Counter(
            "collector_shares_lost_total",
            "Collectors' shares an iteration trained without: they died and their SKUs were at "
            "most deploy.max_lost_share of it", registry=r)
        self.collector_reward_out_of_range_total = Counter(
            "collector_reward_out_of_range_total",
            "Collected SKU-day rewards outside their SKU's plausible range (the shard is refused)",
            registry=r)
        self.collector_lost_skus_total = Counter(
            "collector_lost_skus_total", "SKUs of the shares in collector_shares_lost_total",
            registry=r)
        self.process_restarts_total = Counter(
            "process_restarts_total",
            "Sim servers and collectors the decoupled launcher's supervisor restarted (they "
            "died, or stopped answering their health checks)", ["child"], registry=r)
        self.weights_rejected_total = Counter(
            "weights_rejected_total",
            "Weight sets refused (bad sha256 or header, not finite, another model key, or names/"
            "shapes/dtypes unlike the model); path = publish | subscribe | push", ["path"],
            registry=r)
        # learner
        self.learner_training_step_duration_seconds = Histogram(
            "learner_training_step_duration_seconds",
            "Wall seconds of one PPO update (all epochs of one iteration)",
            registry=r, buckets=_SLOW_BUCKETS)
        self.learner_gradient_norm = Gauge(
            "learner_gradient_norm", "Gradient norm before clipping, last minibatch", registry=r)
        self.learner_weight_version = Gauge(
            "learner_weight_version", "Policy version last published by the learner", registry=r)
        self.learner_gpu_memory_allocated_bytes = Gauge(
            "learner_gpu_memory_allocated_bytes",
            "Bytes allocated by torch on the learner's GPU (0 on CPU)", registry=r)
        self.learner_updates_total = Counter(
            "learner_updates_total", "PPO updates (iterations) done by the learner", registry=r)
        self.learner_policy_loss = Gauge(
            "learner_policy_loss", "Clipped surrogate loss of the last update (mean)", registry=r)
        self.learner_value_loss = Gauge(
            "learner_value_loss", "Value loss of the last update (mean)", registry=r)
        self.learner_entropy = Gauge(
            "learner_entropy", "Policy entropy of the last update (mean, nats)", registry=r)
        self.learner_approx_kl = Gauge(
            "learner_approx_kl", "Approximate KL(old || new) of the last update (mean)",
            registry=r)
        self.learner_clip_fraction = Gauge(
            "learner_clip_fraction", "Share of ratios outside the clip range, last update",
            registry=r)
        # simulator and sync
        self.sim_step_duration_seconds = Histogram(
            "sim_step_duration_seconds", "Wall seconds of one vectorized simulator day",
            registry=r, buckets=_FAST_BUCKETS)
        self.barrier_wait_seconds = Histogram(
            "barrier_wait_seconds", "Seconds a collector waited at the weight-sync barrier",
            registry=r, buckets=_SLOW_BUCKETS)
        # near-on-policy training (collect.staleness, collect/staleness.py)
        self.policy_lag_versions = Histogram(
            "policy_lag_versions", "Policy versions between the learner and the rollout it trains on",
            registry=r, buckets=(0, 1, 2, 3, 4, 5, 6, 8, 10, 16, 32))
        self.sample_freshness = Gauge(
            "sample_freshness", "Share of the transitions trained on so far that were collected at lag 0",
            registry=r)
        self.stale_shards_refused_total = Counter(
            "stale_shards_refused_total", "Rollout shards refused for lagging more than collect.staleness",
            registry=r)
        self.learner_idle_seconds_total = Counter(
            "learner_idle_seconds_total", "Seconds the learner waited for rollouts", registry=r)
        self.collector_idle_seconds_total = Counter(
            "collector_idle_seconds_total", "Seconds collectors waited for the learner", registry=r)
        self.collector_breaker_trips_total = Counter(
            "collector_breaker_trips_total",
            "Times the circuit breaker paused collectors: their lag passed collect.max_lag", registry=r)
        self.shard_queue_refused_total = Counter(
            "shard_queue_refused_total", "Shard-queue entries refused as malformed (acked, never trained)",
            registry=r)
        self.shard_queue_resets_total = Counter(
            "shard_queue_resets_total",
            "Times the shard queue's stream was gone after a Redis restart without persistence "
            "(the learner re-reads the store's manifests of the iterations it waits for)", registry=r)
        # DCL's labelling where the shards are (learn/labelling.py)
        self.dcl_collector_label_seconds = Histogram(
            "dcl_collector_label_seconds", "Seconds one collector spent on its part of a DCL labelling or check",
            registry=r, buckets=_SLOW_BUCKETS)
        self.dcl_rollout_sku_days_per_second = Gauge(
            "dcl_rollout_sku_days_per_second", "Rollout SKU-days simulated per second of the last DCL labelling",
            registry=r)
        self.dcl_rollout_row_days_per_second = Gauge(
            "dcl_rollout_row_days_per_second", "Clone row-days the simulator stepped per second of the last DCL "
            "labelling (a state's substitution group or network rides along)", registry=r)
        self.dcl_collector_idle_share = Gauge(
            "dcl_collector_idle_share", "Share of the last DCL labelling's wall time the average collector idled",
            registry=r)
        self.dcl_label_shards_total = Counter(
            "dcl_label_shards_total", "DCL label shards read from the rollout store, by outcome (stored: "
            "verified and used; refused: failed its checksum, labelled again)", ["outcome"], registry=r)
        # business results of a policy, per run (evaluation or the last collection)
        self.business_fill_rate = Gauge(
            "business_fill_rate", "Units sold / units demanded", BUSINESS_LABELS, registry=r)
        self.business_lost_units = Gauge(
            "business_lost_units", "Units of demand lost (0 under backorders)", BUSINESS_LABELS,
            registry=r)
        self.business_backordered_units = Gauge(
            "business_backordered_units", "Units of demand backordered (sim.backorders)",
            BUSINESS_LABELS, registry=r)
        self.business_waste_units = Gauge(
            "business_waste_units", "Units expired", BUSINESS_LABELS, registry=r)
        self.business_mean_on_hand = Gauge(
            "business_mean_on_hand", "Mean end-of-day on-hand units per SKU", BUSINESS_LABELS,
            registry=r)
        self.business_cost_per_sku_day = Gauge(
            "business_cost_per_sku_day", "Average cost per SKU-day", BUSINESS_LABELS, registry=r)
        self._register_role()

    def _register_role(self) -> None:
        names = (ROLE_FAMILIES[self.role] if self.role != "all" else
                 [n for n, v in vars(self).items() if isinstance(v, (Counter, Gauge, Histogram))])
        for name in names:
            self.registry.register(getattr(self, name))

    def record_update(self, stats: Mapping[str, float], version: int) -> None:
        """The learner's figures of one PPO update (Learner.update's stats keys)."""
        self.learner_updates_total.inc()
        self.learner_weight_version.set(version)
        pairs = (("policy_loss", self.learner_policy_loss), ("value_loss", self.learner_value_loss),
                 ("entropy", self.learner_entropy), ("approx_kl", self.learner_approx_kl),
                 ("clip_frac", self.learner_clip_fraction), ("grad_norm", self.learner_gradient_norm))
        for key, gauge in pairs:
            if key in stats:
                gauge.set(float(stats[key]))

    def record_business(self, run: str, policy: str, result: Mapping[str, Any]) -> None:
        """Set the business gauges of one policy from an eval result (report.PolicyResult keys).

        Missing or null keys are left untouched.
        """
        pairs = (
            ("fill_rate", self.business_fill_rate),
            ("lost_units", self.business_lost_units),
            ("backordered_units", self.business_backordered_units),
            ("waste_units", self.business_waste_units),
            ("mean_on_hand", self.business_mean_on_hand),
            ("avg_cost_per_sku_day", self.business_cost_per_sku_day),
        )
        for key, gauge in pairs:
            value = result.get(key)
            if value is not None:
                gauge.labels(run=run, policy=policy).set(float(value))

    def record_gpu_memory(self, device: torch.device | str | None = None) -> float:
        """Set learner_gpu_memory_allocated_bytes for `device` (0 on CPU); returns the value.

        Reads torch only if this process already imported it: a process without torch
        holds no GPU memory, and importing torch here would cost seconds.
        """
        allocated = 0.0
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            dev = torch.device(device) if device is not None else torch.device("cuda")
            if dev.type == "cuda":
                allocated = float(torch.cuda.memory_allocated(dev))
        self.learner_gpu_memory_allocated_bytes.set(allocated)
        return allocated


_SAMPLE_SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
                    "summary": ("", "_sum", "_count", "_created"), "info": ("_info",)}


def sample_names(registry: CollectorRegistry) -> set[str]:
    """Every sample name `registry` can export (a histogram's _bucket/_sum/_count, a
    counter's _total...), labelled families included before they hold a value: the names
    a PromQL query over this process may use."""
    return {family.name + suffix for family in registry.collect()
            for suffix in _SAMPLE_SUFFIXES.get(family.type, ("",))}


def role_sample_names(role: Role) -> set[str]:
    """sample_names of a process of `role` (its families plus process/platform/GC)."""
    return sample_names(SkurlMetrics(_default_registry(), role).registry)


def _default_registry() -> CollectorRegistry:
    """skurl's own registry (not prometheus_client's global one, so that tests and
    embedding applications can build several), with the process, platform and GC
    collectors that a /metrics endpoint is expected to show."""
    registry = CollectorRegistry()
    for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        registry.register(collector)
    return registry


_lock = threading.Lock()
_current = SkurlMetrics(_default_registry())


def get_metrics() -> SkurlMetrics:
    """The metrics every part of skurl records into (swap with `use_registry` in tests)."""
    return _current


@contextmanager
def use_registry(registry: CollectorRegistry, role: Role = "all") -> Iterator[SkurlMetrics]:
    """Temporarily record all metrics into a fresh SkurlMetrics built on `registry`."""
    global _current
    with _lock:
        previous, _current = _current, SkurlMetrics(registry, role)
    try:
        yield _current
    finally:
        with _lock:
            _current = previous


def process_role(role: Role) -> AbstractContextManager[SkurlMetrics]:
    """While open, this process records into (and /metrics serves) a fresh default
    registry with `role`'s families only; enter it before serve_metrics."""
    return use_registry(_default_registry(), role)


R = TypeVar("R")


def as_role(role: Role, command: Callable[..., R]) -> Callable[..., R]:
    """`command` (a CLI handler) run inside process_role(role)."""

    def run(*args: Any, **kwargs: Any) -> R:
        with process_role(role):
            return command(*args, **kwargs)

    run.__doc__ = command.__doc__
    return run


@dataclass
class MetricsServer:
    """A running /metrics HTTP endpoint; `close()` stops it (also as a context manager)."""

    addr: str
    port: int
    _httpd: WSGIServer
    _thread: threading.Thread

    @property
    def url(self) -> str:
        host = f"[{self.addr}]" if ":" in self.addr else self.addr
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        if self._thread.is_alive():
            self._httpd.shutdown()
            self._httpd.server_close()
            self._thread.join(timeout=5)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve_metrics(
    port: int, addr: str = "127.0.0.1", registry: CollectorRegistry | None = None
) -> MetricsServer:
    """Start the /metrics endpoint in a daemon thread; port 0 picks a free port (see .port).

    Serves `registry` or, by default, the registry of `get_metrics()` at call time.
    Binds loopback by default: exposing metrics beyond the host is a deliberate choice.
    """
    if not 0 <= port <= 65535:
        raise UserError(f"metrics port: got {port}, expected an integer in 0..65535")
    reg = registry if registry is not None else get_metrics().registry
    try:
        httpd, thread = start_http_server(port, addr=addr, registry=reg)
    except OSError as exc:
        raise UserError(
            f"metrics port: cannot listen on {addr}:{port} ({exc.strerror or exc}); "
            "expected a free port (0 picks one)"
        ) from exc
    return MetricsServer(addr=addr, port=int(httpd.server_port), _httpd=httpd, _thread=thread)
