"""skurl's import graph, read from the source (every import, nested and TYPE_CHECKING ones
too): no cycle between modules or between packages, and the cores (sim, collect, buffer,
learn, policy) import nothing of the outer parts (rpc, store, sync, modes, commands)."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
CORES = ("sim", "collect", "buffer", "learn", "policy")
OUTER = ("rpc", "store", "sync", "modes", "commands")


def module_graph(src: Path) -> nx.DiGraph:
    """skurl module -> the skurl modules it imports (generated code under gen/ left out)."""
    files = {}
    for f in (src / "skurl").rglob("*.py"):
        if "gen" not in f.parts:
            files[".".join(f.relative_to(src).with_suffix("").parts).removesuffix(".__init__")] = f
    graph = nx.DiGraph()
    graph.add_nodes_from(files)
    for name, f in files.items():
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            graph.add_edges_from((name, t) for t in targets if t in files and t != name)
    return graph


def package(module: str) -> str:
    """skurl.learn.ddp -> learn, skurl.config (a package's __init__) -> config; a top-level
    module (skurl.cli) is its own package."""
    parts = module.split(".")
    return parts[1] if len(parts) >= 2 else module


def package_graph(modules: nx.DiGraph) -> nx.DiGraph:
    graph = nx.DiGraph()
    graph.add_nodes_from({package(m) for m in modules})
    graph.add_edges_from((package(a), package(b)) for a, b in modules.edges if package(a) != package(b))
    return graph


def cycles(graph: nx.DiGraph) -> list[list[str]]:
    return sorted(sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1)


@pytest.fixture(scope="module")
def modules() -> nx.DiGraph:
    return module_graph(SRC)


def test_no_module_cycles(modules: nx.DiGraph) -> None:
    assert cycles(modules) == []


def test_no_package_cycles(modules: nx.DiGraph) -> None:
    assert cycles(package_graph(modules)) == []


def test_cores_import_no_outer_part(modules: nx.DiGraph) -> None:
    bad = sorted((a, b) for a, b in modules.edges if package(a) in CORES and package(b) in OUTER)
    assert bad == []


def test_the_checks_see_a_cycle_and_an_outer_import(tmp_path: Path) -> None:
    """The graph catches what the tests above forbid (so their passing means something)."""
    files = {"__init__.py": "", "learn/__init__.py": "", "policy/__init__.py": "", "store/__init__.py": "",
             "store/api.py": "", "learn/ddp.py": "from skurl.policy.nets import X\nimport skurl.store.api\n",
             "policy/nets.py": "def f():\n    from skurl.learn.ddp import Y\n"}  # a nested import counts
    for name, text in files.items():
        path = tmp_path / "skurl" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    graph = module_graph(tmp_path)
    assert cycles(graph) == [["skurl.learn.ddp", "skurl.policy.nets"]]
    assert cycles(package_graph(graph)) == [["learn", "policy"]]
    assert ("skurl.learn.ddp", "skurl.store.api") in graph.edges
