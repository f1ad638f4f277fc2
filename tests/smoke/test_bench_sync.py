"""`skurl bench sync`: real publisher, real subscriber processes, figures in one JSON object."""

from __future__ import annotations

import json

import pytest

from skurl.cli import main


@pytest.mark.parametrize("backend", ["grpc", "redis"])
def test_publish_latency_is_measured_over_subscriber_processes(
        backend: str, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]) -> None:
    extra = ["--set", f"sync.redis_url={request.getfixturevalue('redis_url')}"] if backend == "redis" else []
    argv = ["bench", "sync", "--backend", backend, "--subscribers", "2", "--publishes", "3",
            "--interval", "0", "--set", "policy.hidden=[16,16]", "--json", *extra]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["backend"] == backend and out["subscribers"] == 2 and out["publishes"] == 3
    assert 0 < out["latency_ms_median"] <= out["latency_ms_p99"] <= out["latency_ms_max"]
    assert out["publish_call_ms_median"] > 0 and out["weights_mb"] > 0


def test_bad_counts_are_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "sync", "--subscribers", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--subscribers 0" in err[0]


def test_unreachable_redis_is_one_line_and_exit_2(closed_port: int, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "sync", "--backend", "redis", "--set", f"sync.redis_url=redis://127.0.0.1:{closed_port}/0",
            "--set", "sync.timeout_s=1"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "redis" in err[0].lower()
