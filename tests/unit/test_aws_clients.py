"""How the shared clients are built (storage/clients.py):
- the S3 client signs what AWS needs signed and no more: over a plain-HTTP endpoint (an
  emulator) botocore would SHA-256 every body for SigV4, which over HTTPS it leaves out;
- retries never hold the whole client after one throttled key (standard mode);
- every request carries one User-Agent, built once, not rebuilt per request."""

from __future__ import annotations

from typing import Any

import boto3
import botocore
import pytest
from botocore.awsrequest import AWSResponse

from headwater import __version__
from headwater.settings import Settings
from headwater.storage.clients import AwsClients


def _clients(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> AwsClients:
    """The clients a process builds, against `endpoint` (nothing listens there)."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    session = boto3.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    )
    return AwsClients.create(Settings(resource_prefix="clients"), session=session)


class _Raw:
    def stream(self, **_: Any) -> Any:
        return iter(())


def _answer(request: Any, status: int, body: bytes) -> AWSResponse:
    """An answer given at the wire (from a `before-send` hook): the request never leaves."""
    response = AWSResponse(request.url, status, {}, _Raw())
    response._content = body
    return response


class _Sent(Exception):
    """Stops the request at the wire: its signed headers are what the test looks at."""


def _payload_hash(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    s3 = _clients(endpoint, monkeypatch).s3
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


class _Waited(Exception):
    """A request held at a client-side send-rate limiter."""


def test_throttling_on_one_key_does_not_rate_limit_the_whole_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN the DynamoDB client every adapter of a process shares, and a table whose first
    # request is throttled (a hot key); botocore's back-off sleep is skipped
    from botocore.retries import bucket

    monkeypatch.setattr("botocore.endpoint.time.sleep", lambda _s: None)

    def held(*_a: Any, **_k: Any) -> None:
        raise _Waited

    monkeypatch.setattr(bucket.TokenBucket, "acquire", held)
    ddb = _clients("http://127.0.0.1:9", monkeypatch).dynamodb
    sent: list[str] = []

    def answer(request: Any, **_: Any) -> AWSResponse:
        table = "hot" if b'"hot"' in request.body else "cold"
        sent.append(table)
        if table == "hot" and sent.count("hot") == 1:
            throttled = b'{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException"}'
            return _answer(request, 400, throttled)
        return _answer(request, 200, b"{}")

    ddb.meta.events.register("before-send.dynamodb.GetItem", answer)
    ddb.get_item(TableName="hot", Key={"pk": {"S": "k"}})
    # WHEN the process goes on to use other tables and keys
    for _ in range(20):
        ddb.get_item(TableName="cold", Key={"pk": {"S": "k"}})
    # THEN none of those requests waited on a client-side rate limiter (adaptive retry mode
    # would hold every request of the client, whatever its table, after one throttle)
    assert sent == ["hot", "hot"] + ["cold"] * 20


def test_every_request_carries_one_user_agent_built_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the shared DynamoDB client, each request answered at the wire
    from botocore.useragent import UserAgentString

    monkeypatch.setenv("AWS_EXECUTION_ENV", "AWS_Lambda_python3.13")
    ddb = _clients("http://127.0.0.1:9", monkeypatch).dynamodb
    agents: list[str] = []

    def answer(request: Any, **_: Any) -> AWSResponse:
        agents.append(request.headers["User-Agent"].decode())
        return _answer(request, 200, b"{}")

    built: list[int] = []
    real = UserAgentString._build_sdk_metadata

    def counted(self: UserAgentString) -> Any:
        built.append(1)
        return real(self)

    monkeypatch.setattr(UserAgentString, "_build_sdk_metadata", counted)
    ddb.meta.events.register("before-send.dynamodb.GetItem", answer)
    # WHEN it makes three calls
    for _ in range(3):
        ddb.get_item(TableName="t", Key={"pk": {"S": "k"}})
    # THEN each carries the same agent, naming the SDK, Headwater and the Lambda runtime, and
    # botocore did not rebuild its own per request (it does, twice per call, by default)
    assert len(agents) == 3 and len(set(agents)) == 1
    parts = agents[0].split()
    assert parts[0] == f"Boto3/{boto3.__version__}" and f"Botocore/{botocore.__version__}" in parts
    assert f"headwater/{__version__}" in parts and "exec-env/AWS_Lambda_python3.13" in parts
    assert built == []
