"""Flags shared by several commands (--config, --set, --json) and their handling."""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from skurl.config import Config, load_config
from skurl.json_ready import json_ready


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="YAML config file (defaults are embedded)")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override a config key, e.g. --set sim.days=50 (repeatable)",
    )


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
    return load_config(args.config, [*base, *args.overrides, *(extra or [])])


def embedded_overrides() -> list[str]:
    """The --set keys a bare `skurl train` applies on top of the class defaults."""
    from skurl.commands.train_cmd import (  # lazily: train_cmd imports this module
        EMBEDDED,
        EMBEDDED_GRID,
    )

    return [*EMBEDDED, *EMBEDDED_GRID]


def print_json(obj: Any) -> None:
    """One line of strict JSON: numpy values as Python ones, NaN and infinities as null."""
    json.dump(json_ready(obj, "output"), sys.stdout, indent=None, allow_nan=False)
    sys.stdout.write("\n")
