"""The ready-made configs in configs/ load, and configs/default.yaml documents every default.

configs/default.yaml is rendered from the config dataclasses (values + help text). When a
key is added or a default changes, regenerate it with:

    .venv/bin/python tests/unit/test_config_files.py
"""

from __future__ import annotations

import dataclasses
import sys
import textwrap
from pathlib import Path
from typing import Any, get_type_hints

import pytest
import yaml

from skurl.catalog import load_catalog
from skurl.config import Config, config_to_dict, load_config
from skurl.config_loader import describe, read_yaml

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
DEFAULT = CONFIGS / "default.yaml"
REGENERATE = "regenerate it: .venv/bin/python tests/unit/test_config_files.py"


def _scalar(value: Any) -> str:
    return yaml.safe_dump([value], default_flow_style=True, width=10_000).strip()[1:-1]


def _render(cls: type, indent: str = "") -> list[str]:
    lines: list[str] = []
    hints = get_type_hints(cls)
    defaults = cls()
    for f in dataclasses.fields(cls):
        width = 100 - len(indent) - 2
        lines += [f"{indent}# {text}" for text in textwrap.wrap(f.metadata.get("help", ""), width)]
        if dataclasses.is_dataclass(hints[f.name]):
            lines.append(f"{indent}{f.name}:")
            lines += _render(hints[f.name], indent + "  ")
        else:
            lines.append(f"{indent}{f.name}: {_scalar(config_to_dict(getattr(defaults, f.name)))}")
    return lines


def render_default_yaml() -> str:
    head = [
        "# Every skurl setting with its default value (generated from src/skurl/config.py by",
        "# tests/unit/test_config_files.py; loading this file is the same as loading no file).",
        "# Copy it, keep the keys you change. Override one key on the command line with",
        "# --set section.key=value, e.g. --set sim.days=50.",
        "",
    ]
    body: list[str] = []
    for f in dataclasses.fields(Config):
        body += [f"# {f.metadata.get('help', '')}", f"{f.name}:"]
        body += _render(get_type_hints(Config)[f.name], "  ")
        body.append("")
    return "\n".join(head + body).rstrip() + "\n"


def _flat_keys(data: dict[str, Any], prefix: str = "") -> set[str]:
    keys: set[str] = set()
    for k, v in data.items():
        if isinstance(v, dict):
            keys |= _flat_keys(v, f"{prefix}{k}.")
        else:
            keys.add(prefix + k)
    return keys


def test_default_yaml_loads_to_the_defaults() -> None:
    assert config_to_dict(load_config(DEFAULT)) == config_to_dict(Config()), REGENERATE


def test_default_yaml_documents_every_key() -> None:
    in_file = _flat_keys(read_yaml(DEFAULT))
    every = {key for key, _, _, _ in describe(Config)}
    assert in_file == every, f"configs/default.yaml differs in {sorted(in_file ^ every)}; {REGENERATE}"
    text = DEFAULT.read_text()
    assert text.count("\n# ") + text.count("  # ") >= len(every)  # a help comment per key


def test_uniform_yaml_is_a_textbook_instance() -> None:
    cfg = load_config(CONFIGS / "uniform.yaml")
    assert cfg.catalog.kind == "uniform" and cfg.catalog.demand.dist == "poisson"
    assert cfg.sim.reward == "cost" and cfg.policy.actions.kind == "units"
    cat = load_catalog(cfg.catalog)
    assert len(cat) == cfg.catalog.skus
    assert (cat.demand_mean == cfg.catalog.demand.mean).all()
    assert (cat.lead_time == cfg.catalog.lead_time).all() and (cat.group == -1).all()


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_config_file_loads(path: Path) -> None:
    load_config(path)


if __name__ == "__main__":
    DEFAULT.write_text(render_default_yaml())
    print(f"wrote {DEFAULT}", file=sys.stderr)
