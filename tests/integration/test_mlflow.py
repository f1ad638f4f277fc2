"""MLflow tracking and the registry gate against a real `mlflow server` (sqlite backend,
started here on a free loopback port) and against MLflow's file store.

Training runs are tiny (40 SKUs, 2 iterations); the registry's ONNX file is a stand-in
built with the onnx package until skurl.serve.export lands (one test uses the real one and
skips only while that module is missing)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import _http_ok, free_port, wait_until
from skurl.cli import build_parser, main

mlflow = pytest.importorskip("mlflow", reason="MLflow tests need mlflow: pip install -e '.[dev]'")
onnx = pytest.importorskip("onnx", reason="registry tests need onnx: pip install -e '.[dev]'")

pytestmark = pytest.mark.slow
# A uniform lost-sales catalog small enough that a run trains in seconds.
TINY = ["catalog.kind=uniform", "catalog.skus=40", "sim.days=10", "sim.reward=cost", "sim.substitution=false",
        "policy.actions.kind=units", "policy.actions.n=10", "policy.hidden=[16,16]", "ppo.epochs=2",
        "ppo.minibatch=128", "train.eval_every=2", "train.torch_threads=1", "eval.days=8", "eval.warmup=2",
        "eval.skus=20", "train.warm_start=none", "train.keep_best=false"]


def sets(items: list[str]) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """http:// URI of an `mlflow server` with a sqlite backend and a local artifact store."""
    root = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    log = open(root / "server.log", "ab")  # noqa: SIM115 (closed below)
    binary = Path(sys.executable).parent / "mlflow"
    proc = subprocess.Popen([str(binary), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
                             "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
                             "--artifacts-destination", str(root / "artifacts")],
                            stdout=log, stderr=subprocess.STDOUT, cwd=root)
    uri = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: proc.poll() is not None or _http_ok(f"{uri}/health"), 180, f"mlflow server on {port}")
        if proc.poll() is not None:
            pytest.fail(f"mlflow server exited: {(root / 'server.log').read_text()[-2000:]}")
        yield uri
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def file_store(tmp_path: Path) -> str:
    return str(tmp_path / "mlruns")


def client(uri: str) -> mlflow.MlflowClient:
    from skurl.config.tracking import TrackingConfig
    from skurl.telemetry.tracking import client as make_client

    return make_client(TrackingConfig(mlflow=True, uri=uri))


def run_id(run_dir: Path) -> str:
    return json.loads((run_dir / "mlflow.json").read_text())["run_id"]


def train(run_dir: Path, uri: str, *extra: str) -> None:
    args = ["train", "--run-dir", str(run_dir), "--iterations", "2", *sets(TINY),
            *sets(["tracking.mlflow=true", f"tracking.uri={uri}"]), *extra]
    assert main(args) == 0


def check_tracked_run(mlflow_client: mlflow.MlflowClient, run_dir: Path) -> None:
    """Params = the flattened config; per-iteration metrics = metrics.jsonl; files logged."""
    run = mlflow_client.get_run(run_id(run_dir))
    assert run.info.status == "FINISHED"
    assert run.data.params["ppo.epochs"] == "2" and run.data.params["tracking.mlflow"] == "True"
    assert run.data.params["policy.hidden"] == "[16, 16]"
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    history = mlflow_client.get_metric_history(run.info.run_id, "reward/reward_mean")
    assert [(m.step, m.value) for m in history] == [(r["iteration"], r["reward_mean"]) for r in records]
    assert [m.step for m in mlflow_client.get_metric_history(run.info.run_id, "ppo/policy_loss")] == [0, 1]
    assert run.data.metrics["final/avg_cost_per_sku_day"] == pytest.approx(
        json.loads((run_dir / "eval.json").read_text())["policies"]["ppo"]["avg_cost_per_sku_day"])
    assert "final/baseline_avg_cost_per_sku_day" in run.data.metrics
    files = {f.path for f in mlflow_client.list_artifacts(run.info.run_id)}
    assert {"report.md", "config.yaml", "eval.json", "plots", "model.onnx"} <= files  # skurl export of the run
    assert mlflow_client.list_artifacts(run.info.run_id, "plots")


