"""MLflow tracking of training runs (config `tracking.*`; docs/architecture.md, Serving).

One MLflow run per run directory: the resolved config as params (flattened: `ppo.lr`), the
per-iteration scalars under their TensorBoard tags (RunLogger sends them through
telemetry/sinks.py), the final figures as `final/...` metrics, and at the end the run's
report, plots, config, eval.json and RUN_DIR/model.onnx when there is one. The run id is kept
in RUN_DIR/mlflow.json, so `skurl train --resume` logs on into the same run (MLflow keeps
both values of an iteration that is redone after a crash). `skurl train --repeats K` makes a
parent run whose children are the K seeds.

MLflow is imported only when tracking is on. A local directory URI uses MLflow's file
store, which MLflow 3 keeps in maintenance mode behind MLFLOW_ALLOW_FILE_STORE (set here)."""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from skurl import atomic
from skurl.config.tracking import TrackingConfig
from skurl.errors import missing_extra

TRACKING_FILE = "mlflow.json"
PARENT_TAG = "mlflow.parentRunId"  # MLflow's own tag: the UI nests children under it
# The figures of an evaluation (EvalResult.to_json()) that become `final/...` metrics.
FINAL_FIGURES = ("avg_profit_per_sku_day", "avg_cost_per_sku_day", "avg_inventory_cost_per_sku_day",
                 "fill_rate", "lost_units", "waste_units")
ARTIFACTS = ("report.md", "config.yaml", "eval.json", "model.onnx")
_BATCH = 100  # MLflow's limit of params per log_batch call (metrics: 1000)
log = logging.getLogger("skurl.tracking")


def tracking_uri(cfg: TrackingConfig) -> str:
    """The URI MLflow is given: a plain directory becomes an absolute file: URI."""
    if "://" in cfg.uri or cfg.uri.startswith("file:"):
        return cfg.uri
    return Path(cfg.uri).resolve().as_uri()


def client(cfg: TrackingConfig) -> Any:
    """An MlflowClient on tracking.uri (one-line error when mlflow is not installed)."""
    try:
        import mlflow
        from mlflow.tracking import MlflowClient
    except ModuleNotFoundError:
        raise missing_extra("mlflow", "tracking.mlflow") from None
    uri = tracking_uri(cfg)
    if uri.startswith("file:"):
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    # MLflow's own helpers (model flavours, artifact downloads) read the process-wide URIs;
    # left unset they open ./mlflow.db (MLflow 3's default), so point them here too.
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def experiment_id(mlflow_client: Any, name: str) -> str:
    found = mlflow_client.get_experiment_by_name(name)
    return found.experiment_id if found is not None else mlflow_client.create_experiment(name)


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """{"ppo": {"lr": 3e-4}} -> {"ppo.lr": "0.0003"}: MLflow params are flat strings."""
    out: dict[str, str] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, name + "."))
        else:
            out[name] = json.dumps(list(value)) if isinstance(value, tuple | list) else str(value)
    return out


class MlflowRun:
    """One MLflow run, written through the client by run id (no global active run, so a
    parent and its children can be open together). It is also a MetricSink."""

    def __init__(self, mlflow_client: Any, run_id: str) -> None:
        self.client = mlflow_client
        self.run_id = run_id
        self._failed = False

    def log_params(self, params: Mapping[str, str]) -> None:
        from mlflow.entities import Param

        items = [Param(k, v[:6000]) for k, v in params.items()]
        for i in range(0, len(items), _BATCH):
            self.client.log_batch(self.run_id, params=items[i:i + _BATCH])

    def log_scalars(self, iteration: int, scalars: Mapping[str, float]) -> None:
        """Per-iteration scalars; a tracking server that goes away costs one warning, not
        the training run."""
        if self._failed:
            return
        try:
            self.log_metrics(scalars, step=iteration)
        except Exception as exc:
            self._failed = True
            log.warning("MLflow run %s: logging stopped at iteration %d (%s)", self.run_id, iteration,
                        str(exc).splitlines()[0] if str(exc) else type(exc).__name__)

    def log_metrics(self, metrics: Mapping[str, float], step: int = 0) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(k, float(v), now, int(step)) for k, v in metrics.items()
                 if v is not None and math.isfinite(float(v))]
        for i in range(0, len(items), 1000):
            self.client.log_batch(self.run_id, metrics=items[i:i + 1000])

    def log_run_files(self, run_dir: Path) -> list[str]:
        """The run's report, plots, config, eval.json and ONNX model (those that exist)."""
        logged = []
        for name in ARTIFACTS:
            if (run_dir / name).is_file():
                self.client.log_artifact(self.run_id, str(run_dir / name))
                logged.append(name)
        if (run_dir / "plots").is_dir():
            self.client.log_artifacts(self.run_id, str(run_dir / "plots"), artifact_path="plots")
            logged.append("plots/")
        return logged

    def end(self, ok: bool) -> None:
        self.client.set_terminated(self.run_id, "FINISHED" if ok else "FAILED")


def final_metrics(evaluation: Mapping[str, Any] | None, baseline: Mapping[str, Any] | None) -> dict[str, float]:
    """`final/<figure>` of the trained policy's last evaluation, `final/baseline_<figure>` of
    the tuned baseline's; figures that are missing or not finite are left out."""
    out: dict[str, float] = {}
    for prefix, result in (("final/", evaluation), ("final/baseline_", baseline)):
        for key in FINAL_FIGURES:
            value = (result or {}).get(key)
            if isinstance(value, int | float) and math.isfinite(value):
                out[prefix + key] = float(value)
    return out


def open_run(cfg: TrackingConfig, run_dir: Path, *, name: str, parent: MlflowRun | None = None,
             params: Mapping[str, str] | None = None) -> MlflowRun:
    """The MLflow run of `run_dir`: the one recorded in RUN_DIR/mlflow.json when it is on the
    same tracking URI (a resumed run), else a new one (a child of `parent` when given)."""
    mlflow_client = client(cfg)
    uri = tracking_uri(cfg)
    record = _read_record(run_dir / TRACKING_FILE)
    if record.get("uri") == uri and record.get("run_id"):
        try:
            mlflow_client.update_run(record["run_id"], status="RUNNING")
            return MlflowRun(mlflow_client, record["run_id"])
        except Exception:
            log.warning("MLflow run %s of %s not found on %s: starting a new one", record["run_id"], run_dir, uri)
    tags = {PARENT_TAG: parent.run_id} if parent is not None else {}
    tags["skurl.run_dir"] = str(run_dir.resolve())
    created = mlflow_client.create_run(experiment_id(mlflow_client, cfg.experiment), run_name=name, tags=tags)
    run = MlflowRun(mlflow_client, created.info.run_id)
    if params:
        run.log_params(params)
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic.write_text(run_dir / TRACKING_FILE, json.dumps({"uri": uri, "run_id": run.run_id}) + "\n")
    return run


def _read_record(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
