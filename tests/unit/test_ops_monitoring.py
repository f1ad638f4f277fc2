"""deploy/prometheus and deploy/grafana checked by the real tools and against the metrics
skurl's processes export: `promtool check config`, `promtool check rules`, `promtool test
rules` (each alert fires on the series that should trip it), every dashboard query parsed
by promtool and naming only metrics some role exports (the role its job label names)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from skurl.telemetry.metrics import ROLE_FAMILIES, role_sample_names

ROOT = Path(__file__).resolve().parents[2]
PROM = ROOT / "deploy" / "prometheus"
DASHBOARD = ROOT / "deploy" / "grafana" / "skurl.json"
JOB_ROLES = {"skurl-learner": "learner", "skurl-sim": "sim", "skurl-collector": "collector"}
# Names the rules may use that no skurl process exports (yet): Prometheus' own, the Redis
# exporter's, and near-on-policy training's (issue 24), whose rules must say "pending".
PROMETHEUS_OWN = {"up"}
REDIS_EXPORTER = {"redis_memory_used_bytes", "redis_memory_max_bytes"}
PENDING: set[str] = set()  # names rules use before any process exports them (issue 24's are exported now)
_NOT_NAMES = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and",
              "or", "unless", "offset", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (its syntax is promtool's to check):
    identifiers outside strings, label matchers, ranges and grouping lists, not called."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for m in re.finditer(r"(?<![\w.])[A-Za-z_:][\w:]*", text):
        if m.group() not in _NOT_NAMES and not text[m.end():].lstrip().startswith("("):
            names.add(m.group())
    return names


def test_metric_names_reads_selectors_only() -> None:
    expr = ('histogram_quantile(0.9, sum by (le, stage) (rate(skurl_stage_seconds_bucket'
            '{job="skurl-learner", stage=~"learn|sync"}[5m] offset 1m))) / on (instance) '
            'group_left up > bool 1e3 or absent(learner_updates_total)')
    assert metric_names(expr) == {"skurl_stage_seconds_bucket", "up", "learner_updates_total"}


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool is not installed (Debian package prometheus; .ci/run installs it)")
    return found


def _run(promtool: str, *args: str, cwd: Path = PROM) -> str:
    done = subprocess.run([promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_promtool_checks_the_scrape_config(promtool: str) -> None:
    out = _run(promtool, "check", "config", "prometheus.yml")
    assert "SUCCESS" in out and "1 rule files found" in out


def test_promtool_checks_the_rules(promtool: str) -> None:
    assert "SUCCESS" in _run(promtool, "check", "rules", "rules.yml")


def test_each_alert_fires_on_the_series_that_should_trip_it(promtool: str) -> None:
    assert "SUCCESS" in _run(promtool, "test", "rules", "rules_test.yml")
    tested = set(re.findall(r"alertname: (\w+)", (PROM / "rules_test.yml").read_text()))
    assert tested == {rule["alert"] for rule in _rules()}


def test_the_scrape_config_has_a_job_per_role() -> None:
    jobs = {job["job_name"] for job in yaml.safe_load((PROM / "prometheus.yml").read_text())["scrape_configs"]}
    assert set(JOB_ROLES) <= jobs and "skurl-redis" in jobs


def _rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load((PROM / "rules.yml").read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def _exported(role: str | None = None) -> set[str]:
    roles = [role] if role else list(ROLE_FAMILIES)
    return set().union(*(role_sample_names(r) for r in roles))  # type: ignore[arg-type]


def test_the_rules_name_exported_metrics_or_say_they_are_pending() -> None:
    exported = _exported()
    for rule in _rules():
        names = metric_names(rule["expr"])
        unknown = names - exported - PROMETHEUS_OWN - REDIS_EXPORTER - PENDING
        assert not unknown, f"{rule['alert']}: no process exports {sorted(unknown)}"
        if names & PENDING:
            assert "pending" in rule["annotations"]["description"], rule["alert"]
    assert PENDING.isdisjoint(exported), "now exported: drop them from PENDING and the notes"


def _panels() -> list[dict[str, Any]]:
    dash = json.loads(DASHBOARD.read_text())
    return [p for p in dash["panels"] if p["type"] != "row"]


def test_the_dashboard_has_a_panel_row_per_metric_family() -> None:
    rows = {p["title"] for p in json.loads(DASHBOARD.read_text())["panels"] if p["type"] == "row"}
    assert {"Throughput", "Stage times", "Weight lag", "Barrier wait", "Learner",
            "Business KPIs"} <= rows
    learner = " ".join(t["expr"] for p in _panels() for t in p["targets"])
    for name in ("learner_policy_loss", "learner_approx_kl", "learner_entropy"):
        assert name in learner


def test_every_dashboard_query_parses_with_promtool(promtool: str, tmp_path: Path) -> None:
    exprs = [t["expr"] for p in _panels() for t in p["targets"]]
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query_{i}", "expr": e} for i, e in enumerate(exprs)]}]}
    (tmp_path / "dashboard.yml").write_text(yaml.safe_dump(rules))
    assert f"{len(exprs)} rules found" in _run(promtool, "check", "rules", "dashboard.yml", cwd=tmp_path)


def test_every_dashboard_query_names_metrics_the_processes_export() -> None:
    everything = _exported()
    for panel in _panels():
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            expr = target["expr"]
            job = re.search(r'job="([^"]+)"', expr)
            exported = _exported(JOB_ROLES[job.group(1)]) if job else everything
            missing = metric_names(expr) - exported
            assert metric_names(expr) and not missing, f"{panel['title']}: {expr}: {sorted(missing)}"
