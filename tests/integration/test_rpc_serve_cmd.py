"""`skurl serve-sim` end to end: a real process, its printed address, graceful SIGTERM,
a SIGKILL seen by the client as a clear error, and one-line errors for bad flags."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from skurl.catalog import load_catalog
from skurl.catalog.partition import partition
from skurl.cli import main
from skurl.config import RpcConfig, load_config
from skurl.rpc.env_client import RemoteEnv
from skurl.rpc.errors import ServerUnavailableError
from skurl.rpc.health import probe, service_name
from skurl.sim.env import VectorEnv

SETTINGS = ["catalog.skus=300", "catalog.seed=4", "sim.days=4", "sim.threads=1"]
START_S = 300.0  # a first start compiles the simulator kernels (minutes on a busy 2-core box)
RPC = RpcConfig(timeout_s=30.0)


def _set_flags() -> list[str]:
    return [arg for s in SETTINGS for arg in ("--set", s)]


class Served:
    def __init__(self, shard: str) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "GRPC_VERBOSITY": "ERROR"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "skurl.cli", "serve-sim", "--port", "0", "--shard", shard,
             "--grace", "1", *_set_flags()],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        lines: queue.Queue[str] = queue.Queue()
        assert self.proc.stdout is not None
        out = self.proc.stdout
        threading.Thread(target=lambda: [lines.put(line) for line in out], daemon=True).start()
        self.lines = lines
        first = self.next_line(START_S)
        match = re.search(r"on (\S+:\d+)", first)
        assert match, f"no address in {first!r}"
        self.address = match.group(1)
        self.first_line = first

    def next_line(self, timeout: float) -> str:
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            self.proc.kill()
            stderr = self.proc.stderr.read()  # type: ignore[union-attr]
            raise AssertionError(f"serve-sim printed nothing; stderr: {stderr}") from None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)


@pytest.fixture
def served() -> Iterator[Served]:
    s = Served("1/2")
    yield s
    s.stop()


def test_serves_its_shard_and_stops_gracefully_on_sigterm(served: Served) -> None:
    assert "shard 1/2" in served.first_line
    cfg = load_config(None, SETTINGS)
    catalog = load_catalog(cfg.catalog)
    rows = partition(catalog, 2, cfg.deploy.partition)[1]
    with RemoteEnv(served.address, RPC) as env:
        np.testing.assert_array_equal(env.catalog_rows, rows)
        assert env.shard == (1, 2) and env.num_skus == rows.size
        local = VectorEnv(catalog.subset(rows), cfg.sim)
        obs, ref = env.reset(3), local.reset(3)
        for _ in range(4):
            orders = np.maximum(np.round(ref.raw.forecast[:, :3].sum(1) - ref.raw.on_hand), 0)
            got, want = env.step(orders), local.step(orders)
            np.testing.assert_array_equal(got.reward, want.reward)
            np.testing.assert_array_equal(got.obs.features, want.obs.features)
            obs, ref = got.obs, want.obs
        assert obs.raw.day == 4
    served.proc.send_signal(signal.SIGTERM)
    assert served.proc.wait(timeout=30) == 0
    assert "stopped" in served.next_line(5)


def _wait_stopped(pid: int, timeout_s: float = 10.0) -> None:
    """Until /proc says process `pid` is stopped (state T)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat[stat.rindex(")") + 2] in "Tt":
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} did not stop within {timeout_s} s")


def test_probe_tells_a_serving_a_hung_and_a_killed_process_apart(served: Served) -> None:
    """What the supervisor sees: SERVING, then a SIGSTOPped (hung) process times out, then
    answers again once continued, then a killed one is refused."""
    assert probe(served.address, 10.0, service_name("EnvService"))
    served.proc.send_signal(signal.SIGSTOP)
    try:
        _wait_stopped(served.proc.pid)  # the signal lands asynchronously; a busy machine showed it
        assert not probe(served.address, 1.0)
    finally:
        served.proc.send_signal(signal.SIGCONT)
    assert probe(served.address, 10.0)
    served.proc.kill()
    served.proc.wait(timeout=30)
    assert not probe(served.address, 5.0)


def test_killed_server_gives_a_clear_error_naming_its_address(served: Served) -> None:
    env = RemoteEnv(served.address, RPC)
    env.reset(0)
    served.proc.kill()
    served.proc.wait(timeout=30)
    with pytest.raises(ServerUnavailableError) as info:
        env.step(np.zeros(env.num_skus))
    assert served.address in str(info.value) and "UNAVAILABLE" in str(info.value)
    env.close()


@pytest.mark.parametrize(("flags", "message"), [
    (["--shard", "2/2"], "--shard 2/2"),
    (["--shard", "one"], "--shard 'one'"),
    (["--shard", "5/6", "--set", "catalog.kind=uniform", "--set", "catalog.skus=3"], "empty"),
    (["--port", "70000"], "--port 70000"),
    (["--set", "rpc.max_message_mb=0"], "rpc.max_message_mb"),
])
def test_bad_flags_are_one_line_and_exit_2(flags: list[str], message: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve-sim", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and err.startswith("error:")
