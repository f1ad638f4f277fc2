"""deploy/: the Dockerfiles and Kubernetes manifests, checked without Docker or a cluster.

Manifests are parsed (yaml.safe_load_all); every `skurl ...` command line must parse with
the real CLI parser, the learner's torchrun line with torchrun's and skurl.deploy.ddp_learner's parsers;
images come from the Dockerfiles; ports agree between containers, Services, arguments and
the shared config (which must load); selectors and HPA targets point at real objects.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml

from skurl.cli import build_parser
from skurl.config import Config, load_config
from skurl.deploy.ddp_learner import ENTRY
from skurl.deploy.ddp_learner import build_parser as learner_parser

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
CONFIG_MOUNT = "/etc/skurl"
# Values Kubernetes substitutes for $(VAR) at run time, to parse the command lines here.
POD_ENV = {"POD_INDEX": "1"}
IMAGES = {"skurl-cpu": "Dockerfile.cpu", "skurl-learner": "Dockerfile.learner"}


def objects() -> list[dict[str, Any]]:
    docs = []
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def find(kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [d for d in objects() if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    return workload["spec"]["template"]["spec"]


def containers() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(w, c) for kind in ("Deployment", "StatefulSet", "Job") for w in find(kind)
            for c in pod_spec(w)["containers"]]


def expand(args: list[str]) -> list[str]:
    return [re.sub(r"\$\((\w+)\)", lambda m: POD_ENV[m.group(1)], str(a)) for a in args]


def shared_config(tmp_path: Path) -> Config:
    (cm,) = find("ConfigMap", "skurl-config")
    path = tmp_path / "config.yaml"
    path.write_text(cm["data"]["config.yaml"])
    return load_config(path)


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_every_object_is_well_formed_and_the_roles_are_there() -> None:
    docs = objects()
    assert all({"apiVersion", "kind", "metadata"} <= d.keys() for d in docs)
    names = [(d["kind"], d["metadata"]["name"]) for d in docs]
    assert len(names) == len(set(names)), "duplicate objects"
    sims = [d for d in find("Deployment") if d["metadata"]["name"].startswith("skurl-sim-")]
    assert len(sims) >= 2
    assert {h["spec"]["scaleTargetRef"]["name"] for h in find("HorizontalPodAutoscaler")} == \
        {d["metadata"]["name"] for d in sims}
    for hpa in find("HorizontalPodAutoscaler"):
        assert hpa["spec"]["scaleTargetRef"]["kind"] == "Deployment"
        assert 1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
    assert find("StatefulSet", "skurl-collector") and find("Job", "skurl-learner")
    assert find("Deployment", "skurl-redis") and find("Service", "skurl-redis")


def test_selectors_match_their_pods() -> None:
    workloads = find("Deployment") + find("StatefulSet")
    for w in workloads:
        labels = w["spec"]["template"]["metadata"]["labels"]
        assert w["spec"]["selector"]["matchLabels"].items() <= labels.items(), w["metadata"]["name"]
    for svc in find("Service"):
        matched = [w for w in workloads
                   if svc["spec"]["selector"].items() <= w["spec"]["template"]["metadata"]["labels"].items()]
        assert len(matched) == 1, svc["metadata"]["name"]
        ports = {p["name"]: p["containerPort"] for c in pod_spec(matched[0])["containers"] for p in c["ports"]}
        for p in svc["spec"]["ports"]:
            assert p["targetPort"] in ports, (svc["metadata"]["name"], p)
    for sts in find("StatefulSet"):
        assert find("Service", sts["spec"]["serviceName"])[0]["spec"]["clusterIP"] == "None"


def test_images_are_built_by_the_dockerfiles() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    for _, c in containers():
        name, _, tag = c["image"].partition(":")
        if name == "redis":  # the one third-party image: a pinned release, never latest
            assert re.fullmatch(r"\d+\.\d+[\w.-]*", tag), c["image"]
            continue
        assert name in IMAGES and tag == version, c["image"]
        assert f"-t {c['image']} ." in (DEPLOY / "docker" / IMAGES[name]).read_text()  # its build line


def test_skurl_command_lines_parse_with_the_cli(tmp_path: Path) -> None:
    parser = build_parser()
    checked = 0
    for w, c in containers():
        if not c["image"].startswith("skurl-cpu"):
            continue
        args = expand(c.get("command", [])[1:] + c["args"]) if c.get("command") else expand(c["args"])
        parsed = parser.parse_args(args)  # a UserError (one line) when a flag does not exist
        assert parsed.config == f"{CONFIG_MOUNT}/config.yaml", w["metadata"]["name"]
        mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        volume = next(v for v in pod_spec(w)["volumes"] if v["name"] == mounts[CONFIG_MOUNT])
        assert volume["configMap"]["name"] == "skurl-config"
        checked += 1
    assert checked >= 3  # two simulator shards and the collectors
    shared_config(tmp_path)


def test_learner_job_is_torchrun_of_the_ddp_learner(tmp_path: Path) -> None:
    from torch.distributed.run import get_args_parser

    (job,) = find("Job", "skurl-learner")
    (c,) = pod_spec(job)["containers"]
    assert c["command"] == ["torchrun"]
    run = get_args_parser().parse_args(expand(c["args"]))
    assert run.module and run.training_script == ENTRY
    learner = learner_parser().parse_args(run.training_script_args)
    assert learner.config == f"{CONFIG_MOUNT}/config.yaml"
    gpus = c["resources"]["limits"]["nvidia.com/gpu"]
    assert int(run.nproc_per_node) == gpus  # one NCCL rank per GPU
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert any(learner.run_dir.startswith(m + "/") for m in mounts)  # checkpoints survive restarts
    assert job["spec"]["template"]["spec"]["restartPolicy"] in ("OnFailure", "Never")


def test_ports_and_addresses_agree_with_the_config(tmp_path: Path) -> None:
    cfg = shared_config(tmp_path)
    defaults = load_config(None)
    services = {s["metadata"]["name"]: {p["name"]: p["port"] for p in s["spec"]["ports"]} for s in find("Service")}
    sims = sorted((d for d in find("Deployment") if d["metadata"]["name"].startswith("skurl-sim-")),
                  key=lambda d: d["metadata"]["name"])
    assert cfg.deploy.sim_servers == len(sims) and len(cfg.deploy.sim_addresses) == len(sims)
    for i, (d, address) in enumerate(zip(sims, cfg.deploy.sim_addresses, strict=True)):
        (c,) = pod_spec(d)["containers"]
        assert flag(c["args"], "--shard") == f"{i}/{len(sims)}"
        port = int(flag(c["args"], "--port"))
        assert port == defaults.deploy.base_port  # one shard per pod: every pod on the default port
        assert {p["name"]: p["containerPort"] for p in c["ports"]}["grpc"] == port
        host, svc_port = address.rsplit(":", 1)
        assert host == d["metadata"]["name"] and services[host]["grpc"] == int(svc_port) == port
    (sts,) = find("StatefulSet", "skurl-collector")
    (c,) = pod_spec(sts)["containers"]
    replicas, port = sts["spec"]["replicas"], int(flag(c["args"], "--port"))
    assert flag(c["args"], "--index").endswith(f"/{replicas}") and cfg.deploy.collectors == replicas
    assert cfg.deploy.collector_addresses == tuple(
        f"{sts['metadata']['name']}-{k}.{sts['spec']['serviceName']}:{port}" for k in range(replicas))
    assert services[sts["spec"]["serviceName"]]["grpc"] == port
    redis = urlparse(cfg.sync.redis_url)
    assert cfg.sync.backend == "redis" and redis.hostname == "skurl-redis"
    assert redis.port == urlparse(defaults.sync.redis_url).port == services["skurl-redis"]["redis"]
    for _, c in containers():
        if "--metrics-port" in c["args"]:
            metrics = int(flag(c["args"], "--metrics-port"))
            assert {p["name"]: p["containerPort"] for p in c["ports"]}["metrics"] == metrics


@pytest.mark.parametrize("name", sorted(IMAGES.values()))
def test_dockerfiles_install_the_package_with_the_constraints(name: str) -> None:
    text = (DEPLOY / "docker" / name).read_text()
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert lines[0].startswith("FROM ")
    base = lines[0].split()[1]
    assert ("cuda" in base) == (name == "Dockerfile.learner"), base
    assert "COPY pyproject.toml constraints.txt" in text and "COPY src ./src" in text
    extras = re.findall(r"'\.\[([a-z0-9_,]+)\]'", text)
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras and all(e in declared for group in extras for e in group.split(","))
    assert re.search(r"pip install -c constraints\.txt", text)
    assert any(line.startswith("USER ") and "root" not in line for line in lines)
    entry = next(line for line in lines if line.startswith("ENTRYPOINT"))
    assert ("skurl" in entry) == (name == "Dockerfile.cpu") and ("torchrun" in entry) == (name != "Dockerfile.cpu")


def test_cpu_image_exposes_the_ports_the_manifests_use() -> None:
    text = (DEPLOY / "docker" / "Dockerfile.cpu").read_text()
    exposed = {int(p) for line in text.splitlines() if line.startswith("EXPOSE") for p in line.split()[1:]}
    used = {p["containerPort"] for _, c in containers() if c["image"].startswith("skurl-cpu") for p in c["ports"]}
    assert used <= exposed
    cmd = next(line for line in text.splitlines() if line.startswith("CMD"))
    import json

    assert build_parser().parse_args(json.loads(cmd[len("CMD"):])).command == "serve-sim"


def test_grpc_servers_are_probed_with_grpc_health_on_their_own_port() -> None:
    """Kubernetes' grpc probes call grpc.health.v1 (which every skurl server serves) on a
    port number (named ports are not accepted there): it must be the container's grpc port."""
    served = [c for _, c in containers() if c["args"][0] in ("serve-sim", "collector")]
    assert served
    for c in served:
        port = {p["name"]: p["containerPort"] for p in c["ports"]}["grpc"]
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert c[kind]["grpc"] == {"port": port}, (c["name"], kind)
