"""S3 store against a real S3-compatible server (moto_server): buckets, endpoints, scale."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from skurl.config import StoreConfig
from skurl.store import StoreError, open_store
from skurl.store.s3 import S3RolloutStore

pytestmark = pytest.mark.integration


def test_unreachable_endpoint_is_one_line_naming_it(s3_credentials: None, closed_port: int) -> None:
    endpoint = f"http://127.0.0.1:{closed_port}"  # nothing listens there
    cfg = StoreConfig(url="s3://bucket-x/p", endpoint_url=endpoint, timeout_s=1)
    with pytest.raises(StoreError, match="cannot reach") as info:
        open_store(cfg)
    message = str(info.value)
    assert endpoint in message and "s3://bucket-x/p" in message and "\n" not in message


def test_missing_bucket_is_an_error_unless_creation_is_asked(
    s3_endpoint: str, s3_credentials: None, unique_name: str
) -> None:
    url = f"s3://{unique_name}/runs"
    with pytest.raises(StoreError, match=f"bucket '{unique_name}' does not exist.*create_bucket"):
        open_store(StoreConfig(url=url, endpoint_url=s3_endpoint))
    open_store(StoreConfig(url=url, endpoint_url=s3_endpoint, create_bucket=True))
    store = open_store(StoreConfig(url=url, endpoint_url=s3_endpoint))  # now it exists
    assert store.iterations() == []


def test_missing_credentials_are_one_line(
    s3_endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: object, unique_name: str
) -> None:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/config")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # never ask an instance endpoint
    with pytest.raises(StoreError, match="no S3 credentials"):
        open_store(StoreConfig(url=f"s3://{unique_name}/x", endpoint_url=s3_endpoint))


def test_prefixes_isolate_runs_in_one_bucket(
    s3_endpoint: str, s3_credentials: None, unique_name: str
) -> None:
    a = open_store(StoreConfig(url=f"s3://{unique_name}/run-a", endpoint_url=s3_endpoint,
                               create_bucket=True))
    b = open_store(StoreConfig(url=f"s3://{unique_name}/run-a-2", endpoint_url=s3_endpoint))
    a.put_shard(1, "c", {"x": np.ones(3)}, {"policy_version": 1})
    b.put_shard(2, "c", {"x": np.zeros(3)}, {"policy_version": 1})
    assert a.iterations() == [1]
    assert b.iterations() == [2]
    assert b.delete_before(10) == 1
    assert a.iterations() == [1]


def test_listing_and_deleting_past_one_s3_page(
    s3_endpoint: str, s3_credentials: None, unique_name: str
) -> None:
    """More than 1000 keys: list_objects_v2 pages and DeleteObjects batches must both work."""
    store = open_store(StoreConfig(url=f"s3://{unique_name}", endpoint_url=s3_endpoint,
                                   create_bucket=True))
    assert isinstance(store, S3RolloutStore)
    keys = [f"it00000000/k{i:05d}.bin" for i in range(1105)]
    with ThreadPoolExecutor(8) as pool:  # loopback PUTs in parallel keep this test quick
        list(pool.map(lambda key: store.backend.write(key, b""), keys))
    assert sorted(store.backend.list_keys("it00000000/")) == keys
    assert store.iterations() == [0]
    store.delete_before(1)
    assert store.backend.list_keys("it00000000/") == []


def test_large_shard_round_trip(s3_endpoint: str, s3_credentials: None, unique_name: str) -> None:
    """A shard big enough for multi-threaded zstd (> 8 MB raw)."""
    store = open_store(StoreConfig(url=f"s3://{unique_name}/big", endpoint_url=s3_endpoint,
                                   create_bucket=True, compression_level=1))
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((100, 10_000, 3)).astype(np.float32)  # 12 MB
    m = store.put_shard(0, "c0", {"obs": obs}, {"policy_version": 0, "rows": 1_000_000})
    assert m.raw_bytes > 12_000_000
    got = store.get_shard(store.list_shards(0)[0])
    assert got["obs"].tobytes() == obs.tobytes()
