"""The source tree's layout (issue 38): each mode in its own place under modes/, wiring
files small, and only the entry point and a few shared helpers at the top of the package."""

from __future__ import annotations

from pathlib import Path

SKURL = Path(__file__).resolve().parents[2] / "src" / "skurl"
TOP_LEVEL = {"__init__", "_jit_cache", "atomic", "cli", "errors", "json_ready"}
WIRING = ("modes/colocated.py", "modes/decoupled/wiring.py", "modes/ray/wiring.py", "modes/ddp/learner.py")


def test_top_level_modules_are_the_entry_point_and_shared_helpers() -> None:
    assert {p.stem for p in SKURL.glob("*.py")} == TOP_LEVEL


def test_each_mode_lives_under_modes() -> None:
    for gone in ("deploy", "remote", "raycluster"):  # the old homes of the modes' parts
        assert not (SKURL / gone).exists(), gone
    assert {p.name for p in (SKURL / "modes").iterdir() if p.is_dir() and p.name != "__pycache__"} == \
        {"decoupled", "ray", "ddp"}
    assert not list((SKURL / "rpc").glob("collector_*.py"))  # rpc/ keeps the transport only


def test_wiring_files_are_at_most_150_lines() -> None:
    for path in WIRING:
        lines = len((SKURL / path).read_text().splitlines())
        assert lines <= 150, f"{path}: {lines} lines"


# Where a Trainer may be named: the loop itself, the one start/resume place, the catalog
# change's resume, and wiring files that run a learner over running collectors.
MAY_BUILD_TRAINER = {"train/loop.py", "train/run.py", "train/catalog_change.py",
                     "modes/decoupled/wiring.py", "modes/ddp/learner.py"}


def test_no_part_module_imports_the_trainer() -> None:
    """Parts are built from the run's core and learner (train/mode.py, the Mode protocol);
    none takes or keeps the Trainer."""
    for path in SKURL.rglob("*.py"):
        rel = path.relative_to(SKURL).as_posix()
        text = path.read_text(encoding="utf-8")
        if rel not in MAY_BUILD_TRAINER:
            assert "import Trainer" not in text and "Trainer," not in text and "TrainerView" not in text, rel

