"""Property-based sweep of user input (hypothesis): `--set` strings, YAML config files and
catalog rows, through the `skurl` entry function in-process. Every input either works
(exit 0) or gives exit 2 and exactly one line naming the key (or the SKU and field);
never a traceback. Each example runs a command that fails fast (no simulation)."""

from __future__ import annotations

import contextlib
import io
import math
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from skurl.catalog.io import EXPECTED_NAMES, REQUIRED
from skurl.cli import main
from skurl.config import Config
from skurl.config.loader import describe

KEYS = [row[0] for row in describe(Config)]
SETTINGS = settings(max_examples=200, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow])


def run(argv: list[str]) -> tuple[int, str]:
    """(exit code, stderr) of `skurl ARGV`; an exception escaping main is a failure."""
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            rc = main(argv)
        except SystemExit as exc:  # argparse's --help and the like
            rc = exc.code if isinstance(exc.code, int) else 2
    return rc, err.getvalue()


def one_line_naming(rc: int, err: str, names: list[str]) -> None:
    assert rc in (0, 2), (rc, err)
    assert "Traceback" not in err, err
    if rc == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), err
        assert any(name in lines[0] for name in names), (names, err)


def scalar_text() -> st.SearchStrategy[str]:
    numbers = st.one_of(st.integers(-10**12, 10**12), st.floats(allow_nan=True, allow_infinity=True))
    return st.one_of(
        numbers.map(str),
        st.sampled_from(["", "null", "true", "off", "nan", "-inf", "1e400", "[", "[1,2", "[1, 2]", "[[1]]",
                         "{a: 1}", "1_000", "0x10", "uniform", "file", "cover", "bf16", "auto", "cuda:x",
                         "]", "a,b", "- 1", "'", "\"", "!!python/object:os.system", "&a", "*a"]),
        st.lists(numbers, max_size=3).map(lambda v: "[" + ",".join(map(str, v)) + "]"),
        st.text(max_size=12),
    )


@SETTINGS
@given(key=st.one_of(st.sampled_from(KEYS), st.text(max_size=10)), value=scalar_text())
@example(key="policy.actions.n", value="366189970790")  # once built a 2.9 TB grid before its error
def test_set_strings(key: str, value: str) -> None:
    rc, err = run(["config", "show", "--set", f"{key}={value}"])
    # A cross-key check names the key it guards (policy.actions.z_max for a z_min beyond it).
    one_line_naming(rc, err, [key, "--set", *KEYS, "config key"])


def yaml_value() -> st.SearchStrategy[object]:
    leaf = st.one_of(st.none(), st.booleans(), st.integers(-10**9, 10**9), st.floats(), st.text(max_size=6))
    return st.recursive(leaf, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                      st.dictionaries(st.text(max_size=4), inner, max_size=2)),
                        max_leaves=4)


@SETTINGS
@given(pairs=st.lists(st.tuples(st.sampled_from(KEYS), yaml_value()), min_size=1, max_size=3))
def test_config_files(pairs: list[tuple[str, object]]) -> None:
    data: dict = {}
    for key, value in pairs:
        node = data
        *sections, leaf = key.split(".")
        for part in sections:
            node = node.setdefault(part, {}) if isinstance(node.get(part, {}), dict) else {}
        node[leaf] = value
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.yaml"
        path.write_text(yaml.safe_dump(data))
        rc, err = run(["config", "show", "--config", str(path)])
    one_line_naming(rc, err, [*KEYS, "config key", "config file"])


def cell() -> st.SearchStrategy[str]:
    return st.one_of(
        st.integers(-5, 100).map(str),
        st.floats(allow_nan=True, allow_infinity=True).map(lambda f: repr(f) if math.isfinite(f) else str(f)),
        st.sampled_from(["", " 2", "2.0", "1e9", "1e40", "-0", "poisson", "NegBin", "x", "3.5"]),
    )


@SETTINGS
@given(extra=st.lists(st.sampled_from([n for n in EXPECTED_NAMES if n not in REQUIRED]), max_size=4, unique=True),
       rows=st.lists(st.lists(cell(), min_size=12, max_size=12), min_size=1, max_size=3))
def test_catalog_rows(extra: list[str], rows: list[list[str]]) -> None:
    names = [*REQUIRED, *extra]
    lines = [",".join(names)] + [",".join(row[: len(names)]) for row in rows]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.csv"
        path.write_text("\n".join(lines) + "\n")
        rc, err = run(["catalog", "validate", str(path)])
    # A row error names the SKU (or the row before ids are known) and the column or field.
    one_line_naming(rc, err, [f"'{name}'" for name in names] + ["season_"])
    if rc == 2:
        assert any(word in err for word in ("SKU", "row", "column")), err
