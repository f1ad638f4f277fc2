"""Rollout store in an S3-compatible bucket (AWS S3, MinIO, moto_server) via boto3.

`store.url` = s3://bucket/prefix; `store.endpoint_url` points at a non-AWS server.
Credentials come from boto3's usual chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY,
profiles, instance roles). A single PUT is atomic in S3 (readers see the old object or
the whole new one), which gives the payload-then-manifest order its guarantee.
Connection and bucket problems surface as one-line StoreErrors naming the URL.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

from skurl.errors import missing_extra
from skurl.store.api import StoreError
from skurl.store.objects import ShardStore

_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_DELETE_BATCH = 1000  # the S3 DeleteObjects limit


def parse_s3_url(url: str) -> tuple[str, str]:
    """s3://bucket/some/prefix -> ('bucket', 'some/prefix/'); the prefix may be empty."""
    if not url.startswith("s3://"):
        raise StoreError(f"store.url '{url}': expected s3://bucket/prefix")
    bucket, _, prefix = url[len("s3://"):].partition("/")
    if not _BUCKET.fullmatch(bucket):
        raise StoreError(
            f"store.url '{url}': bucket {bucket!r} is not a valid S3 bucket name "
            "(3-63 lowercase letters, digits, '.', '-')"
        )
    prefix = prefix.strip("/")
    return bucket, (prefix + "/" if prefix else "")


class S3Objects:
    """ObjectBackend over one bucket and key prefix."""

    def __init__(
        self,
        url: str,
        endpoint_url: str | None = None,
        create_bucket: bool = False,
        timeout_s: float = 10.0,
    ) -> None:
        self.url = url
        self.bucket, self.prefix = parse_s3_url(url)
        self.endpoint_url = endpoint_url
        self.client = _make_client(url, endpoint_url, timeout_s)
        self._ensure_bucket(create_bucket)

    def write(self, key: str, data: bytes) -> None:
        with self._errors():
            self.client.put_object(Bucket=self.bucket, Key=self.prefix + key, Body=data)

    def read(self, key: str) -> bytes | None:
        with self._errors():
            try:
                obj = self.client.get_object(Bucket=self.bucket, Key=self.prefix + key)
            except self.client.exceptions.NoSuchKey:
                return None
            return obj["Body"].read()

    def list_keys(self, prefix: str) -> list[str]:
        start = len(self.prefix)
        return [obj["Key"][start:] for page in self._pages(prefix) for obj in page.get("Contents", [])]

    def list_dirs(self) -> list[str]:
        dirs = []
        for page in self._pages("", delimiter="/"):
            for common in page.get("CommonPrefixes", []):
                dirs.append(common["Prefix"][len(self.prefix):].rstrip("/"))
        return dirs

    def delete(self, keys: list[str]) -> None:
        # Batches keep the caller's order: manifests (listed first) go before payloads.
        for i in range(0, len(keys), _DELETE_BATCH):
            batch = [{"Key": self.prefix + k} for k in keys[i : i + _DELETE_BATCH]]
            with self._errors():
                self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})

    def _pages(self, prefix: str, delimiter: str | None = None) -> Iterator[dict[str, Any]]:
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self.prefix + prefix}
        if delimiter:
            kwargs["Delimiter"] = delimiter
        with self._errors():
            yield from self.client.get_paginator("list_objects_v2").paginate(**kwargs)

    def _ensure_bucket(self, create: bool) -> None:
        from botocore.exceptions import ClientError

        with self._errors():
            try:
                self.client.head_bucket(Bucket=self.bucket)
                return
            except ClientError as exc:
                code = str(exc.response.get("Error", {}).get("Code", ""))
                if code not in ("404", "NoSuchBucket", "NotFound"):
                    raise
            if not create:
                raise StoreError(
                    f"store.url '{self.url}': bucket '{self.bucket}' does not exist "
                    "(create it, or set store.create_bucket=true)"
                )
            self.client.create_bucket(Bucket=self.bucket, **_location(self.client))

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        """Turn botocore's connection, credential and bucket errors into one-line StoreErrors."""
        from botocore.exceptions import (
            ClientError,
            ConnectionError,
            EndpointConnectionError,
            NoCredentialsError,
            ReadTimeoutError,
        )

        where = f"store.url '{self.url}'" + (
            f" at store.endpoint_url '{self.endpoint_url}'" if self.endpoint_url else ""
        )
        try:
            yield
        except (EndpointConnectionError, ConnectionError, ReadTimeoutError) as exc:
            raise StoreError(f"{where}: cannot reach the S3 endpoint ({type(exc).__name__})") from None
        except NoCredentialsError:
            raise StoreError(
                f"{where}: no S3 credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
            ) from None
        except ClientError as exc:
            err = exc.response.get("Error", {})
            code, message = err.get("Code", "?"), err.get("Message", "")
            if code in ("NoSuchBucket", "404"):
                raise StoreError(f"{where}: bucket '{self.bucket}' does not exist") from None
            raise StoreError(f"{where}: S3 error {code} {message}".rstrip()) from None


def _make_client(url: str, endpoint_url: str | None, timeout_s: float) -> Any:
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise missing_extra("boto3", f"store.url '{url}' (S3)") from None
    config = Config(
        connect_timeout=timeout_s,
        read_timeout=timeout_s,
        retries={"max_attempts": 3, "mode": "standard"},
        s3={"addressing_style": "path"},  # MinIO and moto_server serve path-style URLs
    )
    session = boto3.session.Session()
    region = session.region_name or "us-east-1"
    return session.client("s3", endpoint_url=endpoint_url, region_name=region, config=config)


def _location(client: Any) -> dict[str, Any]:
    region = client.meta.region_name
    # us-east-1 is the one region that rejects an explicit LocationConstraint.
    if region and region != "us-east-1":
        return {"CreateBucketConfiguration": {"LocationConstraint": region}}
    return {}


class S3RolloutStore(ShardStore):
    """RolloutStore under s3://bucket/prefix."""

    def __init__(
        self,
        url: str,
        endpoint_url: str | None = None,
        compression_level: int = 1,
        create_bucket: bool = False,
        timeout_s: float = 10.0,
    ) -> None:
        super().__init__(S3Objects(url, endpoint_url, create_bucket, timeout_s), compression_level)
