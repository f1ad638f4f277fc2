"""Tracking pieces without a server: RunLogger's sinks, flattened params, the repeat summary,
config and flag checks (the MLflow runs themselves: tests/integration/test_mlflow.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from skurl.cli import main
from skurl.commands.train_tracked import summarize, write_summary
from skurl.config import load_config
from skurl.errors import ConfigError
from skurl.telemetry.logger import RunLogger
from skurl.telemetry.sinks import active_sinks, metric_sink
from skurl.telemetry.tracking import final_metrics, flatten, tracking_uri


class Collect:
    def __init__(self) -> None:
        self.calls: list[tuple[int, dict[str, float]]] = []

    def log_scalars(self, iteration: int, scalars: dict[str, float]) -> None:
        self.calls.append((iteration, dict(scalars)))


def test_run_logger_sends_its_tensorboard_scalars_to_active_sinks(tmp_path: Path) -> None:
    sink = Collect()
    with metric_sink(sink), RunLogger(tmp_path, tensorboard=False) as logger:
        logger.log(0, {"reward_mean": 1.5, "policy_loss": 0.25, "eval_cost": math.nan, "lr": None})
    assert sink.calls == [(0, {"reward/reward_mean": 1.5, "ppo/policy_loss": 0.25})]
    assert active_sinks() == ()
    with RunLogger(tmp_path, tensorboard=False) as logger:  # opened outside: no sink
        logger.log(1, {"reward_mean": 2.0})
    assert len(sink.calls) == 1


def test_flatten_gives_mlflow_params() -> None:
    flat = flatten({"ppo": {"lr": 0.0003, "hidden": (16, 16)}, "tracking": {"mlflow": False}})
    assert flat == {"ppo.lr": "0.0003", "ppo.hidden": "[16, 16]", "tracking.mlflow": "False"}


def test_tracking_config_is_off_by_default_and_checked(tmp_path: Path) -> None:
    cfg = load_config()
    assert cfg.tracking.mlflow is False and cfg.tracking.uri == "mlruns"
    assert tracking_uri(cfg.tracking) == Path("mlruns").resolve().as_uri()
    for uri in ("http://127.0.0.1:5000", "sqlite:///x.db", str(tmp_path)):
        assert load_config(None, [f"tracking.uri={uri}"]).tracking.uri == uri
    with pytest.raises(ConfigError, match=r"tracking\.uri"):
        load_config(None, ["tracking.uri=ftp://host/x"])


def test_repeat_summary_and_report(tmp_path: Path) -> None:
    rows = [{"repeat": k, "seed": k, **final_metrics({"avg_profit_per_sku_day": p, "fill_rate": 0.9}, None)}
            for k, p in enumerate((1.0, 2.0, 4.0))]
    summary = summarize(rows)
    assert summary["final/avg_profit_per_sku_day_mean"] == pytest.approx(7 / 3)
    assert summary["final/avg_profit_per_sku_day_std"] == pytest.approx(1.5275252, rel=1e-6)
    assert summary["final/fill_rate_std"] == 0.0 and summary["final/avg_profit_per_sku_day_max"] == 4.0
    write_summary(tmp_path, rows, summary)
    report = (tmp_path / "report.md").read_text()
    assert "| avg_profit_per_sku_day | 1.0000 | 2.0000 | 4.0000 | 2.3333 | 1.5275 | 1.0000 | 4.0000 |" in report
    assert json.loads((tmp_path / "repeats.json").read_text())["summary"] == summary


@pytest.mark.parametrize(("flags", "expected"), [
    (["--repeats", "0"], "--repeats 0, expected an integer >= 1"),
    (["--repeats", "2", "--resume", "somewhere"], "--repeats K trains K new runs; drop --resume"),
])
def test_repeats_bad_flags(flags: list[str], expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err
