"""`skurl config show|keys`: the resolved config, and every key with its help."""

from __future__ import annotations

import argparse

import yaml

from skurl.commands.common import add_config_flags, config_from_args
from skurl.config import Config, config_to_dict
from skurl.config_loader import describe


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("config", help="show the resolved config or list every key")
    cmds = p.add_subparsers(dest="config_command", required=True)
    show = cmds.add_parser("show", help="print the resolved config as YAML")
    add_config_flags(show)
    show.set_defaults(func=_show)
    keys = cmds.add_parser("keys", help="list every config key with its type, default and help")
    keys.set_defaults(func=_keys)


def _show(args: argparse.Namespace) -> int:
    print(yaml.safe_dump(config_to_dict(config_from_args(args)), sort_keys=False), end="")
    return 0


def _keys(args: argparse.Namespace) -> int:
    for key, tp, default, help_text in describe(Config):
        print(f"{key} ({tp}, default {default!r}): {help_text}")
    return 0
