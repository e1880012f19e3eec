"""The S3 client signs what AWS needs signed and no more: over a plain-HTTP endpoint (an
emulator) botocore would SHA-256 every body for SigV4, which over HTTPS it leaves out; the
client built for such an endpoint leaves it out too (storage/clients.py)."""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from headwater.settings import Settings
from headwater.storage.clients import AwsClients


class _Sent(Exception):
    """Stops the request at the wire: its signed headers are what the test looks at."""


def _payload_hash(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    session = boto3.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    )
    s3 = AwsClients.create(Settings(resource_prefix="clients"), session=session).s3
    seen: dict[str, str] = {}

    def before_send(request: Any, **_: Any) -> None:
        seen["sha"] = request.headers["x-amz-content-sha256"].decode()
        raise _Sent

    s3.meta.events.register("before-send.s3.PutObject", before_send)
    with pytest.raises(_Sent):
        s3.put_object(Bucket="b", Key="k", Body=b"x" * 4096)
    return seen["sha"]


def test_a_plain_http_endpoint_sends_the_body_unsigned(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _payload_hash("http://127.0.0.1:9", monkeypatch) == "UNSIGNED-PAYLOAD"


def test_an_https_endpoint_keeps_botocores_own_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    # over HTTPS botocore leaves the body out of the signature itself (a checksum goes with
    # it); the client is built exactly as before
    assert _payload_hash("https://s3.example.test", monkeypatch) == (
        "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
    )
