"""The `skurl` command: one subcommand per module in skurl.commands.

Each command module exposes `register(subparsers)`, which adds its parser and sets
`func`. Errors a user can cause (UserError) print one line and exit with code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import signal
import sys
import threading
from collections.abc import Iterator
from typing import NoReturn

from skurl.errors import UserError, missing_extra_of

# Imported lazily per invocation so `skurl --help` stays fast and a missing optional
# dependency of one command does not break the others.
COMMAND_MODULES = (
    "skurl.commands.config_cmd",
    "skurl.commands.catalog_cmd",
    "skurl.commands.eval_cmd",
    "skurl.commands.bench_cmd",
    "skurl.commands.train_cmd",
    "skurl.commands.serve_cmd",
    "skurl.commands.roles_cmd",
    "skurl.commands.ab_cmd",
    "skurl.commands.register_cmd",
    "skurl.commands.serve_cmds",
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2, no usage dump
        raise UserError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="skurl", description="RL replenishment policies for huge SKU catalogs")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue  # command not built yet
            raise
        module.register(sub)
    return parser


def one_line(text: str) -> str:
    """`text` with line breaks and other control characters escaped (a key or file name a
    user typed may hold them): the error stays one line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class Terminated(BaseException):
    """SIGTERM (a service manager, `kill`): unwound like Ctrl-C, so that every `finally`
    runs and the processes a command started (sim servers, collectors) are stopped
    instead of being orphaned."""


@contextlib.contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    command = "skurl"
    try:
        with _sigterm_unwinds():
            args = build_parser().parse_args(argv)
            command = f"skurl {args.command}"
            return int(args.func(args) or 0)
    except UserError as exc:
        print(f"error: {one_line(str(exc))}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:  # an optional dependency: name its extra, no traceback
        missing = missing_extra_of(exc, command)
        if missing is None:
            raise
        print(f"error: {one_line(str(missing))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print("terminated", file=sys.stderr)
        return 143


if __name__ == "__main__":
    sys.exit(main())
