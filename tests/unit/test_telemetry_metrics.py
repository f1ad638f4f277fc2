"""Prometheus metrics: recording into a swapped registry, /metrics scraped over loopback."""

from __future__ import annotations

import socket
import urllib.request

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from skurl.errors import UserError
from skurl.telemetry.metrics import get_metrics, serve_metrics, use_registry
from skurl.telemetry.stages import StageTimer

REQUIRED = (
    "collector_episodes", "collector_steps_per_second", "collector_episode_duration_seconds",
    "collector_weight_sync_lag_seconds", "collector_buffer_size",
    "learner_training_step_duration_seconds", "learner_gradient_norm",
    "learner_weight_version", "learner_gpu_memory_allocated_bytes",
    "sim_step_duration_seconds", "barrier_wait_seconds", "business_fill_rate",
    "business_lost_units", "business_waste_units", "business_mean_on_hand",
    "skurl_stage_seconds",
)


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _scrape(url: str) -> tuple[set[str], Samples]:
    """(metric family names, {(sample name, sorted labels): value}) of a /metrics page."""
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    families = list(text_string_to_metric_families(text))
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in families for s in fam.samples}
    return {fam.name for fam in families}, samples


def test_use_registry_swaps_and_restores() -> None:
    before = get_metrics()
    registry = CollectorRegistry()
    with use_registry(registry) as m:
        assert get_metrics() is m and m.registry is registry
        m.collector_episodes_total.inc(3)
        assert registry.get_sample_value("collector_episodes_total") == 3
    assert get_metrics() is before


def test_scrape_endpoint_over_loopback() -> None:
    with use_registry(CollectorRegistry()) as m:
        m.collector_episodes_total.inc(2)
        m.collector_steps_per_second.set(12345.5)
        m.learner_weight_version.set(7)
        m.sim_step_duration_seconds.observe(0.003)
        m.record_business("run1", "ppo", {"fill_rate": 0.97, "lost_units": 1.5,
                                          "waste_units": None, "mean_on_hand": 8.0})
        timer = StageTimer()  # records into get_metrics(), i.e. m
        with timer.stage("simulate"):
            pass
        with serve_metrics(0) as server:
            assert server.port > 0 and server.url.endswith(f":{server.port}/metrics")
            families, samples = _scrape(server.url)
    assert set(REQUIRED) <= families
    assert samples[("collector_episodes_total", ())] == 2
    assert samples[("collector_steps_per_second", ())] == 12345.5
    assert samples[("learner_weight_version", ())] == 7
    assert samples[("sim_step_duration_seconds_count", ())] == 1
    assert samples[("business_fill_rate", (("policy", "ppo"), ("run", "run1")))] == 0.97
    assert samples[("business_lost_units", (("policy", "ppo"), ("run", "run1")))] == 1.5
    assert ("business_waste_units", (("policy", "ppo"), ("run", "run1"))) not in samples
    assert samples[("skurl_stage_seconds_count", (("stage", "simulate"),))] == 1


def test_default_registry_has_process_metrics() -> None:
    with serve_metrics(0) as server:
        families, _ = _scrape(server.url)
    assert "python_info" in families and "skurl_stage_seconds" in families


def test_gpu_memory_is_zero_without_cuda() -> None:
    with use_registry(CollectorRegistry()) as m:
        value = m.record_gpu_memory("cpu")
        assert value == 0.0
        assert m.registry.get_sample_value("learner_gpu_memory_allocated_bytes") == 0.0


def test_port_in_use_is_a_user_error() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(UserError, match=rf"metrics port.*{port}"):
            serve_metrics(port)


def test_bad_port_is_a_user_error() -> None:
    with pytest.raises(UserError, match=r"0\.\.65535"):
        serve_metrics(70000)


def test_close_stops_serving() -> None:
    server = serve_metrics(0, registry=CollectorRegistry())
    url = server.url
    server.close()
    server.close()  # idempotent
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=2)
