"""--config and --set on any argparse parser (the `skurl` commands and the torchrun
learner, `python -m skurl.modes.ddp.learner`, alike)."""

from __future__ import annotations

import argparse

from skurl.config import Config, load_config


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="YAML config file (defaults are embedded)")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override a config key, e.g. --set sim.days=50 (repeatable)",
    )


def config_from_args(args: argparse.Namespace, extra: list[str] | None = None, *,
                     base: list[str] | tuple[str, ...] = ()) -> Config:
    """Config from --config/--set, then `extra` overrides derived from other flags;
    `base` overrides go first (defaults that --set may change)."""
    return load_config(args.config, [*base, *args.overrides, *(extra or [])])
