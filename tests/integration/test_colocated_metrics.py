"""Issue 42, defect 12: `skurl train --metrics-port` (colocated) exposes the collector_*,
business_* and learner_training_step_duration_seconds families, and records them."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from skurl.config import load_config
from skurl.modes import colocated
from skurl.telemetry.metrics import role_sample_names, use_registry
from skurl.train import run as training

TINY = ["catalog.skus=24", "sim.days=4", "policy.hidden=[8,8]", "ppo.epochs=1", "ppo.minibatch=64",
        "train.iterations=2", "train.eval_every=1", "eval.days=3", "eval.warmup=1", "sim.threads=1",
        "train.torch_threads=1"]


def test_the_colocated_role_exports_and_records_collector_business_and_learner_families(tmp_path: Path) -> None:
    names = role_sample_names("colocated")
    for name in ("collector_episodes_total", "collector_steps_per_second", "collector_buffer_size",
                 "collector_episode_duration_seconds_count", "business_fill_rate",
                 "learner_training_step_duration_seconds_count"):
        assert name in names, name
    with use_registry(CollectorRegistry(), "colocated") as m:
        training.start(colocated.mode, load_config(None, TINY), tmp_path / "run", baseline=False)
        text = generate_latest(m.registry).decode()
    assert m.collector_episodes_total._value.get() == 2
    assert 'business_fill_rate{policy="collect",run="run"}' in text
    assert 'business_fill_rate{policy="ppo",run="run"}' in text  # the evaluated trained policy
    assert "learner_training_step_duration_seconds_count 2.0" in text
