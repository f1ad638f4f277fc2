"""Plain JSON values from results that hold numpy types and non-finite floats.

JSON has no NaN or infinity (Python's json writes them as bare NaN/Infinity, which strict
parsers reject), so a figure that does not exist (the standard error of one draw) is null.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np


def json_ready(value: object, where: str = "value") -> Any:
    """JSON-ready copy: numpy scalars/arrays to Python, non-finite floats to null; `where`
    names the value in the error for a type JSON cannot hold."""
    if isinstance(value, Mapping):
        return {str(k): json_ready(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list | tuple | np.ndarray):
        return [json_ready(v, where) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise TypeError(f"{where}: not JSON-serializable ({type(value).__name__})")


def read_json_or_none(path: Path) -> Any:
    """The JSON in `path`, or None when absent or unreadable (a cache or marker file that
    is simply redone without it)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
