"""Generic loading of nested frozen dataclasses from YAML + `--set a.b=value` overrides.

Every field carries its help text in `metadata["help"]` (see `opt`); `describe` turns
those into the `skurl config keys` listing. Values are coerced from their declared
type, so `--set sim.days=50` and YAML `days: 50` give the same config, and anything
that does not fit fails with one line naming the key, the value and what was expected.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar, get_args, get_origin, get_type_hints

import yaml

from skurl.errors import ConfigError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")


def opt(default: Any, help: str) -> Any:
    """A dataclass field with a default and help text (shown by `skurl config keys`)."""
    if isinstance(default, list):
        # Lists are stored as tuples, as loading produces them: configs stay hashable and equal.
        return dataclasses.field(default=tuple(default), metadata={"help": help})
    if isinstance(default, (dict, set)):
        value = default
        return dataclasses.field(default_factory=lambda: type(value)(value), metadata={"help": help})
    if dataclasses.is_dataclass(default):
        cls = type(default)
        return dataclasses.field(default_factory=cls, metadata={"help": help})
    return dataclasses.field(default=default, metadata={"help": help})


def section(cls: type, help: str) -> Any:
    """A nested config section with its own defaults."""
    return dataclasses.field(default_factory=cls, metadata={"help": help})


@functools.cache
def _hints(cls: type[DataclassInstance]) -> dict[str, Any]:
    """Resolved field types of a config dataclass (typing.get_type_hints re-evaluates the
    annotations on every call: most of the time of a --set)."""
    return get_type_hints(cls)


def _expected(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_expected(a) for a in get_args(tp))
    if origin is list:
        return f"a list of {_expected(get_args(tp)[0])}"
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", str(tp))


def _coerce(key: str, value: Any, tp: Any) -> Any:
    """Convert `value` (from YAML or a --set string) to type `tp`, or raise ConfigError."""
    origin = get_origin(tp)
    bad = ConfigError(f"config key '{key}': got {value!r}, expected {_expected(tp)}")
    if origin in (typing.Union, types.UnionType):
        args = get_args(tp)
        is_null = value is None or (isinstance(value, str) and value.lower() in ("null", "none", ""))
        if is_null and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(key, value, arg)
            except ConfigError:
                continue
        raise bad
    if origin is Literal:
        choices = get_args(tp)
        if value in choices:
            return value
        raise bad
    if origin is list:
        (item_tp,) = get_args(tp)
        if isinstance(value, str):
            try:
                value = yaml.safe_load(value) if value.strip().startswith("[") else value.split(",")
            except yaml.YAMLError:  # e.g. an unclosed list: '[256,256'
                raise bad from None
        if not isinstance(value, (list, tuple)):
            raise bad
        return tuple(_coerce(f"{key}[{i}]", v, item_tp) for i, v in enumerate(value))
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "1", "yes", "on"):
            return True
        if isinstance(value, str) and value.lower() in ("false", "0", "no", "off"):
            return False
        raise bad
    if tp is int:
        if isinstance(value, bool):
            raise bad
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.replace("_", ""))
            except ValueError:
                try:
                    f = float(value)
                except ValueError:
                    raise bad from None
                if f.is_integer():
                    return int(f)
        raise bad
    if tp is float:
        if isinstance(value, bool):
            raise bad
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                raise bad from None
        raise bad
    if tp is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise bad
    raise ConfigError(f"config key '{key}': unsupported type {tp!r}")


def build(cls: type[T], data: dict[str, Any] | None, prefix: str = "") -> T:
    """Build dataclass `cls` from a nested dict; unknown keys are errors."""
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise ConfigError(f"config key '{prefix.rstrip('.') or '<root>'}': expected a mapping, got {data!r}")
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        key = prefix + str(unknown[0])
        raise ConfigError(
            f"unknown config key '{key}' (expected one of: {', '.join(sorted(fields))})"
        )
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        tp = hints[name]
        key = prefix + name
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            kwargs[name] = build(tp, value, key + ".")
        else:
            kwargs[name] = _coerce(key, value, tp)
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"config section '{prefix.rstrip('.') or '<root>'}': {exc}") from None


def to_dict(obj: Any) -> Any:
    """Plain nested dict (tuples become lists) for YAML/JSON output."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, tuple):
        return [to_dict(v) for v in obj]
    return obj