@pytest.fixture(scope="module")
def server_run(mlflow_server: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("server-run") / "run"
    train(run_dir, mlflow_server)
    return run_dir


def test_train_logs_to_an_mlflow_server(mlflow_server: str, server_run: Path) -> None:
    check_tracked_run(client(mlflow_server), server_run)


def test_repeats_are_child_runs_of_one_parent_in_the_file_store(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "runs"
    train(root, file_store(tmp_path), "--repeats", "2", "--json")
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [r["seed"] for r in out["repeats"]] == [0, 1]
    mlflow_client = client(file_store(tmp_path))
    parent = mlflow_client.get_run(run_id(root))
    children = [mlflow_client.get_run(run_id(root / f"repeat_{k}")) for k in range(2)]
    for k, child in enumerate(children):
        assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert child.data.params["train.seed"] == str(k)
        check_tracked_run(mlflow_client, root / f"repeat_{k}")
    costs = [c.data.metrics["final/avg_cost_per_sku_day"] for c in children]
    assert parent.data.metrics["final/avg_cost_per_sku_day_mean"] == pytest.approx(sum(costs) / 2)
    assert parent.data.metrics["final/avg_cost_per_sku_day_std"] == pytest.approx(abs(costs[0] - costs[1]) / 2**0.5)
    report = (root / "report.md").read_text()
    assert "| avg_cost_per_sku_day |" in report and "mean | std | min | max" in report
    assert "report.md" in {f.path for f in mlflow_client.list_artifacts(parent.info.run_id)}


def stand_in_export(run_dir: Path, out: Path, *, probabilities: bool = False) -> Path:
    """A small valid ONNX graph in place of the real export (skurl.serve.export)."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", 3])
    y = helper.make_tensor_value_info("order_units", TensorProto.FLOAT, ["batch", 3])
    graph = helper.make_graph([helper.make_node("Relu", ["features"], ["order_units"])], "stand_in", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.metadata_props.add(key="run_dir", value=str(run_dir))
    onnx.checker.check_model(model)
    onnx.save(model, str(out))
    return out


def download(mlflow_client: mlflow.MlflowClient, name: str, version: str, tmp_path: Path) -> Path:
    """A registered version's files, fetched through the registry (not the run's directory)."""
    source = mlflow_client.get_model_version_download_uri(name, version)
    return Path(mlflow.artifacts.download_artifacts(artifact_uri=source, tracking_uri=mlflow_client.tracking_uri,
                                                    dst_path=str(tmp_path / "download")))


def register(argv: list[str], export=stand_in_export) -> int:
    args = build_parser().parse_args(["register", *argv])
    return args.func(args, export=export)


def test_register_refuses_a_run_that_loses_the_backtest(mlflow_server: str, server_run: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    # two iterations from random weights: far worse than the tuned baseline
    code = register(["--run", str(server_run), "--name", "refused", "--json", "--set", f"tracking.uri={mlflow_server}"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 1 and out["registered"] is False and out["improvement"] < 0
    assert not client(mlflow_server).search_registered_models(filter_string="name = 'refused'")


@pytest.mark.parametrize("where", ["server", "file"])
def test_register_tags_the_version_with_the_backtest(where: str, request: pytest.FixtureRequest, server_run: Path,
                                                     tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = request.getfixturevalue("mlflow_server") if where == "server" else file_store(tmp_path)
    argv = ["--run", str(server_run), "--name", "replenishment", "--alias", "champion", "--json",
            "--episodes", "2", "--min-improvement", "-10", "--set", f"tracking.uri={uri}"]
    assert register(argv) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    mlflow_client = client(uri)
    version = mlflow_client.get_model_version_by_alias("replenishment", "champion")
    assert int(version.version) == out["model"]["version"]
    assert version.tags["backtest.seeds"] == "10000,10001" and version.tags["backtest.objective"] == "cost"
    assert {k: v for k, v in version.tags.items() if k.startswith("backtest.")} == out["tags"]
    assert float(version.tags["backtest.improvement"]) < 0  # the gate here was -1000%
    model = onnx.load(str(download(mlflow_client, "replenishment", version.version, tmp_path) / "model.onnx"))
    assert {p.key: p.value for p in model.metadata_props}["run_dir"] == str(server_run)


@pytest.mark.skipif(importlib.util.find_spec("skurl.serve.export") is None,
                    reason="skurl.serve.export (skurl export) is not in this tree yet")
def test_register_with_the_real_export(server_run: Path, tmp_path: Path) -> None:
    from skurl.commands.register import default_export

    argv = ["--run", str(server_run), "--name", "real-export", "--min-improvement", "-10",
            "--set", f"tracking.uri={file_store(tmp_path)}"]
    assert register(argv, export=default_export) == 0
    mlflow_client = client(file_store(tmp_path))
    version = mlflow_client.search_model_versions("name = 'real-export'")[0]
    onnx.checker.check_model(onnx.load(str(download(mlflow_client, "real-export", version.version, tmp_path)
                                           / "model.onnx")))
