"""Each kind of process exports only its own metric families (ROLE_FAMILIES), not zeros
for work it never does; role "all" keeps every family for libraries and tests."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from skurl.telemetry.metrics import (
    ROLE_FAMILIES,
    SkurlMetrics,
    as_role,
    get_metrics,
    role_sample_names,
    sample_names,
)


def _skurl_names(role: str) -> set[str]:
    return {n for n in role_sample_names(role)  # type: ignore[arg-type]
            if not n.startswith(("process_", "python_"))}


def test_a_sim_server_exports_its_step_histogram_and_nothing_of_the_loop() -> None:
    assert _skurl_names("sim") == {"sim_step_duration_seconds_bucket", "sim_step_duration_seconds_sum",
                                   "sim_step_duration_seconds_count", "sim_step_duration_seconds_created"}


def test_collectors_and_learners_export_their_own_families() -> None:
    collector, learner, colocated = _skurl_names("collector"), _skurl_names("learner"), _skurl_names("colocated")
    assert "collector_episodes_total" in collector and "collector_weight_sync_lag_seconds" in collector
    assert not any(n.startswith(("learner_", "sim_")) for n in collector)
    assert "learner_approx_kl" in learner and "collector_shares_lost_total" in learner
    assert not any(n.startswith(("sim_", "collector_steps", "collector_episode")) for n in learner)
    assert "learner_entropy" in colocated and "skurl_stage_seconds_bucket" in colocated
    # learner and in-process collector in one process: the collector's episode figures and
    # business totals, the learner's step time (issue 42, defect 12); no sim server, no sync lag
    assert not any(n.startswith(("sim_", "collector_weight_sync", "collector_shares")) for n in colocated)
    for name in ("collector_reward_out_of_range_total", "collector_episodes_total", "business_fill_rate",
                 "learner_training_step_duration_seconds_count"):
        assert name in colocated, name
    assert "process_resident_memory_bytes" in role_sample_names("sim")  # every process: its own


def test_every_family_belongs_to_some_role_and_all_exports_all() -> None:
    everything = _skurl_names("all")
    assert everything == set().union(*(_skurl_names(r) for r in ROLE_FAMILIES))


def test_recording_outside_the_role_is_harmless_and_not_exported() -> None:
    m = SkurlMetrics(CollectorRegistry(), "sim")
    m.collector_episodes_total.inc()
    m.record_update({"approx_kl": 0.01, "entropy": 2.0}, version=3)
    m.sim_step_duration_seconds.observe(0.002)
    assert m.registry.get_sample_value("sim_step_duration_seconds_count") == 1
    assert m.registry.get_sample_value("collector_episodes_total") is None
    assert "learner_approx_kl" not in sample_names(m.registry)


def test_record_update_sets_the_learner_figures() -> None:
    m = SkurlMetrics(CollectorRegistry(), "learner")
    m.record_update({"policy_loss": -0.1, "value_loss": 2.5, "entropy": 1.5, "approx_kl": 0.02,
                     "clip_frac": 0.1, "grad_norm": 0.4}, version=7)
    got = {n: m.registry.get_sample_value(n) for n in (
        "learner_updates_total", "learner_weight_version", "learner_policy_loss", "learner_value_loss",
        "learner_entropy", "learner_approx_kl", "learner_clip_fraction", "learner_gradient_norm")}
    assert got == {"learner_updates_total": 1, "learner_weight_version": 7, "learner_policy_loss": -0.1,
                   "learner_value_loss": 2.5, "learner_entropy": 1.5, "learner_approx_kl": 0.02,
                   "learner_clip_fraction": 0.1, "learner_gradient_norm": 0.4}


def test_a_command_runs_in_its_role_and_restores_the_previous_one() -> None:
    before = get_metrics()
    seen = as_role("collector", lambda: get_metrics())()
    assert seen.role == "collector" and seen is not before
    assert get_metrics() is before


def test_an_unknown_role_is_refused() -> None:
    with pytest.raises(ValueError, match="metrics role"):
        SkurlMetrics(CollectorRegistry(), "trainer")  # type: ignore[arg-type]


@pytest.mark.parametrize(("argv", "role"), [
    (["serve-sim"], "sim"), (["collector"], "collector"), (["learner"], "learner"),
    (["train"], "colocated"), (["train", "--mode", "decoupled"], "learner"),
    (["train", "--mode", "ray"], "learner"),
])
def test_each_command_picks_its_role(argv: list[str], role: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI handlers run inside their role (each body replaced by a probe of the role
    before the parser wraps it)."""
    import skurl.commands.roles_cmd as roles_cmd
    import skurl.commands.serve_cmd as serve_cmd
    import skurl.commands.train_cmd as train_cmd
    from skurl.cli import build_parser

    def probe(args: object) -> str:
        return get_metrics().role

    for module, name in ((train_cmd, "run"), (serve_cmd, "_serve"), (roles_cmd, "_collector"),
                         (roles_cmd, "_learner")):
        monkeypatch.setattr(module, name, probe)
    args = build_parser().parse_args(argv)
    assert args.func(args) == role