def apply_overrides(data: dict[str, Any], overrides: list[str], cls: type[DataclassInstance]) -> dict[str, Any]:
    """Apply `a.b=value` strings onto a nested dict, checking each key path against `cls`."""
    out = _deepcopy(data)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set '{item}': expected key=value, e.g. sim.days=50")
        key, raw = item.split("=", 1)
        key = key.strip()
        parts = key.split(".")
        node = out
        section_cls = cls
        for i, part in enumerate(parts):
            names = {f.name for f in dataclasses.fields(section_cls)}
            if part not in names:
                where = ".".join(parts[: i + 1])
                raise ConfigError(
                    f"unknown config key '{where}' (expected one of: {', '.join(sorted(names))})"
                )
            tp = _hints(section_cls)[part]
            if i == len(parts) - 1:
                if dataclasses.is_dataclass(tp):
                    raise ConfigError(f"--set '{key}': is a section, set one of its keys")
                node[part] = raw
            else:
                if not (isinstance(tp, type) and dataclasses.is_dataclass(tp)):
                    raise ConfigError(f"--set '{key}': '{'.'.join(parts[: i + 1])}' is not a section")
                child = node.get(part)
                if child is None:
                    child = node[part] = {}
                elif not isinstance(child, dict):
                    raise ConfigError(f"config key '{'.'.join(parts[: i + 1])}': expected a mapping")
                node = child
                section_cls = tp
    return out


def _deepcopy(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _deepcopy(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_deepcopy(v) for v in data]
    return data


class _DuplicateKey(Exception):
    def __init__(self, key: object, line: int) -> None:
        super().__init__(key)
        self.key, self.line = key, line


class _BadKey(Exception):
    def __init__(self, key: object, line: int) -> None:
        super().__init__(key)
        self.key, self.line = key, line


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a mapping with a repeated key (PyYAML keeps the last one)
    or with a key that is not a scalar (`? [a, b]`: a list or mapping cannot name a key)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor`: its keys may be overridden
                continue
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, str | int | float | bool | None):
                raise _BadKey(key, key_node.start_mark.line + 1)
            if key in seen:
                raise _DuplicateKey(key, key_node.start_mark.line + 1)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file '{p}': not found")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file '{p}': byte {exc.start} is not UTF-8; expected a YAML text file") from None
    except OSError as exc:
        raise ConfigError(f"config file '{p}': cannot be read ({exc.strerror})") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass: no arbitrary objects
    except _DuplicateKey as exc:
        raise ConfigError(f"config file '{p}' line {exc.line}: key '{exc.key}' appears twice "
                          "(the second would silently win); expected each key once") from None
    except _BadKey as exc:
        raise ConfigError(f"config file '{p}' line {exc.line}: a key is a {type(exc.key).__name__}; "
                          "expected a plain name such as 'sim'") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"config file '{p}'{where}: not valid YAML") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file '{p}': expected a mapping at the top level")
    return data


def describe(cls: type[DataclassInstance], prefix: str = "") -> list[tuple[str, str, Any, str]]:
    """(key, type, default, help) for every leaf field, in declaration order."""
    rows: list[tuple[str, str, Any, str]] = []
    hints = get_type_hints(cls)
    default = cls()
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        key = prefix + f.name
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            rows.extend(describe(tp, key + "."))
        else:
            rows.append((key, _expected(tp), to_dict(getattr(default, f.name)), f.metadata.get("help", "")))
    return rows


def check(cond: bool, key: str, value: object, expected: str) -> None:
    """Validation helper for __post_init__: one line naming key, value and expectation."""
    if not cond:
        raise ConfigError(f"config key '{key}': got {value!r}, expected {expected}")


# Seeds go to numpy, torch.manual_seed (a signed 64-bit value) and the simulator's counters.
MAX_SEED = 2**62


def check_seed(value: int, key: str) -> None:
    check(0 <= value <= MAX_SEED, key, value, "an integer in [0, 2^62]")
