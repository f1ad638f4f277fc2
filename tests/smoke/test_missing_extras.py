"""A command whose optional dependency is missing prints one line naming the extra to
install and exits 2, never a traceback. Each case runs `skurl` in a fresh interpreter with
the module hidden (sys.modules[name] = None makes `import name` fail as if uninstalled)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from skurl import cli, errors

SRC = Path(__file__).resolve().parents[2] / "src"


def run_without(hidden: list[str], args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    code = ("import sys\n"
            f"for name in {hidden!r}: sys.modules[name] = None\n"
            "from skurl.cli import main\n"
            f"sys.exit(main({args!r}))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


@pytest.mark.parametrize(("hidden", "args", "expected"), [
    (["onnx"], ["export", "--run", "runs/none"], ["skurl export", "the onnx package", ".[onnx]"]),
    (["onnxscript"], ["export", "--run", "runs/none"], ["skurl export", "onnxscript", ".[onnx]"]),
    (["onnx"], ["register", "--run", "runs/none", "--name", "m"], ["skurl register", ".[onnx]"]),
    (["mlflow"], ["register", "--run", "runs/none", "--name", "m"], ["skurl register", ".[mlflow]"]),
    (["onnxruntime"], ["recommend", "--model", "m.onnx", "--state", "s.parquet", "--out", "o.parquet"],
     ["skurl recommend --model", ".[onnx]"]),
    (["ray"], ["train", "--mode", "ray", "--iterations", "1"], ["--mode ray", ".[ray]"]),
])
def test_missing_extra_is_one_line(tmp_path: Path, hidden: list[str], args: list[str],
                                   expected: list[str]) -> None:
    line = one_line(run_without(hidden, args, tmp_path))
    for text in expected:
        assert text in line, line


def test_the_cli_names_the_extra_of_any_late_import(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """The catch-all in cli.main: a missing optional module met deep inside a command."""
    import skurl.serve.export as export

    def needs_onnxruntime(*_: object, **__: object) -> None:
        import onnxruntime  # noqa: F401

    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    monkeypatch.setattr(errors, "require", lambda *_, **__: None)
    monkeypatch.setattr(export, "export_run", needs_onnxruntime)
    assert cli.main(["export", "--run", "runs/none"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "skurl export" in err and ".[onnx]" in err, err


def test_a_missing_core_module_is_not_hidden() -> None:
    """Only optional dependencies become a one-line error; anything else is a bug."""
    assert errors.missing_extra_of(ModuleNotFoundError("x", name="numpy"), "skurl x") is None
    assert errors.missing_extra_of(ModuleNotFoundError("x", name="boto3"), "skurl x") is not None


def test_s3_store_without_boto3(monkeypatch: pytest.MonkeyPatch) -> None:
    from skurl.store import s3

    monkeypatch.setitem(sys.modules, "boto3", None)
    with pytest.raises(errors.MissingExtra, match=r"store.url 's3://b/p'.*\.\[s3\]"):
        s3._make_client("s3://b/p", None, 1.0)


def test_require_finds_installed_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    errors.require("json", "numpy", what="nothing")  # installed: no error
    monkeypatch.setitem(sys.modules, "gymnasium", None)
    with pytest.raises(errors.MissingExtra, match=r"^x: the gymnasium package .*\.\[gym\]"):
        errors.require("json", "gymnasium", what="x")
