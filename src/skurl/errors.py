"""Errors a user can cause. The CLI prints them as one line and exits with code 2."""

from __future__ import annotations


class UserError(Exception):
    """Bad input from a user: config, catalog file, CLI flag, request. One clear line."""


class ConfigError(UserError):
    """A config key or value is wrong; the message names the key and what was expected."""


class CatalogError(UserError):
    """A catalog row is wrong; the message names the SKU id and the field."""
