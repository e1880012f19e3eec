"""The API Gateway side of /v0/ws without a flow: message-size fitting, the management-API
adapter's error translation (botocore's Stubber: moto never answers GoneException) and
endpoint resolution."""

from __future__ import annotations

import importlib.util
import itertools
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from botocore.stub import Stubber

from headwater import jsoncodec
from headwater.engine.ports.ws import ConnectionGone
from headwater.errors import StorageUnavailable
from headwater.storage.ws_connections import ApiGatewayPoster, management_endpoint
from headwater.ws.gateway import MAX_MESSAGE_BYTES, fit_message

pytestmark = pytest.mark.infra

REPO = Path(__file__).resolve().parents[2]
ENDPOINT = "https://k3x9wz2c1d.execute-api.us-east-1.amazonaws.com/dev"


def _record_frame(sizes: list[int], from_seq: int = 10) -> bytes:
    records = [
        {"$seq": from_seq + i + 1, "$ts": 1, "data": "x" * size} for i, size in enumerate(sizes)
    ]
    body = {
        "op": "record",
        "topic": "orders",
        "records": records,
        "from_seq": from_seq,
        "to_seq": from_seq + len(sizes) + 2,  # filtered-out records trail the batch
        "head_seq": 99,
    }
    return jsoncodec.dumps(body)


def test_a_frame_that_fits_is_left_alone() -> None:
    frame = _record_frame([10, 20])
    assert fit_message(frame) == [frame]


def test_a_big_record_frame_is_split_with_contiguous_cursors() -> None:
    # GIVEN a record frame of five 40 KB records (about 200 KB)
    frame = _record_frame([40_000] * 5)
    # WHEN it is fitted to API Gateway's message limit
    parts = [json.loads(p) for p in fit_message(frame)]
    # THEN every part fits, no record is lost or reordered, and the cursors chain
    assert all(len(p) <= MAX_MESSAGE_BYTES for p in fit_message(frame))
    assert [r["$seq"] for p in parts for r in p["records"]] == [11, 12, 13, 14, 15]
    assert parts[0]["from_seq"] == 10 and parts[-1]["to_seq"] == 17
    for before, after in itertools.pairwise(parts):
        assert after["from_seq"] == before["to_seq"] == before["records"][-1]["$seq"]


def test_a_record_too_big_for_any_message_becomes_an_error_frame() -> None:
    frame = _record_frame([100, 200_000, 100])
    parts = [json.loads(p) for p in fit_message(frame)]
    assert [p["op"] for p in parts] == ["record", "error", "record"]
    assert parts[1]["code"] == "payload_too_large"
    assert parts[1]["detail"] == {
        "topic": "orders",
        "from_seq": 11,
        "to_seq": 12,
        "max_bytes": MAX_MESSAGE_BYTES,
    }
    assert (parts[0]["from_seq"], parts[0]["to_seq"]) == (10, 11)
    assert (parts[2]["from_seq"], parts[2]["to_seq"]) == (12, 15)


def _stubbed(code: str, status: int) -> tuple[ApiGatewayPoster, Stubber]:
    poster = ApiGatewayPoster("us-east-1")
    stubber = Stubber(poster._client(ENDPOINT))
    stubber.add_client_error("post_to_connection", service_error_code=code, http_status_code=status)
    stubber.activate()
    return poster, stubber


def test_gone_exception_is_connection_gone(fake_aws_env: dict[str, str]) -> None:
    poster, stubber = _stubbed("GoneException", 410)
    with pytest.raises(ConnectionGone), stubber:
        poster.post(ENDPOINT, "abc=", b"{}")


def test_other_post_errors_are_storage_unavailable(fake_aws_env: dict[str, str]) -> None:
    poster, stubber = _stubbed("LimitExceededException", 429)
    with pytest.raises(StorageUnavailable), stubber:
        poster.post(ENDPOINT, "abc=", b"{}")


def test_emulator_endpoint_keeps_the_stage(
    fake_aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert management_endpoint(ENDPOINT) == ENDPOINT
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:4566")
    assert management_endpoint(ENDPOINT) == "http://127.0.0.1:4566/dev"
    monkeypatch.setenv("AWS_ENDPOINT_URL_APIGATEWAYMANAGEMENTAPI", "http://localhost:5000/")
    assert management_endpoint(ENDPOINT) == "http://localhost:5000/dev"


def _ws_handler() -> Any:
    path = REPO / "functions" / "ws" / "handler.py"
    spec = importlib.util.spec_from_file_location("headwater_ws_handler_endpoints", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_a_custom_domain_posts_to_the_execute_api_host(fake_aws_env: dict[str, str]) -> None:
    handler = _ws_handler()
    ctx = {"domainName": "ws.example.com", "stage": "prod", "apiId": "k3x9wz2c1d"}
    expected = "https://k3x9wz2c1d.execute-api.eu-west-1.amazonaws.com/prod"
    assert handler.management_endpoint(ctx, "eu-west-1") == expected
    ctx["domainName"] = "k3x9wz2c1d.execute-api.eu-west-1.amazonaws.com"
    assert handler.management_endpoint(ctx, "eu-west-1") == expected
