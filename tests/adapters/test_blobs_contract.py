"""BlobStore contract (S3BlobStore), run against every backend in conftest.BACKENDS (S3 is moto
in the three AWS ones: in-process, or the moto server that also backs the DynamoDB Local runs;
the in-memory fake's bucket is a dict)."""

from __future__ import annotations

import pytest
from adapter_helpers import Backend

from headwater.errors import StorageUnavailable

pytestmark = pytest.mark.adapters

ODD_KEYS = ["spill/t/1/5-abc", "spill/ünï 😀/1/9-x", "spill/a+b%20c/1/1", "spill/a//b/1"]


def test_put_get_round_trip(backend: Backend) -> None:
    body = bytes(range(256)) * 1000
    for key in ODD_KEYS:
        backend.blobs.put(key, body + key.encode())
    for key in ODD_KEYS:
        assert backend.blobs.get(key) == body + key.encode()


def test_put_overwrites_and_empty_body(backend: Backend) -> None:
    backend.blobs.put("k", b"one")
    backend.blobs.put("k", b"")
    assert backend.blobs.get("k") == b""


def test_get_missing_raises_storage_unavailable(backend: Backend) -> None:
    with pytest.raises(StorageUnavailable):
        backend.blobs.get("spill/missing")


def test_delete_many(backend: Backend) -> None:
    for key in ODD_KEYS:
        backend.blobs.put(key, b"x")
    backend.blobs.delete_many([ODD_KEYS[0], ODD_KEYS[1], "spill/never-existed"])
    backend.blobs.delete_many([])
    for key in ODD_KEYS[:2]:
        with pytest.raises(StorageUnavailable):
            backend.blobs.get(key)
    for key in ODD_KEYS[2:]:
        assert backend.blobs.get(key) == b"x"


def test_delete_many_chunks_past_1000_keys(backend: Backend) -> None:
    # DeleteObjects takes at most 1000 keys: the adapter must chunk. Deleting absent keys is
    # a success in S3, so only the edges need to exist.
    keys = [f"spill/k/{i:05d}" for i in range(1001)]
    for key in (keys[0], keys[999], keys[1000]):
        backend.blobs.put(key, b"x")
    backend.blobs.delete_many(keys)
    for key in (keys[0], keys[999], keys[1000]):
        with pytest.raises(StorageUnavailable):
            backend.blobs.get(key)


def test_missing_bucket_raises_storage_unavailable(aws_backend: Backend) -> None:
    # S3's own error for a bucket that is not there (the fake has one bucket, always there)
    from headwater.storage.blobs import S3BlobStore

    assert aws_backend.clients is not None
    other = S3BlobStore(aws_backend.clients.s3, aws_backend.settings.bucket_name + "-absent")
    with pytest.raises(StorageUnavailable):
        other.put("k", b"x")
    with pytest.raises(StorageUnavailable):
        other.get("k")
