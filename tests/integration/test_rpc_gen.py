"""The checked-in generated code is what scripts/gen_protos.sh makes from skurl.proto."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GEN = ROOT / "src" / "skurl" / "rpc" / "gen"
# Lines stamped with the generator's version; a newer grpcio-tools may change them
# without changing the contract, which lives in the serialized descriptor and stubs.
_VERSION_STAMP = re.compile(r"Protobuf Python Version|GRPC_GENERATED_VERSION|^\s+\d+,$")


def _normalized(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if not _VERSION_STAMP.search(line)]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_generated_code_is_current(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools", reason="grpcio-tools (dev extra) regenerates the code")
    subprocess.run(["bash", str(ROOT / "scripts" / "gen_protos.sh"), str(tmp_path)], check=True,
                   env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"}, timeout=120)
    for name in ("skurl_pb2.py", "skurl_pb2.pyi", "skurl_pb2_grpc.py", "__init__.py"):
        assert _normalized(tmp_path / name) == _normalized(GEN / name), (
            f"src/skurl/rpc/gen/{name} is stale: run scripts/gen_protos.sh")


def test_generated_grpc_module_imports_package_relative() -> None:
    text = (GEN / "skurl_pb2_grpc.py").read_text()
    assert "from . import skurl_pb2 as skurl__pb2" in text
    assert "\nimport skurl_pb2" not in text
