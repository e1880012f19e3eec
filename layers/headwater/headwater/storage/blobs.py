"""S3 adapter for the blob port (spilled frames now; segments and indexes later)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from botocore.exceptions import ClientError

from headwater.errors import StorageUnavailable


class S3BlobStore:
    def __init__(self, client: Any, bucket: str) -> None:
        self._s3 = client
        self._bucket = bucket

    def put(self, key: str, body: bytes) -> None:
        try:
            self._s3.put_object(Bucket=self._bucket, Key=key, Body=body)
        except ClientError as exc:
            raise StorageUnavailable(f"blob put failed: {key}") from exc

    def get(self, key: str) -> bytes:
        try:
            body: bytes = self._s3.get_object(Bucket=self._bucket, Key=key)["Body"].read()
        except ClientError as exc:
            raise StorageUnavailable(f"blob get failed: {key}") from exc
        return body

    def delete_many(self, keys: Sequence[str]) -> None:
        for i in range(0, len(keys), 1000):
            chunk = [{"Key": k} for k in keys[i : i + 1000]]
            try:
                self._s3.delete_objects(Bucket=self._bucket, Delete={"Objects": chunk})
            except ClientError as exc:
                raise StorageUnavailable("blob delete failed") from exc
