"""One contract suite for every RolloutStore backend: local directory and S3 (moto_server).

Damage is done to the raw objects from outside the store (the file system, or a separate
boto3 client), so the checks see the bytes a real failure would leave.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pytest

from skurl.config import StoreConfig
from skurl.store import (
    CorruptShardError,
    RolloutStore,
    ShardManifest,
    StoreError,
    open_store,
    read_iteration,
)


class RawObjects(Protocol):
    """Direct access to a store's objects, bypassing the store (to damage them)."""

    def list_keys(self) -> list[str]: ...
    def read(self, key: str) -> bytes: ...
    def write(self, key: str, data: bytes) -> None: ...
    def delete(self, key: str) -> None: ...


class LocalRaw:
    def __init__(self, root: Path) -> None:
        self.root = root

    def list_keys(self) -> list[str]:
        return sorted(str(p.relative_to(self.root)) for p in self.root.rglob("*") if p.is_file())

    def read(self, key: str) -> bytes:
        return (self.root / key).read_bytes()

    def write(self, key: str, data: bytes) -> None:
        (self.root / key).parent.mkdir(parents=True, exist_ok=True)
        (self.root / key).write_bytes(data)

    def delete(self, key: str) -> None:
        (self.root / key).unlink()


class S3Raw:
    def __init__(self, endpoint: str, bucket: str, prefix: str) -> None:
        import boto3

        self.client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        self.bucket, self.prefix = bucket, prefix

    def list_keys(self) -> list[str]:
        out = self.client.list_objects_v2(Bucket=self.bucket, Prefix=self.prefix)
        return sorted(o["Key"][len(self.prefix):] for o in out.get("Contents", []))

    def read(self, key: str) -> bytes:
        return self.client.get_object(Bucket=self.bucket, Key=self.prefix + key)["Body"].read()

    def write(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=self.prefix + key, Body=data)

    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self.prefix + key)


@dataclass
class StoreUnderTest:
    store: RolloutStore
    raw: RawObjects

    def payload_key(self, manifest: ShardManifest) -> str:
        (key,) = [k for k in self.raw.list_keys()
                  if k.startswith(f"it{manifest.iteration:08d}/{manifest.collector_id}.")
                  and k.endswith(".shard.zst")]
        return key

    def manifest_key(self, manifest: ShardManifest) -> str:
        return f"it{manifest.iteration:08d}/{manifest.collector_id}.manifest.json"


@pytest.fixture(params=["local", "s3"])
def sut(request: pytest.FixtureRequest, tmp_path: Path, unique_name: str) -> Iterator[StoreUnderTest]:
    if request.param == "local":
        root = tmp_path / "rollouts"
        yield StoreUnderTest(open_store(StoreConfig(url=str(root))), LocalRaw(root))
        return
    endpoint = request.getfixturevalue("s3_endpoint")
    request.getfixturevalue("s3_credentials")
    cfg = StoreConfig(url=f"s3://{unique_name}/runs/a", endpoint_url=endpoint, create_bucket=True)
    yield StoreUnderTest(open_store(cfg), S3Raw(endpoint, unique_name, "runs/a/"))


def rollout_arrays(seed: int, t: int = 5, n: int = 7) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "obs": rng.standard_normal((t, n, 3)).astype(np.float32),
        "actions": rng.integers(0, 20, (t, n)).astype(np.int64),
        "rewards": rng.standard_normal((t, n)),  # float64
        "dones": rng.random((t, n)) < 0.1,
        "sku_ids": np.arange(n, dtype=np.int32),
        "empty": np.zeros((0, 4), np.float16),
        "scalar": np.array(0.5, np.float32),
    }


def meta(version: int = 3, **extra: Any) -> dict[str, Any]:
    return {"policy_version": version, "sku_start": 100, "sku_count": 7, "rows": 35, **extra}


