"""Errors a user can cause. The CLI prints them as one line and exits with code 2.

A missing optional dependency is one of them: `require` (before the work starts) and the
CLI's catch-all (`missing_extra_of`) name the pyproject extra that installs it."""

from __future__ import annotations

import importlib.util

# Top-level module of an optional dependency -> the pyproject extra that installs it.
EXTRAS = {
    "onnx": "onnx", "onnxscript": "onnx", "onnx_ir": "onnx", "onnxruntime": "onnx",
    "mlflow": "mlflow", "ray": "ray", "gymnasium": "gym", "boto3": "s3", "botocore": "s3",
}


class UserError(Exception):
    """Bad input from a user: config, catalog file, CLI flag, request. One clear line."""


class ConfigError(UserError):
    """A config key or value is wrong; the message names the key and what was expected."""


class CatalogError(UserError):
    """A catalog row is wrong; the message names the SKU id and the field."""


class MissingExtra(UserError):
    """An optional dependency is not installed; the message names the extra to install."""


def missing_extra(module: str, what: str) -> MissingExtra:
    """The one-line error for `what` (a command or config key) needing `module`."""
    top = module.split(".")[0]
    extra = EXTRAS.get(top, top)
    return MissingExtra(f"{what}: the {top} package is not installed; expected "
                        f"pip install -c constraints.txt -e '.[{extra}]' (or pip install 'skurl[{extra}]')")


def require(*modules: str, what: str) -> None:
    """Raise `missing_extra` for the first of `modules` (top-level names) that is not
    installed, without importing any of them (a check before long work)."""
    for module in modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a broken or half-imported module counts as missing
            found = False
        if not found:
            raise missing_extra(module, what)


def missing_extra_of(exc: BaseException, what: str) -> MissingExtra | None:
    """The one-line error for a ModuleNotFoundError of an optional dependency; None for any
    other exception (a missing core module is a bug, shown with its traceback)."""
    name = getattr(exc, "name", None)
    if not isinstance(exc, ModuleNotFoundError) or not name or name.split(".")[0] not in EXTRAS:
        return None
    return missing_extra(name, what)
