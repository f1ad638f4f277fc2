"""Settings of experiment tracking (MLflow; docs/architecture.md, Serving). Part of `skurl.config`, with the same
help-text conventions; apart only to keep each file to one responsibility."""

from __future__ import annotations

import re
from dataclasses import dataclass

from skurl.config.loader import check, opt

_EXPERIMENT = re.compile(r"[^\x00-\x1f]{1,256}")


@dataclass(frozen=True)
class TrackingConfig:
    mlflow: bool = opt(
        False, "log runs to MLflow: the resolved config as params, the TensorBoard scalars per "
        "iteration, report, plots, config and model at the end (needs the mlflow package)"
    )
    uri: str = opt(
        "mlruns", "MLflow tracking URI: http(s)://host:port of an `mlflow server`, sqlite:///FILE, or "
        "a local directory (MLflow's file store, e.g. mlruns)"
    )
    experiment: str = opt("skurl", "MLflow experiment the runs go to (created when missing)")

    def __post_init__(self) -> None:
        check(bool(self.uri.strip()), "tracking.uri", self.uri,
              "an http(s):// URL, sqlite:///FILE or a directory path")
        check("://" not in self.uri or self.uri.startswith(("http://", "https://", "file://", "sqlite:///")),
              "tracking.uri", self.uri, "an http(s):// URL, sqlite:///FILE, file:///DIR or a directory path")
        check(bool(_EXPERIMENT.fullmatch(self.experiment)) and bool(self.experiment.strip()),
              "tracking.experiment", self.experiment, "a name of 1-256 printable characters")
