"""`skurl config show|keys`: the resolved config, and every key with its help."""

from __future__ import annotations

import argparse

import yaml

from skurl.commands.common import add_config_flags, config_from_args, embedded_overrides
from skurl.config import Config, config_to_dict
from skurl.config.loader import describe


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("config", help="show the resolved config or list every key")
    cmds = p.add_subparsers(dest="config_command", required=True)
    show = cmds.add_parser("show", help="print the resolved config as YAML (without --config: the "
                           "embedded defaults of `skurl train`)")
    add_config_flags(show)
    show.set_defaults(func=_show)
    keys = cmds.add_parser("keys", help="list every config key with its type, default and help")
    keys.set_defaults(func=_keys)


def _show(args: argparse.Namespace) -> int:
    cfg = config_from_args(args, embedded=True)
    if not args.config:  # say which defaults these are (a YAML comment: the output stays loadable)
        print("# the embedded defaults of a bare `skurl train` (no --config): the key defaults "
              f"(`skurl config keys`) with {' '.join(embedded_overrides())}")
    print(yaml.safe_dump(config_to_dict(cfg), sort_keys=False), end="")
    return 0


def _keys(args: argparse.Namespace) -> int:
    for key, tp, default, help_text in describe(Config):
        print(f"{key} ({tp}, default {default!r}): {help_text}")
    return 0
