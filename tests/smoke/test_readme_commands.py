"""The README's commands stay in step with the CLI: every `skurl ...` and `python -m
skurl.modes.ddp.learner ...` line it shows parses, and its --set keys and values load.
(Running them is the job of a fresh clone; docs/operations.md.)"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from skurl.cli import build_parser
from skurl.config import load_config
from skurl.modes.ddp.learner import build_parser as ddp_parser

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_commands() -> list[str]:
    """Command lines of the README's bash blocks and inline code, `$S` expanded, comments,
    `&` and line continuations dropped."""
    text = README.read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    lines = [ln for b in blocks for ln in b.replace("\\\n", " ").splitlines()]
    lines += re.findall(r"^`((?:skurl|python -m) [^`]+)`$", text, re.M)
    variables = dict(re.findall(r'^(\w+)="([^"]*)"$', "\n".join(lines), re.M))
    out = []
    for line in lines:
        line = line.split("  #")[0].strip().removesuffix("&").strip()
        for name, value in variables.items():
            line = line.replace(f"${name}", value)
        if line.startswith(("skurl ", "python -m skurl")):
            out.append(line)
    return out


def test_the_readme_shows_commands() -> None:
    commands = readme_commands()
    for expected in ("skurl train", "skurl export", "skurl snapshot", "skurl recommend", "skurl register",
                     "skurl serve-sim", "skurl collector", "python -m skurl.modes.ddp.learner"):
        assert any(c.startswith(expected) for c in commands), (expected, commands)


@pytest.mark.parametrize("line", readme_commands())
def test_a_readme_command_parses(line: str) -> None:
    argv = shlex.split(line)
    if argv[:2] == ["python", "-m"]:
        args = ddp_parser().parse_args(argv[3:])
    else:
        args = build_parser().parse_args(argv[1:])
    overrides = getattr(args, "overrides", [])
    if overrides:
        load_config(None, list(overrides))  # a key or value the config does not know fails here
