"""Issue 42 acceptance: the decoupled run (learner, 2 sim servers, 2 collectors, the store)
with mutual TLS, a bearer token, rpc.require_tls and Redis with a password (ACL user
limited to rl:*) trains bit-identically to the colocated run without any of it."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from test_decoupled import assert_same_training, tiny  # type: ignore[import-not-found]

from skurl.modes import colocated
from skurl.modes.decoupled import wiring as decoupled
from skurl.train import run as training

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "dev_certs.sh"
PASSWORD = "dec-pw-31a7"


@pytest.fixture
def secured_redis(tmp_path: Path) -> Iterator[str]:
    from conftest import free_port, redis_binary  # type: ignore[import-not-found]

    binary = redis_binary()
    if binary is None:
        pytest.skip("needs redis-server")
    port = free_port()
    conf = tmp_path / "redis.conf"
    conf.write_text(f'port {port}\nbind 127.0.0.1\nsave ""\nappendonly no\ndir {tmp_path}\n'
                    "requirepass admin-only-5e\n"
                    f"user skurl on >{PASSWORD} ~rl:* &rl:* +@all -@dangerous +info\n")
    proc = subprocess.Popen([binary, str(conf)], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis(port=port, username="skurl", password=PASSWORD).ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield f"redis://skurl@127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.slow
def test_a_secured_decoupled_run_equals_the_colocated_one(tmp_path: Path, secured_redis: str) -> None:
    certs = tmp_path / "certs"
    subprocess.run(["bash", str(SCRIPT), str(certs), "skurl"], check=True, capture_output=True)
    (tmp_path / "token").write_text("run-token-88\n")
    (tmp_path / "redis-pw").write_text(PASSWORD + "\n")
    secure = ["sync.backend=redis", f"sync.redis_url={secured_redis}",
              f"sync.redis_password_file={tmp_path / 'redis-pw'}",
              f"rpc.tls.cert={certs / 'skurl.pem'}", f"rpc.tls.key={certs / 'skurl.key'}",
              f"rpc.tls.ca={certs / 'ca.pem'}", f"rpc.token_file={tmp_path / 'token'}",
              "rpc.require_tls=true"]
    reference = tmp_path / "colocated"
    training.start(colocated.mode, tiny(), reference, baseline=False)
    run_dir = tmp_path / "decoupled"
    result = training.start(decoupled.launched, tiny(*secure), run_dir, baseline=False)
    assert result.iterations == 3
    assert_same_training(reference, run_dir)
    saved = "".join(p.read_text(errors="replace") for p in run_dir.rglob("*")
                    if p.is_file() and p.suffix in (".yaml", ".json", ".jsonl", ".log", ".txt"))
    assert PASSWORD not in saved and "run-token-88" not in saved
