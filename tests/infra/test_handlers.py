"""ApiFunction's Mangum handler, invoked with recorded function-URL events (payload 2.0)
against in-process moto, the way Lambda would call it."""

from __future__ import annotations

import asyncio
import base64
import copy
import gzip
import importlib.util
import io
import json
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
import botocore.session
import pytest
from aws_lambda_powertools.utilities import parameters
from moto import mock_aws

from headwater.errors import ConfigurationError
from headwater.settings import Settings
from headwater.storage.bootstrap import ensure_resources
from headwater.storage.clients import AwsClients

pytestmark = pytest.mark.infra

REPO = Path(__file__).resolve().parents[2]
HANDLER = REPO / "functions" / "api" / "handler.py"
EVENTS = REPO / "tests" / "events"
KEYS_PARAMETER = "/headwater/test/api-keys"
API_KEY = "hw-test-key-1"  # the bearer token in tests/events/*.json


@dataclass
class FakeLambdaContext:
    """The LambdaContext attributes Powertools' Logger and Metrics read."""

    function_name: str = "headwater-test-ApiFunction-AbC123"
    function_version: str = "$LATEST"
    invoked_function_arn: str = (
        "arn:aws:lambda:us-east-1:123456789012:function:headwater-test-ApiFunction-AbC123"
    )
    memory_limit_in_mb: int = 1024
    aws_request_id: str = "3b2c6a1e-8f4d-4e7b-9c0a-5d1e2f3a4b5c"
    log_group_name: str = "/aws/lambda/headwater-test-ApiFunction-AbC123"
    log_stream_name: str = "2025/03/12/[$LATEST]0123456789abcdef0123456789abcdef"

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


def _event(name: str) -> dict[str, Any]:
    return dict(json.loads((EVENTS / name).read_text()))


def _body(response: dict[str, Any]) -> Any:
    raw: bytes = response.get("body", "").encode()
    if response.get("isBase64Encoded"):
        raw = base64.b64decode(raw)
    headers = {k.lower(): v for k, v in response.get("headers", {}).items()}
    if headers.get("content-encoding") == "gzip":
        raw = gzip.decompress(raw)
    return json.loads(raw)


@pytest.fixture
def lambda_env(fake_aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    # What template.yaml's Globals give the function (names from headwater.settings).
    monkeypatch.setenv("HEADWATER_RESOURCE_PREFIX", "hw-infra")
    monkeypatch.setenv("HEADWATER_BUCKET", "hw-infra-data")
    monkeypatch.setenv("HEADWATER_API_KEYS_PARAMETER", KEYS_PARAMETER)
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "headwater-test")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "HeadwaterTest")


