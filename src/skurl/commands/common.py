"""Flags shared by several commands (--config, --set, --json) and their handling."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from skurl.config import Config, load_config


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
    json.dump(obj, sys.stdout, indent=None, default=_jsonable)
    sys.stdout.write("\n")


def _jsonable(value: Any) -> Any:
    import numpy as np

    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")
