"""RunLogger: metrics.jsonl lines, TensorBoard events, truncate_after, crash tolerance."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from tensorboardX.proto.event_pb2 import Event

from skurl.telemetry.logger import RunLogger, read_metrics, tb_tag


def _events(run_dir: Path) -> list[Event]:
    """All events of run_dir/tb, read from the TFRecord framing (length, crc, data, crc)."""
    events = []
    for path in sorted((run_dir / "tb").glob("events.out.tfevents.*")):
        raw = path.read_bytes()
        pos = 0
        while pos < len(raw):
            (length,) = struct.unpack_from("<Q", raw, pos)
            data = raw[pos + 12: pos + 12 + length]
            pos += 12 + length + 4
            events.append(Event.FromString(data))
    return events


def _scalars(run_dir: Path) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = {}
    for event in _events(run_dir):
        for value in event.summary.value:
            if value.HasField("simple_value"):
                out.setdefault(value.tag, {})[event.step] = value.simple_value
    return out


def _lines(run_dir: Path) -> list[str]:
    return (run_dir / "metrics.jsonl").read_text().splitlines()


def test_log_writes_jsonl_and_tensorboard(tmp_path: Path) -> None:
    with RunLogger(tmp_path) as log:
        log.log(0, {"reward_mean": np.float32(-1.5), "sample_skus": np.int64(500),
                    "time_simulate": 2.0, "policy_loss": 0.25})
        log.log(1, {"reward_mean": -1.0, "explained_variance": float("nan")})
    lines = [json.loads(line) for line in _lines(tmp_path)]
    assert lines == [
        {"iteration": 0, "reward_mean": -1.5, "sample_skus": 500, "time_simulate": 2.0,
         "policy_loss": 0.25},
        {"iteration": 1, "reward_mean": -1.0, "explained_variance": None},  # strict JSON
    ]
    scalars = _scalars(tmp_path)
    assert scalars["reward/reward_mean"] == {0: -1.5, 1: -1.0}
    assert scalars["time/time_simulate"] == {0: 2.0}
    assert scalars["ppo/policy_loss"] == {0: 0.25}
    assert scalars["train/sample_skus"] == {0: 500.0}


def test_each_line_is_on_disk_before_close(tmp_path: Path) -> None:
    log = RunLogger(tmp_path, tensorboard=False)
    log.log(0, {"a": 1.0})
    log.log(1, {"a": 2.0})
    assert [r["a"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1.0, 2.0]
    log.close()
    assert not (tmp_path / "tb").exists()


def test_appends_to_existing_log(tmp_path: Path) -> None:
    with RunLogger(tmp_path, tensorboard=False) as log:
        log.log(0, {"a": 1.0})
    with RunLogger(tmp_path, tensorboard=False) as log:
        log.log(1, {"a": 2.0})
    assert [r["iteration"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [0, 1]


def test_truncate_after_continues_exactly(tmp_path: Path) -> None:
    with RunLogger(tmp_path) as log:
        for it in range(10):
            log.log(it, {"reward_mean": float(it)})
    with RunLogger(tmp_path) as log:  # a resumed run, checkpoint at iteration 4
        assert log.truncate_after(4) == 5
        assert [json.loads(x)["iteration"] for x in _lines(tmp_path)] == [0, 1, 2, 3, 4]
        log.log(5, {"reward_mean": 50.0})
    assert [json.loads(x)["iteration"] for x in _lines(tmp_path)] == [0, 1, 2, 3, 4, 5]
    # TensorBoard is told to hide the abandoned steps >= 5 (a SessionLog START at step 5).
    starts = [e.step for e in _events(tmp_path) if e.HasField("session_log")]
    assert 5 in starts


def test_torn_last_line_is_cut_on_reopen(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"iteration": 0, "a": 1.0}\n{"iteration": 1, "a": 2.0}\n{"iteration": 2, "a')
    assert [r["iteration"] for r in read_metrics(path)] == [0, 1]  # readers skip it
    with RunLogger(tmp_path, tensorboard=False) as log:
        log.log(2, {"a": 3.0})
    assert _lines(tmp_path) == ['{"iteration": 0, "a": 1.0}', '{"iteration": 1, "a": 2.0}',
                                '{"iteration": 2, "a": 3.0}']


def test_torn_only_line_is_cut(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text('{"itera')
    with RunLogger(tmp_path, tensorboard=False) as log:
        log.log(0, {"a": 1.0})
    assert _lines(tmp_path) == ['{"iteration": 0, "a": 1.0}']


def test_histogram_drops_non_finite(tmp_path: Path) -> None:
    with RunLogger(tmp_path) as log:
        log.log_histogram(3, "orders_per_sku", np.array([1.0, 2.0, np.nan, 4.0, np.inf]))
        log.log_histogram(4, "empty", np.array([np.nan]))
    histos = [(e.step, v.tag, v.histo) for e in _events(tmp_path) for v in e.summary.value
              if v.HasField("histo")]
    assert [(step, tag) for step, tag, _ in histos] == [(3, "orders_per_sku")]
    assert histos[0][2].num == 3 and histos[0][2].max == 4.0


def test_bad_input_and_closed_logger(tmp_path: Path) -> None:
    log = RunLogger(tmp_path, tensorboard=False)
    with pytest.raises(TypeError, match="'phase'"):
        log.log(0, {"phase": "collect"})
    with pytest.raises(ValueError, match="iteration"):
        log.log(0, {"iteration": 1.0})
    log.close()
    log.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        log.log(1, {"a": 1.0})
    assert _lines(tmp_path) == []  # a rejected record writes nothing


def test_tb_tags_group_by_kind() -> None:
    assert tb_tag("reward_p95") == "reward/reward_p95"
    assert tb_tag("approx_kl") == "ppo/approx_kl"
    assert tb_tag("transitions_per_s") == "train/transitions_per_s"
    assert tb_tag("eval/cost") == "eval/cost"


def test_histogram_of_many_values_is_subsampled(tmp_path: Path) -> None:
    values = np.arange(10_000, dtype=np.float64)
    with RunLogger(tmp_path) as log:
        log.log_histogram(0, "big", values, max_values=1000)
    (histo,) = [v.histo for e in _events(tmp_path) for v in e.summary.value if v.HasField("histo")]
    assert histo.num == 1000 and histo.min == 0.0 and histo.max == 9990.0


def test_non_finite_scalars_stay_out_of_tensorboard(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """tensorboardX warns "NaN or Inf found in input tensor." for each (the stray line of a
    decoupled resume, issue 25); metrics.jsonl keeps them as null."""
    with RunLogger(tmp_path) as log:
        log.log(0, {"explained_variance": float("nan"), "kl": float("inf"), "reward_mean": -1.0})
    assert "NaN or Inf" not in caplog.text
    assert _scalars(tmp_path) == {"reward/reward_mean": {0: -1.0}}
    assert json.loads(_lines(tmp_path)[0]) == {"iteration": 0, "explained_variance": None, "kl": None,
                                               "reward_mean": -1.0}
