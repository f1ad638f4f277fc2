"""Shared fixtures: addresses of the servers that integration and contract tests need.

Redis and an S3-compatible server (moto_server) come from, in order:
1. SKURL_TEST_REDIS_URL / SKURL_TEST_S3_ENDPOINT (set by .ci/run via scripts/ci_services.sh);
2. otherwise a private instance started here on a free loopback port when the binary is
   installed (`redis-server` on PATH, `moto_server` in the venv), so plain `pytest` works;
3. otherwise the test is skipped, saying what is missing.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REDIS_ENV = "SKURL_TEST_REDIS_URL"
S3_ENV = "SKURL_TEST_S3_ENDPOINT"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(ready: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not become ready within {timeout_s:.0f} s")


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class RedisProcess:
    """A redis-server this test session owns: stop() and start() keep the same port."""

    binary: str
    port: int
    workdir: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        log = open(self.workdir / "redis.log", "ab")  # noqa: SIM115 - lives with the process
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.workdir), "--protected-mode", "no"],
            stdout=log, stderr=subprocess.STDOUT,
        )
        wait_until(lambda: _port_open(self.port), 10, f"redis-server on port {self.port}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None
        wait_until(lambda: not _port_open(self.port), 10, f"redis-server on port {self.port} to stop")


def redis_binary() -> str | None:
    return shutil.which("redis-server")


def moto_binary() -> str | None:
    venv_bin = Path(sys.executable).parent / "moto_server"
    return str(venv_bin) if venv_bin.exists() else shutil.which("moto_server")


@pytest.fixture
def redis_process(tmp_path: Path) -> Iterator[RedisProcess]:
    """A private redis-server the test may stop and restart (needs the binary)."""
    binary = redis_binary()
    if binary is None:
        pytest.skip("needs the redis-server binary (apt-get install redis-server)")
    server = RedisProcess(binary, free_port(), tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a Redis server shared by the session (tests use unique keys)."""
    if os.environ.get(REDIS_ENV):
        yield os.environ[REDIS_ENV]
        return
    binary = redis_binary()
    if binary is None:
        pytest.skip(f"needs Redis: set {REDIS_ENV} or install redis-server")
    server = RedisProcess(binary, free_port(), tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """http:// endpoint of an S3-compatible server shared by the session (tests use own buckets)."""
    pytest.importorskip("boto3", reason="S3 tests need boto3: pip install -e '.[s3]'")
    if os.environ.get(S3_ENV):
        yield os.environ[S3_ENV]
        return
    binary = moto_binary()
    if binary is None:
        pytest.skip(f"needs an S3 server: set {S3_ENV} or pip install 'moto[server]'")
    port = free_port()
    log = open(tmp_path_factory.mktemp("moto") / "moto.log", "ab")  # noqa: SIM115
    proc = subprocess.Popen([binary, "-H", "127.0.0.1", "-p", str(port)], stdout=log,
                            stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _http_ok(endpoint), 30, f"moto_server on port {port}")
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=0.5):
            return True
    except urllib.error.HTTPError:
        return True  # any HTTP answer means the server is up
    except OSError:
        return False


@pytest.fixture
def s3_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dummy credentials (moto accepts any); a real endpoint's may come from the environment."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", os.environ.get("AWS_ACCESS_KEY_ID", "testing"))
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", os.environ.get("AWS_SECRET_ACCESS_KEY", "testing"))
    monkeypatch.setenv("AWS_DEFAULT_REGION", os.environ.get("AWS_DEFAULT_REGION", "us-east-1"))


@pytest.fixture
def unique_name() -> str:
    """A fresh lowercase name for keys and buckets, so tests sharing a server never collide."""
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on (for unreachable-server tests)."""
    return free_port()
