"""S3 adapter for the blob port (spilled frames now; segments and indexes later)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from headwater.errors import BlobNotFound, StorageUnavailable
from headwater.storage.requests import COUNTS, PUT, READ, RequestCounts

_MISSING = ("NoSuchKey", "404")


class S3BlobStore:
    def __init__(self, client: Any, bucket: str, counts: RequestCounts = COUNTS) -> None:
        self._s3 = client
        self._bucket = bucket
        self.counts = counts  # per-stream request counters (node-local, _details)

    def put(self, key: str, body: bytes) -> None:
        self.counts.note(key, PUT)
        try:
            self._s3.put_object(Bucket=self._bucket, Key=key, Body=body)
        except (ClientError, BotoCoreError) as exc:
            raise StorageUnavailable(f"blob put failed: {key}") from exc

    def get(self, key: str) -> bytes:
        self.counts.note(key, READ)
        try:
            body: bytes = self._s3.get_object(Bucket=self._bucket, Key=key)["Body"].read()
        except (ClientError, BotoCoreError) as exc:
            raise StorageUnavailable(f"blob get failed: {key}") from exc
        return body

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of an object: one ranged GET."""
        self.counts.note(key, READ)
        try:
            resp = self._s3.get_object(
                Bucket=self._bucket, Key=key, Range=f"bytes={start}-{end - 1}"
            )
            body: bytes = resp["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in _MISSING:
                raise BlobNotFound(f"no such blob: {key}") from exc
            raise StorageUnavailable(f"blob range get failed: {key}") from exc
        except BotoCoreError as exc:
            raise StorageUnavailable(f"blob range get failed: {key}") from exc
        return body

    def find(self, key: str) -> bytes | None:
        """An object's bytes, or None if there is no such object."""
        self.counts.note(key, READ)
        try:
            body: bytes = self._s3.get_object(Bucket=self._bucket, Key=key)["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in _MISSING:
                return None
            raise StorageUnavailable(f"blob get failed: {key}") from exc
        except BotoCoreError as exc:
            raise StorageUnavailable(f"blob get failed: {key}") from exc
        return body

    def list_keys(self, prefix: str) -> list[str]:
        """Every key under `prefix`, in key order."""
        out: list[str] = []
        kwargs: dict[str, Any] = {"Bucket": self._bucket, "Prefix": prefix}
        while True:
            try:
                resp = self._s3.list_objects_v2(**kwargs)
            except (ClientError, BotoCoreError) as exc:
                raise StorageUnavailable(f"blob list failed: {prefix}") from exc
            out.extend(obj["Key"] for obj in resp.get("Contents", []))
            if not resp.get("IsTruncated"):
                return out
            kwargs["ContinuationToken"] = resp["NextContinuationToken"]

    def delete_many(self, keys: Sequence[str]) -> None:
        for i in range(0, len(keys), 1000):
            chunk = [{"Key": k} for k in keys[i : i + 1000]]
            try:
                self._s3.delete_objects(Bucket=self._bucket, Delete={"Objects": chunk})
            except (ClientError, BotoCoreError) as exc:
                raise StorageUnavailable("blob delete failed") from exc


def read_object(client: Any, bucket: str, key: str) -> bytes:
    """One whole object from any bucket (configuration files named by an s3:// URI)."""
    try:
        body: bytes = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        raise StorageUnavailable(f"s3://{bucket}/{key}: {code or exc}") from exc
    return body
