"""The repository's docs stand on their own: nothing cites a file outside it (DESIGN,
../shared), module docstrings stay short, and the README is a short guide that links
every page of docs/ (docs/architecture.md, Conventions)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_MODULE_DOCSTRING = 12
MAX_README = 120
SUFFIXES = {".py", ".md", ".proto", ".yaml", ".yml", ".toml", ".txt", ".sh", ".cfg"}
# The words this test looks for, spelt so that this file does not hold them itself.
OUTSIDE = (re.compile("DESI" + "GN"), re.compile(r"\.\./" + "shared"))


def text_files() -> list[Path]:
    roots = [ROOT / name for name in ("src", "tests", "benchmarks", "scripts", "docs")]
    files = [p for root in roots for p in root.rglob("*")
             if p.is_file() and p.suffix in SUFFIXES and "__pycache__" not in p.parts]
    return [*files, ROOT / "README.md"]


def module_docstring_lines(path: Path) -> int:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    first = tree.body[0] if tree.body else None
    if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)):
        return 0
    return int(first.end_lineno or first.lineno) - first.lineno + 1


def test_nothing_cites_a_file_outside_the_repository() -> None:
    hits = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
            for p in text_files() if p.resolve() != Path(__file__).resolve()
            for n, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
            if any(pattern.search(line) for pattern in OUTSIDE)]
    assert not hits, "cite docs/*.md instead:\n" + "\n".join(hits)


def test_module_docstrings_are_short() -> None:
    long = {str(p.relative_to(ROOT)): n for p in sorted((ROOT / "src" / "skurl").rglob("*.py"))
            if "gen" not in p.relative_to(ROOT / "src" / "skurl").parts
            and (n := module_docstring_lines(p)) > MAX_MODULE_DOCSTRING}
    assert not long, f"module docstrings over {MAX_MODULE_DOCSTRING} lines (move the essay to docs/): {long}"


def test_the_counter_counts(tmp_path: Path) -> None:
    """The checks above can fail: a 13-line module docstring and a DESIGN citation are seen."""
    module = tmp_path / "m.py"
    module.write_text('"""' + "\n".join(f"line {i}" for i in range(13)) + '"""\n\nx = 1\n')
    assert module_docstring_lines(module) == 13
    module.write_text("x = 1\n")
    assert module_docstring_lines(module) == 0
    assert any(p.search("see " + "DESI" + "GN section 3") for p in OUTSIDE)


def test_readme_is_short() -> None:
    lines = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_README, f"README.md has {lines} lines; move detail to docs/"


def readme_links() -> set[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return set(re.findall(r"\]\((docs/[^)#\s]+\.md)[^)]*\)", text))


@pytest.mark.parametrize("page", sorted(p.name for p in (ROOT / "docs").glob("*.md")))
def test_readme_links_every_doc(page: str) -> None:
    assert f"docs/{page}" in readme_links(), f"README.md does not link docs/{page}"


def test_every_link_of_the_readme_exists() -> None:
    missing = sorted(link for link in readme_links() if not (ROOT / link).is_file())
    assert not missing, f"README.md links missing pages: {missing}"
