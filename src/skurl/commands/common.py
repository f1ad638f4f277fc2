"""Flags shared by several commands (--config, --set, --json) and their handling."""

from __future__ import annotations

import argparse
import json
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


def config_from_args(args: argparse.Namespace, extra: list[str] | None = None) -> Config:
    """Config from --config/--set, then `extra` overrides derived from other flags."""
    return load_config(args.config, list(args.overrides) + list(extra or []))


def print_json(obj: Any) -> None:
    """One line of strict JSON: numpy values as Python ones, NaN and infinities as null."""
    json.dump(json_ready(obj, "output"), sys.stdout, indent=None, allow_nan=False)
    sys.stdout.write("\n")
