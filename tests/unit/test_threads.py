"""skurl/learn/threads.py: a torch thread count set through set_torch_threads survives numba's
thread pool starting afterwards (in a fresh process: the pool starts once per process)."""

from __future__ import annotations

import os
import subprocess
import sys

SCRIPT = """
import torch, numba
import skurl.sim.env  # loads the simulator's parallel kernels
from skurl.learn.threads import set_torch_threads
set_torch_threads(1)
torch.get_num_threads()  # torch's OpenMP is up: a later first start of numba's pool would reset it
numba.set_num_threads(1)
print(torch.get_num_threads())
"""


def test_torch_threads_hold_after_numbas_pool_starts() -> None:
    env = {**os.environ, "NUMBA_NUM_THREADS": "2", "OMP_NUM_THREADS": "2"}
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120,
                         check=True)
    assert out.stdout.split()[-1] == "1"
