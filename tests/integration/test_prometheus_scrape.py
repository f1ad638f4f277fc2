"""A real Prometheus server (/usr/bin/prometheus, Debian package prometheus) on loopback
scrapes a short `--mode decoupled` training (sim server and collectors as real `skurl`
processes on deploy.metrics_base_port's ports, the learner here in its role) with
deploy/prometheus/rules.yml loaded; its HTTP API then answers for the training metrics,
every process's own families only, every dashboard query, rules that evaluate, and the
down alerts once the run's processes are gone."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from skurl.config import load_config
from skurl.modes.decoupled import wiring as decoupled
from skurl.telemetry.metrics import process_role
from skurl.train import run as training

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "rules.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "skurl.json"
ITERATIONS = 3
SIMS, COLLECTORS = 1, 1
WAIT_S = 120.0  # generous: reached only when something is broken

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _free_run(count: int) -> int:
    """A base port with `count` free ports from it (the metrics_base_port layout)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + count > 65535:
            continue
        try:
            held = []
            for port in range(base, base + count):
                sock = socket.socket()
                held.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in held:
                sock.close()
    raise RuntimeError("no run of free loopback ports")


class Prometheus:
    """A prometheus process scraping the given jobs every second; `query` its HTTP API."""

    def __init__(self, workdir: Path, jobs: dict[str, list[str]]) -> None:
        binary = shutil.which("prometheus") or "/usr/bin/prometheus"
        config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                  "rule_files": [str(RULES)],
                  "scrape_configs": [{"job_name": job, "static_configs": [{"targets": targets}]}
                                     for job, targets in jobs.items()]}
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.port = _free_run(1)
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = (workdir / "prometheus.log").open("wb")
        self.proc = subprocess.Popen(
            [binary, f"--config.file={workdir / 'prometheus.yml'}",
             f"--storage.tsdb.path={workdir / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.wait(lambda: self.get("/-/ready", raw=True) is not None, "prometheus ready")

    def get(self, path: str, raw: bool = False) -> Any:
        try:
            with urllib.request.urlopen(self.url + path, timeout=10) as reply:
                body = reply.read().decode()
        except OSError:
            return None
        return body if raw else json.loads(body)

    def query(self, expr: str) -> list[dict[str, Any]]:
        reply = self.get("/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        assert reply is not None and reply["status"] == "success", (expr, reply)
        return reply["data"]["result"]

    def value(self, expr: str) -> float | None:
        result = self.query(expr)
        return float(result[0]["value"][1]) if result else None

    def rules(self) -> list[dict[str, Any]]:
        return [r for g in self.get("/api/v1/rules")["data"]["groups"] for r in g["rules"]]

    def wait(self, ready: Any, what: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while not ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{what}: not within {WAIT_S:g} s (see {self.log.name})")
            time.sleep(0.25)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self.log.close()


@pytest.fixture(scope="module")
def prometheus_binary() -> str:
    found = shutil.which("prometheus") or (Path("/usr/bin/prometheus").is_file() and "/usr/bin/prometheus")
    if not found:
        pytest.skip("prometheus is not installed (Debian package prometheus; .ci/run installs it)")
    return str(found)


@pytest.fixture(scope="module")
def scraped_run(tmp_path_factory: pytest.TempPathFactory, prometheus_binary: str) -> Iterator[Prometheus]:
    tmp_path = tmp_path_factory.mktemp("prometheus")
    base = _free_run(1 + SIMS + COLLECTORS)
    jobs = {"skurl-learner": [f"127.0.0.1:{base}"],
            "skurl-sim": [f"127.0.0.1:{base + 1 + i}" for i in range(SIMS)],
            "skurl-collector": [f"127.0.0.1:{base + 1 + SIMS + j}" for j in range(COLLECTORS)]}
    prom = Prometheus(tmp_path, jobs)

    class WaitForScrapes:
        """Around the run's weights: each iteration's publish (after its update) returns
        once Prometheus has scraped its figures from every process, so the assertions below
        do not depend on timing."""

        def __init__(self, inner: Any, run: Any) -> None:
            self.inner, self.run = inner, run

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

        def publish(self, version: int, tensors: Any) -> Any:
            out = self.inner.publish(version, tensors)
            done = self.run.learner.iteration
            prom.wait(lambda: (prom.value('learner_updates_total{job="skurl-learner"}') or 0) >= done
                      and len(prom.query(f'collector_episodes_total >= {done}')) == COLLECTORS,
                      f"iteration {done} scraped")
            return out

    def waiting(collectors: Any, run: Any) -> Any:
        run.weights = WaitForScrapes(run.weights, run)
        return collectors

    cfg = load_config(None, [
        "catalog.skus=120", "sim.days=6", "policy.hidden=[16,16]", "ppo.epochs=1",
        "ppo.minibatch=256", f"train.iterations={ITERATIONS}", "train.eval_every=0", "eval.days=3",
        "eval.warmup=1", "train.torch_threads=1", "sim.threads=1", "collect.infer_dtype=float32",
        f"deploy.sim_servers={SIMS}", f"deploy.collectors={COLLECTORS}", "sync.backend=grpc",
        "sync.timeout_s=60", f"deploy.metrics_base_port={base}"])
    try:
        with process_role("learner"):  # as `skurl train --mode decoupled` runs it
            result = training.start(decoupled.launched, cfg, tmp_path / "run", baseline=False, wrap=waiting)
        assert result.iterations == ITERATIONS
        yield prom
    finally:
        prom.stop()


def test_prometheus_scrapes_every_role_and_answers_queries(scraped_run: Prometheus) -> None:
    prom = scraped_run
    # the processes have exited: read the last scraped values over the run's window
    assert prom.value('max_over_time(learner_updates_total{job="skurl-learner"}[30m])') == ITERATIONS
    assert prom.value('max_over_time(learner_weight_version{job="skurl-learner"}[30m])') == ITERATIONS
    assert prom.value('max_over_time(learner_entropy{job="skurl-learner"}[30m])') > 0
    episodes = prom.query('max_over_time(collector_episodes_total{job="skurl-collector"}[30m])')
    assert sorted(float(r["value"][1]) for r in episodes) == [ITERATIONS] * COLLECTORS
    assert prom.value('max_over_time(sim_step_duration_seconds_count{job="skurl-sim"}[30m])') >= 6
    ups = prom.query("max_over_time(up[30m])")
    assert len(ups) == 1 + SIMS + COLLECTORS and all(r["value"][1] == "1" for r in ups)
    # each process exports only its own families
    for job, foreign in (("skurl-sim", "collector_.*|learner_.*|business_.*|skurl_stage.*"),
                         ("skurl-collector", "learner_.*|sim_.*"),
                         ("skurl-learner", "sim_.*|collector_steps.*|collector_episode.*")):
        assert prom.query(f'count by (__name__) ({{job="{job}", __name__=~"{foreign}"}})') == [], job


def test_the_dashboard_queries_and_the_rules_run_on_the_scraped_data(scraped_run: Prometheus) -> None:
    prom = scraped_run
    panels = [p for p in json.loads(DASHBOARD.read_text())["panels"] if p["type"] != "row"]
    for panel in panels:
        for target in panel["targets"]:
            prom.query(target["expr"])  # the server parses and evaluates it
    prom.wait(lambda: all(r.get("lastEvaluation", "").startswith("2") and r["health"] == "ok"
                          for r in prom.rules()), "every rule evaluated")
    expected = sum(len(g["rules"]) for g in yaml.safe_load(RULES.read_text())["groups"])
    assert len(prom.rules()) == expected >= 9  # every rule of rules.yml was loaded
    # the run is over, its processes gone: the down alerts are on their way (for: 2m)
    prom.wait(lambda: {"SkurlCollectorDown", "SkurlSimServerDown"} <= {
        a["labels"]["alertname"] for a in prom.get("/api/v1/alerts")["data"]["alerts"]
        if a["state"] in ("pending", "firing")}, "down alerts pending")
