"""Issue 42, defect 14: role processes die with their launcher, however it dies. A parent
starts a child through supervisor.lifeline_popen (as `skurl train --mode decoupled` starts
its sim servers and collectors); SIGKILLing the parent stops the child within seconds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

_PARENT = """
import sys, time
from skurl.modes.decoupled.supervisor import lifeline_popen
child, _ = lifeline_popen([sys.executable, "-c",
    "from skurl.modes.decoupled.roles import wait_for_signal; print('waiting', flush=True); "
    "wait_for_signal(); print('stopped', flush=True)"])
print(child.pid, flush=True)
time.sleep(300)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie (exited, not yet reaped) is not alive
        return f.read().split(")")[-1].split()[0] != "Z"


def test_a_child_stops_when_its_launcher_is_killed() -> None:
    parent = subprocess.Popen([sys.executable, "-c", _PARENT], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(SRC)})
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        time.sleep(1.0)
        assert _alive(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 30
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(child), "the child outlived its SIGKILLed launcher"
    finally:
        parent.kill()
