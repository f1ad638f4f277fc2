"""open_store: which backend a store.url selects, and one-line errors for unusable URLs."""

from __future__ import annotations

from pathlib import Path

import pytest

from skurl.config import StoreConfig, load_config
from skurl.errors import ConfigError, UserError
from skurl.store import StoreError, open_store
from skurl.store.local import LocalRolloutStore
from skurl.store.s3 import parse_s3_url


def test_a_directory_url_opens_a_local_store(tmp_path: Path) -> None:
    store = open_store(StoreConfig(url=str(tmp_path / "a" / "b"), compression_level=9))
    assert isinstance(store, LocalRolloutStore)
    assert (tmp_path / "a" / "b").is_dir()


def test_a_directory_under_a_file_is_a_store_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreError, match=r"store.url .*file/sub.*cannot create"):
        open_store(StoreConfig(url=str(tmp_path / "file" / "sub")))


def test_an_unknown_scheme_is_a_store_error() -> None:
    with pytest.raises(StoreError, match="s3://bucket/prefix"):
        open_store(StoreConfig(url="gs://bucket/x"))


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("s3://bucket", ("bucket", "")),
        ("s3://bucket/", ("bucket", "")),
        ("s3://my.bucket-1/runs/exp 1/", ("my.bucket-1", "runs/exp 1/")),
    ],
)
def test_s3_urls_parse_into_bucket_and_prefix(url: str, expected: tuple[str, str]) -> None:
    assert parse_s3_url(url) == expected


@pytest.mark.parametrize("url", ["s3://Upper/x", "s3://ab/x", "s3:///x", "s3://a_b/x"])
def test_bad_bucket_names_are_store_errors(url: str) -> None:
    with pytest.raises(StoreError, match="bucket"):
        parse_s3_url(url)


def test_store_errors_are_user_errors() -> None:
    assert issubclass(StoreError, UserError)


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("store.compression_level=30", "store.compression_level"),
        ("store.endpoint_url=localhost:9000", "store.endpoint_url"),
        ("store.url=s3://", "store.url"),
        ("store.timeout_s=0", "store.timeout_s"),
    ],
)
def test_store_config_validation_names_the_key(override: str, key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        load_config(overrides=[override])
