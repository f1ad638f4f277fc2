"""Flags shared by several commands (--config, --set, --json) and their handling."""

from __future__ import annotations

import argparse
import json
import math
import sys

from skurl.config import Config
from skurl.config.flags import add_config_flags
from skurl.config.flags import config_from_args as flags_config
from skurl.json_ready import json_ready

__all__ = ["add_config_flags", "config_from_args", "print_json", "seconds"]


def seconds(text: str) -> float:
    """argparse type of a duration flag: a finite number >= 0 (nan and inf are refused
    here, before any work, not by time.sleep deep inside a run)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"got {text!r}, expected a finite number of seconds >= 0")
    return value


def config_from_args(args: argparse.Namespace, extra: list[str] | None = None, *,
                     embedded: bool = False) -> Config:
    """Config from --config/--set, then `extra` overrides derived from other flags. With
    `embedded` and no --config, on the embedded defaults of a bare `skurl train`, so that
    `config show`, `eval` and `catalog describe` see the catalog `train` trains on."""
    base = embedded_overrides() if embedded and not args.config else []
    return flags_config(args, extra, base=base)


def embedded_overrides() -> list[str]:
    """The --set keys a bare `skurl train` applies on top of the class defaults."""
    from skurl.commands.embedded import EMBEDDED, EMBEDDED_GRID

    return [*EMBEDDED, *EMBEDDED_GRID]


def print_json(obj: object) -> None:
    """One line of strict JSON: numpy values as Python ones, NaN and infinities as null."""
    json.dump(json_ready(obj, "output"), sys.stdout, indent=None, allow_nan=False)
    sys.stdout.write("\n")
