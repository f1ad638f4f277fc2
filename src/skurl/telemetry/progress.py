"""Training progress: a rich progress bar on a terminal, one plain line per iteration
otherwise (stdout not a TTY, or CI=true), so captured logs stay readable.

    with Progress(cfg.train.iterations, initial=start) as progress:
        for it in range(start, cfg.train.iterations):
            ...
            progress.update(it, transitions_per_s=tps, reward_mean=r,
                            eval_cost=c, baseline_cost=b)

More: docs/internals.md (telemetry/progress.py)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.progress import Progress as RichProgress

_REWARD_KEYS = ("reward_mean", "reward")
_COST_KEYS = ("eval_cost", "cost")
_BASELINE_KEYS = ("baseline_cost",)
_TPS_KEYS = ("transitions_per_s",)
_KNOWN = frozenset(_REWARD_KEYS + _COST_KEYS + _BASELINE_KEYS + _TPS_KEYS)


def _is_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def _num(value: float) -> str:
    """Compact number: 4 significant digits, thousands grouped, no sci notation < 1e7."""
    v = float(value)
    if v != v:  # NaN
        return "nan"
    if abs(v) >= 1e7:
        return f"{v:.3e}"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.4g}"


def _clock(seconds: float) -> str:
    s = int(max(seconds, 0.0))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _first(fields: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        if fields.get(key) is not None:
            return fields[key]
    return None


class Progress:
    """Progress of a training run; use as a context manager."""

    def __init__(
        self,
        total_iterations: int,
        initial: int = 0,
        *,
        stream: IO[str] | None = None,
        plain: bool | None = None,
        description: str = "train",
    ) -> None:
        if total_iterations < 0:
            raise ValueError(f"total_iterations must be >= 0, got {total_iterations}")
        self.total = int(total_iterations)
        self.initial = min(max(int(initial), 0), self.total)
        self.completed = self.initial
        self._stream = stream if stream is not None else sys.stdout
        isatty = getattr(self._stream, "isatty", lambda: False)()
        self.plain = plain if plain is not None else (not isatty or _is_ci())
        self._description = description
        self._cost: float | None = None
        self._baseline: float | None = None
        self._start = time.perf_counter()
        self._bar: RichProgress | None = None
        self._task: Any = None  # the bar's TaskID

    def __enter__(self) -> Progress:
        self._start = time.perf_counter()
        if not self.plain:
            self._open_bar()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def _open_bar(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.progress import Progress as RichProgress

        console = Console(file=self._stream)
        self._bar = RichProgress(
            TextColumn("[bold]{task.description}"), BarColumn(bar_width=24),
            MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
            TextColumn("{task.fields[info]}"),
            console=console,
        )
        self._bar.start()
        self._task = self._bar.add_task(
            self._description, total=self.total, completed=self.initial, info="")

    def update(self, iteration: int, **fields: Any) -> None:
        """Report that iteration `iteration` (0-based) finished, with its figures."""
        self.completed = min(max(int(iteration) + 1, self.completed), self.total)
        cost = _first(fields, _COST_KEYS)
        baseline = _first(fields, _BASELINE_KEYS)
        self._cost = cost if cost is not None else self._cost
        self._baseline = baseline if baseline is not None else self._baseline
        info = self._info(fields)
        if self._bar is not None:
            self._bar.update(self._task, completed=self.completed, info=info)
        else:
            self._write_line(iteration, info)

    def print(self, message: str) -> None:
        """A message that does not tear the bar (plain mode: a line of its own)."""
        if self._bar is not None:
            self._bar.console.print(message)
        else:
            self._stream.write(message + "\n")
            self._stream.flush()

    def _info(self, fields: dict[str, Any]) -> str:
        parts: list[str] = []
        tps = _first(fields, _TPS_KEYS)
        if tps is not None:
            parts.append(f"{_num(tps)} transitions/s")
        reward = _first(fields, _REWARD_KEYS)
        if reward is not None:
            parts.append(f"reward {_num(reward)}")
        parts.extend(self._cost_parts())
        parts.extend(f"{k}={_num(v) if isinstance(v, int | float) else v}"
                     for k, v in fields.items() if k not in _KNOWN and v is not None)
        return "  ".join(parts)

    def _cost_parts(self) -> list[str]:
        if self._cost is None:
            return [f"baseline {_num(self._baseline)}"] if self._baseline is not None else []
        text = f"cost {_num(self._cost)}"
        if self._baseline is not None:
            text += f" vs baseline {_num(self._baseline)}"
            if float(self._baseline) != 0.0:
                change = 100.0 * (float(self._cost) / float(self._baseline) - 1.0)
                text += f" ({change:+.1f}%)"
        return [text]

    def _write_line(self, iteration: int, info: str) -> None:
        elapsed = time.perf_counter() - self._start
        done_here = self.completed - self.initial
        pct = 100.0 * self.completed / self.total if self.total else 100.0
        line = f"iter {iteration}  {self.completed}/{self.total} ({pct:.0f}%)"
        if info:
            line += f"  {info}"
        line += f"  elapsed {_clock(elapsed)}"
        if done_here > 0 and self.completed < self.total:
            eta = elapsed / done_here * (self.total - self.completed)
            line += f"  eta {_clock(eta)}"
        self._stream.write(line + "\n")
        self._stream.flush()


def throttled_lines(every: float = 5.0, stream: IO[str] | None = None) -> Callable[[str], None]:
    """A progress callback for long work outside the training loop (baseline tuning): the
    first message at once, then at most one line every `every` seconds, on stderr by default
    (stdout stays clean for --json), whether or not it is a terminal."""
    last = [-float("inf")]

    def line(message: str) -> None:
        now = time.monotonic()
        if now - last[0] >= every:
            last[0] = now
            out = stream if stream is not None else sys.stderr
            out.write(message + "\n")
            out.flush()

    return line
