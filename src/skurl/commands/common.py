"""Flags shared by several commands (--config, --set, --json) and their handling."""

from __future__ import annotations

import json
import sys
from typing import Any

from skurl.config_flags import add_config_flags, config_from_args
from skurl.json_ready import json_ready

__all__ = ["add_config_flags", "config_from_args", "print_json"]


def print_json(obj: Any) -> None:
    """One line of strict JSON: numpy values as Python ones, NaN and infinities as null."""
    json.dump(json_ready(obj, "output"), sys.stdout, indent=None, allow_nan=False)
    sys.stdout.write("\n")
