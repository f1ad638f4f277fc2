"""Redis with AUTH and an ACL user limited to skurl's key prefix (issue 42, docs/security.md):
a real redis-server started here with requirepass and a `skurl` user allowed only keys and
channels `rl:*`. skurl's weight sync and shard stream work with the password from
sync.redis_password_file; a client without it, or with a wrong one, is refused with one
line that never shows the password; the ACL user cannot touch other keys."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import torch

from skurl.config import load_config
from skurl.config.secrets import redact_url, with_password
from skurl.config.services import redis_url_of
from skurl.sync.redis import RedisWeightPublisher, SyncConnectionError
from skurl.sync.redis_subscriber import RedisWeightSubscriber

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
ADMIN, SKURL = "admin-pw-4f1d", "skurl-pw-9c2e"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    d = tmp_path_factory.mktemp("redis-auth")
    port = _free_port()
    conf = d / "redis.conf"
    conf.write_text(f'port {port}\nbind 127.0.0.1\nsave ""\nappendonly no\ndir {d}\n'
                    f"requirepass {ADMIN}\n"
                    f"user skurl on >{SKURL} ~rl:* &rl:* +@all -@dangerous +info\n")
    proc = subprocess.Popen(["redis-server", str(conf)], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis(port=port, password=ADMIN).ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def _sync(port: int, tmp_path: Path, password: str | None, user: str = "skurl") -> object:
    extra = []
    if password is not None:
        f = tmp_path / f"pw-{password}"
        f.write_text(password + "\n")
        extra.append(f"sync.redis_password_file={f}")
    return load_config(None, ["sync.backend=redis", f"sync.redis_url=redis://{user}@127.0.0.1:{port}/0",
                              "sync.timeout_s=5", *extra]).sync


def test_weights_flow_with_the_password_file(server: int, tmp_path: Path) -> None:
    sync = _sync(server, tmp_path, SKURL)
    pub = RedisWeightPublisher.from_config(sync)
    sub = RedisWeightSubscriber.from_config(sync)
    try:
        pub.publish(1, {"w": torch.ones(3)})
        version, tensors = sub.wait_for(1, timeout=10)
        assert version == 1 and torch.equal(tensors["w"], torch.ones(3))
        assert SKURL not in pub.url and SKURL not in sub.url  # what messages show
    finally:
        sub.close()


@pytest.mark.parametrize("password", [None, "wrong-guess-77"])
def test_a_client_without_the_password_is_refused(server: int, tmp_path: Path, password: str | None) -> None:
    sync = _sync(server, tmp_path, password)
    with pytest.raises(SyncConnectionError) as info:
        RedisWeightPublisher.from_config(sync)
    text = str(info.value)
    assert "sync.redis_url" in text and "\n" not in text
    assert (password or SKURL) not in text
    # The same with the password in the URL itself: masked in the message.
    url = with_password(f"redis://skurl@127.0.0.1:{server}/0", "wrong-guess-77")
    with pytest.raises(SyncConnectionError) as info:
        RedisWeightPublisher(url)
    assert "wrong-guess-77" not in str(info.value) and "***" in str(info.value)


def test_the_acl_user_is_limited_to_skurls_prefix(server: int, tmp_path: Path) -> None:
    client = redis.Redis.from_url(redis_url_of(_sync(server, tmp_path, SKURL)))  # type: ignore[arg-type]
    client.set("rl:version:probe", 1)
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.set("other:key", 1)
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.flushall()


def test_the_shard_stream_works_with_auth(server: int, tmp_path: Path) -> None:
    from skurl.store.shard_queue_redis import RedisShardQueue

    url = redis_url_of(_sync(server, tmp_path, SKURL))  # type: ignore[arg-type]
    queue = RedisShardQueue(url, "auth-run", "c0", timeout_s=5)
    assert SKURL not in queue.url
    queue.close()


def test_redact_url() -> None:
    assert redact_url("redis://u:p%40ss@h:6379/0") == "redis://u:***@h:6379/0"
    assert redact_url("rediss://:pw@h/0?ssl_ca_certs=/ca.pem") == "rediss://:***@h/0?ssl_ca_certs=/ca.pem"
    assert redact_url("redis://h:6379/0") == "redis://h:6379/0"
    assert with_password("redis://u@h:1/0", "a/b@c") == "redis://u:a%2Fb%40c@h:1/0"