def assert_same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert set(a) == set(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        assert a[k].tobytes() == b[k].tobytes(), k  # bit-exact, NaN-safe


def test_put_list_get_round_trip_is_bit_exact(sut: StoreUnderTest) -> None:
    arrays = rollout_arrays(0)
    arrays["rewards"][0, 0] = np.nan
    put = sut.store.put_shard(4, "c0", arrays, meta(run="abc"))
    (listed,) = sut.store.list_shards(4)
    assert listed == put
    assert (listed.iteration, listed.collector_id, listed.policy_version) == (4, "c0", 3)
    assert (listed.sku_start, listed.sku_count, listed.rows) == (100, 7, 35)
    assert listed.meta == {"run": "abc"}
    assert {a.name: (a.dtype, a.shape) for a in listed.arrays} == {
        k: (v.dtype.name, v.shape) for k, v in arrays.items()
    }
    payload = sut.raw.read(sut.payload_key(listed))
    assert hashlib.sha256(payload).hexdigest() == listed.sha256
    assert len(payload) == listed.payload_bytes
    assert_same(sut.store.get_shard(listed), arrays)


def test_non_contiguous_and_big_endian_arrays_round_trip(sut: StoreUnderTest) -> None:
    base = np.arange(24, dtype=">i4").reshape(4, 6)
    arrays = {"strided": base[:, ::2], "be": base}
    sut.store.put_shard(0, 1, arrays, {"policy_version": 0})
    got = sut.store.get_shard(sut.store.list_shards(0)[0])
    np.testing.assert_array_equal(got["strided"], base[:, ::2])
    np.testing.assert_array_equal(got["be"], base)


def test_list_is_per_iteration_and_sorted_by_collector(sut: StoreUnderTest) -> None:
    for cid in ("c2", "c0", "c1"):
        sut.store.put_shard(1, cid, rollout_arrays(1), meta())
    sut.store.put_shard(2, "c9", rollout_arrays(2), meta())
    assert [m.collector_id for m in sut.store.list_shards(1)] == ["c0", "c1", "c2"]
    assert [m.collector_id for m in sut.store.list_shards(2)] == ["c9"]
    assert sut.store.list_shards(3) == []


def test_rewriting_a_shard_replaces_it(sut: StoreUnderTest) -> None:
    sut.store.put_shard(0, "c0", rollout_arrays(0), meta(version=1))
    sut.store.put_shard(0, "c0", rollout_arrays(1), meta(version=2))
    (m,) = sut.store.list_shards(0)
    assert m.policy_version == 2
    assert_same(sut.store.get_shard(m), rollout_arrays(1))
    assert len(sut.raw.list_keys()) == 2  # one manifest, one payload: the old payload is gone


def test_flipped_byte_in_payload_is_detected(sut: StoreUnderTest) -> None:
    m = sut.store.put_shard(5, "c1", rollout_arrays(0), meta())
    key = sut.payload_key(m)
    data = bytearray(sut.raw.read(key))
    data[len(data) // 2] ^= 0x01
    sut.raw.write(key, bytes(data))
    with pytest.raises(CorruptShardError, match=r"it00000005/c1.*sha256") as info:
        sut.store.get_shard(sut.store.list_shards(5)[0])
    assert info.value.shard == "it00000005/c1"


def test_truncated_payload_is_detected(sut: StoreUnderTest) -> None:
    m = sut.store.put_shard(5, "c1", rollout_arrays(0), meta())
    key = sut.payload_key(m)
    sut.raw.write(key, sut.raw.read(key)[:-10])
    with pytest.raises(CorruptShardError, match="truncated"):
        sut.store.get_shard(sut.store.list_shards(5)[0])


def test_undecodable_payload_with_matching_checksum_is_detected(sut: StoreUnderTest) -> None:
    """A payload whose manifest was rewritten to match garbage still fails to decode."""
    m = sut.store.put_shard(5, "c1", rollout_arrays(0), meta())
    garbage = b"\x28\xb5\x2f\xfd" + b"not zstd at all" * 4
    fake = json.loads(sut.raw.read(sut.manifest_key(m)))
    fake.update(sha256=hashlib.sha256(garbage).hexdigest(), payload_bytes=len(garbage))
    fake_manifest = ShardManifest.from_json(json.dumps(fake).encode(), m.name)
    sut.raw.delete(sut.payload_key(m))
    sut.raw.write(f"it00000005/c1.{fake_manifest.sha256[:16]}.shard.zst", garbage)
    sut.raw.write(sut.manifest_key(m), fake_manifest.to_json())
    with pytest.raises(CorruptShardError, match="cannot be decoded"):
        sut.store.get_shard(sut.store.list_shards(5)[0])


def test_manifest_that_lies_about_arrays_is_detected(sut: StoreUnderTest) -> None:
    m = sut.store.put_shard(5, "c1", rollout_arrays(0), meta())
    data = json.loads(sut.raw.read(sut.manifest_key(m)))
    data["arrays"][0]["shape"] = [1, 2, 3]
    sut.raw.write(sut.manifest_key(m), json.dumps(data).encode())
    with pytest.raises(CorruptShardError, match="manifest says"):
        sut.store.get_shard(sut.store.list_shards(5)[0])


def test_learner_reader_skips_and_reports_corrupt_shards(sut: StoreUnderTest) -> None:
    good = sut.store.put_shard(6, "c0", rollout_arrays(0), meta())
    bad = sut.store.put_shard(6, "c1", rollout_arrays(1), meta())
    key = sut.payload_key(bad)
    sut.raw.write(key, sut.raw.read(key)[:20])
    result = read_iteration(sut.store, 6)
    assert [m for m, _ in result.shards] == [good]
    assert [e.shard for e in result.corrupt] == ["it00000006/c1"]
    assert result.rows == 35


def test_manifest_without_payload_is_not_listed(sut: StoreUnderTest) -> None:
    kept = sut.store.put_shard(7, "c0", rollout_arrays(0), meta())
    lost = sut.store.put_shard(7, "c1", rollout_arrays(1), meta())
    sut.raw.delete(sut.payload_key(lost))
    # A manifest that arrived alone (its writer died before the payload, or it was copied).
    orphan = json.loads(lost.to_json())
    orphan.update(collector_id="c2", sha256="0" * 64)
    sut.raw.write("it00000007/c2.manifest.json", json.dumps(orphan).encode())
    assert sut.store.list_shards(7) == [kept]


def test_unreadable_manifest_is_left_out_of_the_listing(sut: StoreUnderTest) -> None:
    kept = sut.store.put_shard(8, "c0", rollout_arrays(0), meta())
    broken = sut.store.put_shard(8, "c1", rollout_arrays(1), meta())
    sut.raw.write(sut.manifest_key(broken), b'{"iteration": 8, "collec')
    assert sut.store.list_shards(8) == [kept]


def test_iterations_and_delete_before(sut: StoreUnderTest) -> None:
    assert sut.store.iterations() == []
    for it in (12, 0, 3):
        sut.store.put_shard(it, "a", rollout_arrays(it), meta())
        sut.store.put_shard(it, "b", rollout_arrays(it), meta())
    sut.store.put_blob("weights/policy/v1.safetensors", b"w")
    assert sut.store.iterations() == [0, 3, 12]
    assert sut.store.delete_before(3) == 2
    assert sut.store.iterations() == [3, 12]
    assert sut.store.list_shards(0) == []
    assert len(sut.store.list_shards(3)) == 2
    assert sut.store.delete_before(100) == 4
    assert sut.store.iterations() == []
    assert sut.store.get_blob("weights/policy/v1.safetensors") == b"w"


def test_blobs_round_trip(sut: StoreUnderTest) -> None:
    data = bytes(range(256)) * 100
    sut.store.put_blob("weights/k/v0000000001.safetensors", data)
    assert sut.store.get_blob("weights/k/v0000000001.safetensors") == data
    with pytest.raises(KeyError):
        sut.store.get_blob("weights/k/absent")
    sut.store.delete_blob("weights/k/v0000000001.safetensors")
    sut.store.delete_blob("weights/k/v0000000001.safetensors")  # absent is fine
    with pytest.raises(KeyError):
        sut.store.get_blob("weights/k/v0000000001.safetensors")
    with pytest.raises(StoreError, match="blob name"):
        sut.store.put_blob("../escape", b"x")


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((0, "a/b", {"x": np.zeros(2)}, {"policy_version": 0}), "collector id"),
        ((-1, "a", {"x": np.zeros(2)}, {"policy_version": 0}), "iteration"),
        ((0, "a", {}, {"policy_version": 0}), "non-empty"),
        ((0, "a", {"x": [1, 2]}, {"policy_version": 0}), "expected a numpy array"),
        ((0, "a", {"x": np.array(["s"], dtype=object)}, {"policy_version": 0}), "not storable"),
        ((0, "a", {"x": np.zeros(2)}, {}), "policy_version"),
        ((0, "a", {"x": np.zeros(2)}, {"policy_version": -2}), "policy_version"),
        ((0, "a", {"x": np.zeros(2)}, {"policy_version": 0, "f": object()}), "JSON"),
    ],
)
def test_bad_input_is_a_one_line_store_error(sut: StoreUnderTest, args: tuple, match: str) -> None:
    with pytest.raises(StoreError, match=match) as info:
        sut.store.put_shard(*args)
    assert "\n" not in str(info.value)
    assert sut.store.iterations() == []
