"""Progress: plain one-line-per-iteration output off a TTY or in CI; rich bar on a TTY."""

from __future__ import annotations

import io

import pytest

from skurl.telemetry.progress import Progress


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_when_not_a_tty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    out = io.StringIO()
    with Progress(3, stream=out) as progress:
        assert progress.plain
        progress.update(0, transitions_per_s=123456.0, reward_mean=-3.25)
        progress.update(1, transitions_per_s=120000.0, reward_mean=-2.5, eval_cost=4.0,
                        baseline_cost=5.0)
        progress.update(2, reward_mean=-2.0, clip_frac=0.125)
    lines = out.getvalue().splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("iter 0  1/3 (33%)")
    assert "123,456 transitions/s" in lines[0] and "reward -3.25" in lines[0]
    assert "cost" not in lines[0]
    assert "cost 4 vs baseline 5 (-20.0%)" in lines[1]
    assert lines[2].startswith("iter 2  3/3 (100%)")
    assert "cost 4 vs baseline 5" in lines[2]  # carried over from the last evaluation
    assert "clip_frac=0.125" in lines[2]
    assert "eta" in lines[0] and "eta" not in lines[2]


def test_ci_forces_plain_on_a_tty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    out = FakeTTY()
    with Progress(2, stream=out) as progress:
        progress.update(0, reward_mean=1.0)
    assert progress.plain
    assert out.getvalue().startswith("iter 0  1/2 (50%)  reward 1")


def test_rich_bar_on_a_tty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    out = FakeTTY()
    with Progress(4, initial=1, stream=out, description="train") as progress:
        assert not progress.plain
        progress.update(1, transitions_per_s=1000.0, eval_cost=2.0, baseline_cost=2.5)
        progress.update(3, reward_mean=-1.0)
        progress.print("checkpoint saved")
    text = out.getvalue()
    assert progress.completed == 4
    assert "4/4" in text and "checkpoint saved" in text and "vs baseline" in text
    assert not text.startswith("iter ")


def test_resume_counts_from_initial(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    out = io.StringIO()
    with Progress(10, initial=4, stream=out) as progress:
        progress.update(4)
        progress.update(20)  # clamped to the total
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("iter 4  5/10 (50%)")
    assert lines[1].startswith("iter 20  10/10 (100%)")


def test_negative_total_rejected() -> None:
    with pytest.raises(ValueError):
        Progress(-1)