def _import_handler() -> ModuleType:
    spec = importlib.util.spec_from_file_location("headwater_api_handler_under_test", HANDLER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def aws(lambda_env: None) -> Iterator[None]:
    parameters.clear_caches()  # Powertools caches providers (and their clients) globally
    with mock_aws():
        settings = Settings.from_env()
        ensure_resources(settings, AwsClients.create(settings))
        yield
    parameters.clear_caches()


@pytest.fixture
def handler_module(aws: None) -> Iterator[ModuleType]:
    boto3.client("ssm").put_parameter(
        Name=KEYS_PARAMETER, Value=API_KEY, Type="SecureString", Overwrite=True
    )
    yield _import_handler()
    # Mangum installed an event loop for this thread when the module was imported
    asyncio.get_event_loop().close()
    asyncio.set_event_loop(None)


def test_import_creates_no_aws_client(lambda_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN any boto3/botocore client creation fails loudly
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("an AWS client was created at import")

    monkeypatch.setattr(botocore.session.Session, "create_client", refuse)
    # WHEN the handler module is imported (the cold start) THEN the app exists, no client
    module = _import_handler()
    assert module.asgi is not None
    asyncio.get_event_loop().close()
    asyncio.set_event_loop(None)


def test_recorded_events_round_trip(handler_module: ModuleType) -> None:
    handler, ctx = handler_module.handler, FakeLambdaContext()

    health = handler(_event("01_health_get.json"), ctx)
    assert health["statusCode"] == 200, health
    health_body = _body(health)
    assert health_body["status"] == "ok"
    assert {"version", "uptime_ms"} <= set(health_body)

    created = handler(_event("02_topic_put.json"), ctx)
    assert created["statusCode"] == 201, created

    appended = handler(_event("03_append_post.json"), ctx)
    assert appended["statusCode"] in (200, 201), appended
    body = _body(appended)
    assert body["seqs"] == [1]
    assert body["topic"] == "demo"

    appended_b64 = handler(_event("04_append_post_base64.json"), ctx)
    assert appended_b64["statusCode"] == 200, appended_b64
    assert _body(appended_b64)["seqs"] == [2]

    diff = handler(_event("05_diff_post.json"), ctx)
    assert diff["statusCode"] == 200, diff
    diff_body = _body(diff)
    records = diff_body["records"]
    assert [r["$seq"] for r in records] == [1, 2]
    assert records[0]["data"] == {"hello": "world"}
    assert records[1]["data"] == {"n": 2}
    assert records[1]["meta"] == {"via": "base64"}
    assert diff_body["next_from_seq"] == 2
    assert diff_body["caught_up"] is True

    listed = handler(_event("06_topics_list_get.json"), ctx)
    assert listed["statusCode"] == 200, listed
    assert [t["topic"] for t in _body(listed)["topics"]] == ["demo"]

    missing = handler(_event("07_topic_missing_get.json"), ctx)
    assert missing["statusCode"] == 404, missing
    error = _body(missing)["error"]
    assert error["code"] == "topic_not_found"


def test_recorded_queue_events_round_trip(handler_module: ModuleType) -> None:
    # The buffered function (Mangum) serves the queue's claim/ack like any REST route.
    handler, ctx = handler_module.handler, FakeLambdaContext()
    created = handler(_event("30_queue_put.json"), ctx)
    assert created["statusCode"] == 201, created
    produced = handler(_event("31_queue_produce_post.json"), ctx)
    assert produced["statusCode"] == 200, produced  # the topic exists: 200
    assert _body(produced)["seqs"] == [1, 2]
    claimed = handler(_event("32_queue_claim_post.json"), ctx)
    assert claimed["statusCode"] == 200, claimed
    body = _body(claimed)
    assert [j["$seq"] for j in body["claimed"]] == [1, 2]
    assert body["claimed"][0]["$tag"] == "tenant42:job-1"
    assert all(j["deliveries"] == 1 and j["lease_id"].startswith("lease_") for j in body["claimed"])
    assert body["ready"] == 0
    acked = handler(_event("33_queue_ack_post.json"), ctx)
    assert acked["statusCode"] == 200, acked
    assert (_body(acked)["acked"], _body(acked)["skipped"]) == (2, [])
    again = handler(_event("33_queue_ack_post.json"), ctx)
    assert _body(again)["acked"] == 0 and _body(again)["skipped"] == [1, 2]


def test_recorded_durable_streams_events_round_trip(handler_module: ModuleType) -> None:
    # /v1 catch-up reads and writes are buffered REST (Mangum); live reads use the stream URL.
    handler, ctx = handler_module.handler, FakeLambdaContext()
    created = handler(_event("50_ds_stream_put.json"), ctx)
    assert created["statusCode"] in (200, 201), created
    assert created["headers"]["content-type"] == "application/json"
    appended = handler(_event("51_ds_append_post.json"), ctx)
    assert appended["statusCode"] in (200, 204), appended
    assert appended["headers"]["producer-seq"] == "0"
    read = handler(_event("52_ds_read_get.json"), ctx)
    assert read["statusCode"] == 200, read
    assert json.loads(read["body"])[:3] == [{"id": 1}, {"id": 2}, {"id": 3}]
    assert read["headers"]["stream-up-to-date"] == "true"
    assert read["headers"]["x-content-type-options"] == "nosniff"


def test_recorded_aviso_events_round_trip(aws: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # /api/v1 with the schema in the data bucket, as template.yaml's NotificationSchemaUri
    # says: read through the app's clients on the first request (none at import).
    boto3.client("ssm").put_parameter(
        Name=KEYS_PARAMETER, Value=API_KEY, Type="SecureString", Overwrite=True
    )
    example = REPO / "infra" / "notification_schema.example.yaml"
    boto3.client("s3").put_object(
        Bucket="hw-infra-data", Key="config/schema.yaml", Body=example.read_bytes()
    )
    monkeypatch.setenv("HEADWATER_NOTIFICATION_SCHEMA", "s3://hw-infra-data/config/schema.yaml")
    module = _import_handler()
    try:
        handler, ctx = module.handler, FakeLambdaContext()
        stored = handler(_event("60_aviso_notify_post.json"), ctx)
        assert stored["statusCode"] == 200, stored
        body = _body(stored)
        assert body["status"] == "success"
        # the recorded request's own X-Request-ID (a UUID) is answered back
        assert body["request_id"] == "0f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a"
        assert stored["headers"]["x-request-id"] == body["request_id"]
        # a replay is finite: the buffered URL can answer it whole (watches need the stream URL)
        replayed = handler(_event("61_aviso_replay_post.json"), ctx)
        assert replayed["statusCode"] == 200, replayed
        assert replayed["headers"]["content-type"] == "text/event-stream"
        text = replayed["body"]
        assert '"id":"test_polygon@1"' in text and '"payload":{"note":"area ready"}' in text
        events = [line[7:] for line in text.splitlines() if line.startswith("event: ")]
        assert events == ["replay-control", "replay", "replay-control", "connection-closing"]
        assert '"reason":"end_of_stream"' in text
    finally:
        asyncio.get_event_loop().close()
        asyncio.set_event_loop(None)


def test_keys_come_from_the_ssm_parameter(handler_module: ModuleType) -> None:
    # GIVEN the keys parameter holds API_KEY WHEN a request carries another token THEN 401
    event = copy.deepcopy(_event("06_topics_list_get.json"))
    event["headers"]["authorization"] = "Bearer not-the-key"
    response = handler_module.handler(event, FakeLambdaContext())
    assert response["statusCode"] == 401, response

    del event["headers"]["authorization"]
    response = handler_module.handler(event, FakeLambdaContext())
    assert response["statusCode"] == 401, response


def test_missing_keys_parameter_fails_closed(aws: None) -> None:
    # GIVEN HEADWATER_API_KEYS_PARAMETER names a parameter that does not exist
    module = _import_handler()
    try:
        # WHEN a request arrives THEN it is never served without auth
        try:
            response = module.handler(_event("06_topics_list_get.json"), FakeLambdaContext())
        except parameters.exceptions.GetParameterError:
            return  # the invocation fails; Lambda reports it as a 502 to the caller
        assert response["statusCode"] >= 500, response
    finally:
        asyncio.get_event_loop().close()
        asyncio.set_event_loop(None)


FLAG_TOKENS_PARAMETER = "/headwater/test/flag-tokens"
SIGNING_KEY_PARAMETER = "/headwater/test/flag-signing-key"
FLAG_TOKEN = "hw-flag-token-0123456789abcdef"  # the bearer token in tests/events/7x_flags_*.json


def test_recorded_flag_events_round_trip(aws: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # The flag tokens and the signing key come from SSM parameters, as template.yaml's
    # FlagTokensParameterName / SigningKeyParameterName say (read on the first request).
    ssm = boto3.client("ssm")
    ssm.put_parameter(Name=KEYS_PARAMETER, Value=API_KEY, Type="SecureString", Overwrite=True)
    tokens = [
        {
            "token": FLAG_TOKEN,
            "tenant": "acme",
            "kind": "service",
            "permissions": ["manifest.read", "manifest.write"],
            "namespaces": ["billing"],
        }
    ]
    ssm.put_parameter(
        Name=FLAG_TOKENS_PARAMETER, Value=json.dumps(tokens), Type="SecureString", Overwrite=True
    )
    ssm.put_parameter(
        Name=SIGNING_KEY_PARAMETER, Value="s" * 40, Type="SecureString", Overwrite=True
    )
    monkeypatch.setenv("HEADWATER_FLAG_TOKENS_PARAMETER", FLAG_TOKENS_PARAMETER)
    monkeypatch.setenv("HEADWATER_SIGNING_KEY_PARAMETER", SIGNING_KEY_PARAMETER)
    module = _import_handler()
    try:
        handler, ctx = module.handler, FakeLambdaContext()
        published = handler(_event("70_flags_manifest_put.json"), ctx)
        assert published["statusCode"] == 201, published
        assert _body(published)["version"] == 1
        read = handler(_event("71_flags_manifest_get.json"), ctx)
        assert read["statusCode"] == 200, read
        assert read["headers"]["etag"] == '"v1"'
        put_files = json.loads(_event("70_flags_manifest_put.json")["body"])["files"]
        assert _body(read) == {"version": 1, "files": put_files}
        # the closure tarball is binary: Mangum base64-encodes it for the function URL
        closure = handler(_event("72_flags_closure_get.json"), ctx)
        assert closure["statusCode"] == 200, closure
        assert closure["isBase64Encoded"] is True
        assert closure["headers"]["cache-control"] == "private, max-age=60"
        raw = base64.b64decode(closure["body"])
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:gz") as archive:
            names = sorted(archive.getnames())
        # checkout-redesign uses the employees segment; the other flag is not subscribed
        assert names == [
            "flags/checkout-redesign.toml",
            "namespace.toml",
            "segments/employees.toml",
        ]
        # another token is refused in the flag surface's own envelope
        event = copy.deepcopy(_event("71_flags_manifest_get.json"))
        event["headers"]["authorization"] = "Bearer not-a-flag-token-at-all-000000"
        refused = handler(event, ctx)
        assert refused["statusCode"] == 401
        assert _body(refused)["error"]["code"] == "unauthorized"
    finally:
        asyncio.get_event_loop().close()
        asyncio.set_event_loop(None)


def test_flag_tokens_without_a_signing_key_fail_closed(
    aws: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN flag tokens but no signing key on Lambda (each instance would sign with its own
    # random key, so snapshot URLs would not verify on the instance that serves them)
    ssm = boto3.client("ssm")
    ssm.put_parameter(Name=KEYS_PARAMETER, Value=API_KEY, Type="SecureString", Overwrite=True)
    tokens = [
        {
            "token": FLAG_TOKEN,
            "tenant": "acme",
            "kind": "service",
            "permissions": ["manifest.read"],
            "namespaces": ["*"],
        }
    ]
    ssm.put_parameter(
        Name=FLAG_TOKENS_PARAMETER, Value=json.dumps(tokens), Type="SecureString", Overwrite=True
    )
    monkeypatch.setenv("HEADWATER_FLAG_TOKENS_PARAMETER", FLAG_TOKENS_PARAMETER)
    monkeypatch.setenv("HEADWATER_SIGNING_KEY_PARAMETER", "")
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", FakeLambdaContext.function_name)
    module = _import_handler()
    try:
        # WHEN a request arrives THEN the function refuses to serve (a configuration error)
        try:
            response = module.handler(_event("71_flags_manifest_get.json"), FakeLambdaContext())
        except ConfigurationError as exc:
            assert "HEADWATER_SIGNING_KEY" in str(exc)
            return
        assert response["statusCode"] >= 500, response
    finally:
        asyncio.get_event_loop().close()
        asyncio.set_event_loop(None)


DASHBOARD_USER = "user-7f3a"  # the X-User-ID of tests/events/8x_dashboard_*.json


def test_recorded_dashboard_events_round_trip(aws: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # /api/v2 with the environment template.yaml gives ApiFunction: the dashboard topic and
    # the per-instance stream cap from DashboardTopic / DashboardMaxConnections; the
    # configurations live in the stack's dashboard table (moto, created from schema.TABLES).
    boto3.client("ssm").put_parameter(
        Name=KEYS_PARAMETER, Value=API_KEY, Type="SecureString", Overwrite=True
    )
    monkeypatch.setenv("HEADWATER_DASHBOARD_TOPIC", "sentiment")
    monkeypatch.setenv("HEADWATER_DASHBOARD_POLL_MS", "5000")
    monkeypatch.setenv("HEADWATER_DASHBOARD_MAX_CONNECTIONS", "100")
    module = _import_handler()
    try:
        handler, ctx = module.handler, FakeLambdaContext()
        created = handler(_event("80_dashboard_config_post.json"), ctx)
        assert created["statusCode"] == 201, created
        config = _body(created)
        assert set(config) == {"config_id", "name", "tickers", "created_at", "updated_at"}
        assert config["name"] == "Big tech"
        assert config["tickers"] == ["AAPL", "MSFT", "NVDA"]  # canonical: upper case
        assert config["created_at"].endswith("Z") and config["updated_at"].endswith("Z")
        # stored in the dashboard table under the user's partition
        item = boto3.client("dynamodb").get_item(
            TableName="hw-infra-dashboard",
            Key={"pk": {"S": f"u#{DASHBOARD_USER}"}, "sk": {"S": f"c#{config['config_id']}"}},
        )
        assert item["Item"]["name"] == {"S": "Big tech"}

        listed = handler(_event("81_dashboard_configs_get.json"), ctx)
        assert listed["statusCode"] == 200, listed
        assert _body(listed) == {"configurations": [config], "count": 1}

        ingested = handler(_event("82_dashboard_sentiment_post.json"), ctx)
        assert ingested["statusCode"] == 201, ingested
        assert _body(ingested) == {
            "topic": "sentiment",
            "accepted": 1,
            "first_seq": 1,
            "last_seq": 1,
            "deduped": False,
        }
        # the recorded Idempotency-Key: a retry writes nothing and answers 200
        retried = handler(_event("82_dashboard_sentiment_post.json"), ctx)
        assert retried["statusCode"] == 200, retried
        assert _body(retried)["deduped"] is True

        status = handler(_event("83_dashboard_status_get.json"), ctx)
        assert status["statusCode"] == 200, status
        assert status["headers"]["content-type"] == "application/json"
        assert _body(status) == {
            "connections": 0,
            "max_connections": 100,
            "available": 100,
            "uptime_seconds": _body(status)["uptime_seconds"],
        }
        assert isinstance(_body(status)["uptime_seconds"], int)
    finally:
        asyncio.get_event_loop().close()
        asyncio.set_event_loop(None)


def test_dashboard_max_connections_comes_from_the_environment(
    aws: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # DashboardMaxConnections reaches the app as HEADWATER_DASHBOARD_MAX_CONNECTIONS
    boto3.client("ssm").put_parameter(
        Name=KEYS_PARAMETER, Value=API_KEY, Type="SecureString", Overwrite=True
    )
    monkeypatch.setenv("HEADWATER_DASHBOARD_MAX_CONNECTIONS", "7")
    module = _import_handler()
    try:
        status = module.handler(_event("83_dashboard_status_get.json"), FakeLambdaContext())
        assert status["statusCode"] == 200, status
        body = _body(status)
        assert (body["max_connections"], body["available"]) == (7, 7)
    finally:
        asyncio.get_event_loop().close()
        asyncio.set_event_loop(None)


@pytest.mark.parametrize(
    ("header", "detail"),
    [
        (None, "Missing user identification"),
        ("   ", "Missing user identification"),
        ("x" * 129, "Invalid user identification"),
    ],
)
def test_dashboard_configurations_need_a_user_id(
    handler_module: ModuleType, header: str | None, detail: str
) -> None:
    # GIVEN the recorded configuration requests without (or with an unusable) X-User-ID
    for name in ("80_dashboard_config_post.json", "81_dashboard_configs_get.json"):
        event = copy.deepcopy(_event(name))
        del event["headers"]["x-user-id"]
        if header is not None:
            event["headers"]["x-user-id"] = header
        # WHEN the handler answers THEN 401 in the contract's shape, and nothing is stored
        response = handler_module.handler(event, FakeLambdaContext())
        assert response["statusCode"] == 401, response
        assert response["headers"]["content-type"] == "application/json"
        assert _body(response) == {"detail": detail}
    scanned = boto3.client("dynamodb").scan(TableName="hw-infra-dashboard")
    assert scanned["Items"] == []
