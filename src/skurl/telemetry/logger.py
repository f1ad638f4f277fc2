"""Run logs: TensorBoard scalars/histograms (run_dir/tb/) and run_dir/metrics.jsonl.

metrics.jsonl holds one JSON object per logged iteration, {"iteration": i, key: value},
append-only and flushed after every line, so a crash loses at most the line being
written. A torn last line (crash mid-write) is cut off when the log is reopened, and
readers skip it. Non-finite values are written as null (strict JSON for jq/pandas).
"""

from __future__ import annotations

import json
import math
import numbers
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from skurl import atomic
from skurl.telemetry.sinks import active_sinks

if TYPE_CHECKING:
    from numpy.typing import ArrayLike
    from tensorboardX import SummaryWriter

METRICS_FILE = "metrics.jsonl"
TB_DIR = "tb"

# TensorBoard groups tags by the part before "/": keep the JSONL key, add a group.
_TB_PREFIX_GROUPS = ("reward", "time", "cost", "eval", "baseline")
_PPO_KEYS = frozenset({
    "policy_loss", "value_loss", "entropy", "approx_kl", "clip_frac",
    "explained_variance", "grad_norm", "lr",
})


def tb_tag(key: str) -> str:
    """TensorBoard tag of a metrics key: reward_mean -> reward/reward_mean."""
    if "/" in key:
        return key
    head = key.split("_", 1)[0]
    if head in _TB_PREFIX_GROUPS:
        return f"{head}/{key}"
    return f"ppo/{key}" if key in _PPO_KEYS else f"train/{key}"


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The records of a metrics.jsonl file; [] if absent. Unparsable lines (a torn last
    line after a crash) and records without an integer "iteration" are skipped."""
    records: list[dict[str, Any]] = []
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return records
    for line in text.splitlines():
        record = _parse_line(line)
        if record is not None:
            records.append(record)
    return records


def _parse_line(line: str) -> dict[str, Any] | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict) or not isinstance(record.get("iteration"), int):
        return None
    return record


def _json_value(key: str, value: object) -> int | float | bool | None:
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        f = float(value)
        return f if math.isfinite(f) else None
    if value is None:
        return None
    raise TypeError(f"metric {key!r}: expected a number, got {type(value).__name__}")


class RunLogger:
    """Logs scalars per iteration to TensorBoard and metrics.jsonl under `run_dir`.

    On resume, call `truncate_after(checkpoint_iteration)` before logging again so both
    logs continue exactly where the checkpoint left off.
    """

    def __init__(self, run_dir: str | Path, tensorboard: bool = True) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / METRICS_FILE
        self._tensorboard = tensorboard
        self._writer: SummaryWriter | None = None
        _cut_torn_tail(self.path)
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (held open)
        self._sinks = active_sinks()  # e.g. an MLflow run (telemetry/sinks.py)
        if tensorboard:
            self._open_writer(purge_step=None)

    def _open_writer(self, purge_step: int | None) -> None:
        from tensorboardX import SummaryWriter  # deferred: heavy import, optional use

        # purge_step hides events at steps >= purge_step left by a run that crashed
        # after its last checkpoint, so TensorBoard curves do not double back.
        self._writer = SummaryWriter(
            logdir=str(self.run_dir / TB_DIR), purge_step=purge_step, flush_secs=10)

    def log(self, iteration: int, scalars: Mapping[str, Any]) -> None:
        """Append {"iteration": iteration, **scalars} to metrics.jsonl and to TensorBoard."""
        self._check_open()
        if "iteration" in scalars:
            raise ValueError("scalars must not contain 'iteration' (pass it as the argument)")
        record: dict[str, Any] = {"iteration": int(iteration)}
        record.update({k: _json_value(k, v) for k, v in scalars.items()})
        self._file.write(json.dumps(record, allow_nan=False) + "\n")
        self._file.flush()
        if self._writer is not None:
            # NaN/inf (null in metrics.jsonl) are left out of TensorBoard, which cannot plot
            # them and would print "NaN or Inf found in input tensor." for each one.
            for key, value in record.items():
                if value is not None and key != "iteration":
                    self._writer.add_scalar(tb_tag(key), float(value), int(iteration))
        if self._sinks:  # the TensorBoard scalars, finite ones only
            tagged = {tb_tag(k): float(v) for k, v in record.items() if k != "iteration" and v is not None}
            for sink in self._sinks:
                sink.log_scalars(int(iteration), tagged)

    def log_histogram(
        self, iteration: int, name: str, values: ArrayLike, max_values: int = 1_000_000
    ) -> None:
        """A per-SKU distribution (e.g. order quantities, cost per SKU) to TensorBoard.

        Above `max_values` entries an evenly strided subset is binned (binning 10^7 values
        costs ~1.5 s; a histogram of 10^6 of them looks the same). Non-finite entries are
        dropped; nothing is written if none remain."""
        self._check_open()
        if self._writer is None:
            return
        arr = np.asarray(values).ravel()
        if arr.size > max_values > 0:
            arr = arr[:: -(-arr.size // max_values)]
        arr = arr.astype(np.float64, copy=False)
        arr = arr[np.isfinite(arr)]
        if arr.size:
            self._writer.add_histogram(name, arr, int(iteration))

    def has_records(self) -> bool:
        """Whether metrics.jsonl holds anything (a run dir used before)."""
        self._check_open()
        self._file.flush()
        return self.path.stat().st_size > 0

    def truncate_after(self, iteration: int) -> int:
        """Drop metrics.jsonl records past `iteration` (and hide TensorBoard events past
        it); returns how many records were dropped. Rewrites the file atomically."""
        self._check_open()
        self._file.flush()
        self._file.close()
        kept, dropped = [], 0
        with open(self.path, encoding="utf-8") as f:
            for line in f:
                record = _parse_line(line)
                if record is not None and record["iteration"] <= iteration:
                    kept.append(line if line.endswith("\n") else line + "\n")
                else:
                    dropped += 1
        atomic.write_text(self.path, "".join(kept))
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (held open)
        if self._tensorboard:
            if self._writer is not None:
                self._writer.close()
            self._open_writer(purge_step=int(iteration) + 1)
        return dropped

    def flush(self) -> None:
        self._check_open()
        self._file.flush()
        os.fsync(self._file.fileno())
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        """Flush and fsync the log, close TensorBoard. Safe to call twice."""
        if self._file.closed:
            return
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def _check_open(self) -> None:
        if self._file.closed:
            raise RuntimeError(f"RunLogger for {self.run_dir} is closed")

    def __enter__(self) -> RunLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _cut_torn_tail(path: Path) -> None:
    """Cut a last line without its newline (a crash mid-write), so the next appended
    record starts on a line of its own instead of gluing onto the fragment."""
    try:
        f = open(path, "rb+")  # noqa: SIM115 (closed below)
    except FileNotFoundError:
        return
    with f:
        end = f.seek(0, os.SEEK_END)
        pos = end
        while pos > 0:  # scan back block by block: only the tail is read
            start = max(0, pos - 65536)
            f.seek(start)
            block = f.read(pos - start)
            if pos == end and block.endswith(b"\n"):
                return
            cut = block.rfind(b"\n")
            if cut >= 0:
                f.truncate(start + cut + 1)
                return
            pos = start
        if end:
            f.truncate(0)
