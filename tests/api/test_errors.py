"""HTTP-level rules (spec §0 and the §2 limits): the error envelope, `performance`,
405/404 routing errors, 413 before parsing, 415, malformed JSON, wrong types, gzip bodies."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from typing import Any

import pytest
from api_helpers import (
    MakeClient,
    append_data,
    assert_error,
    assert_performance,
    diff,
    ok,
    put_topic,
    state,
)
from starlette.testclient import TestClient

from headwater.errors import StorageUnavailable
from headwater.http.app import create_app
from headwater.settings import Limits, Settings
from headwater.storage.clients import AwsClients

pytestmark = pytest.mark.api

JSON = {"content-type": "application/json"}


# --- routing errors --------------------------------------------------------------------


WRONG_METHODS = [
    ("PATCH", "/v0/topics/x"),
    ("POST", "/v0/topics"),
    ("DELETE", "/v0/topics"),
    ("PUT", "/v0/topics"),
    ("GET", "/v0/topics/x/diff"),
    ("PUT", "/v0/topics/x/diff"),
    ("GET", "/v0/topics/x/delete"),
    ("DELETE", "/v0/topics/x/delete"),
    ("POST", "/v0/health"),
    ("DELETE", "/v0/metrics"),
]


def test_wrong_method_is_405_in_envelope(client: TestClient) -> None:
    for method, url in WRONG_METHODS:
        assert_error(client.request(method, url), 405, "method_not_allowed")


def test_unknown_route_is_404_in_envelope(client: TestClient) -> None:
    for url in ["/v0/nope", "/nope", "/v0/topics/x/diff/more", "/v1x/topics"]:
        assert_error(client.get(url), 404, "not_found")
        assert_error(client.post(url, json={}), 404, "not_found")


# --- performance on every JSON response -------------------------------------------------


def test_every_json_response_has_performance(client: TestClient) -> None:
    responses = [
        client.put("/v0/topics/p", json={}),
        client.put("/v0/topics/p", json={}),
        client.get("/v0/topics/p"),
        client.get("/v0/topics"),
        client.post("/v0/topics/p", json={"records": [{"data": 1}]}),
        client.post("/v0/topics/p/diff", json={}),
        client.post("/v0/topics/p/delete", json={"before_seq": 1}),
        client.delete("/v0/topics/p"),
        client.get("/v0/health"),
        client.get("/v0/ready"),
        client.get("/v0/metrics", headers={"accept": "application/json"}),
        # errors
        client.get("/v0/topics/missing"),
        client.patch("/v0/topics/p"),
        client.post("/v0/topics/p", content=b"{", headers=JSON),
    ]
    for r in responses:
        assert r.headers["content-type"].startswith("application/json"), r.url
        assert_performance(r.json())


# --- 415 -------------------------------------------------------------------------------

BODY_ROUTES: list[tuple[str, str, bytes]] = [
    ("PUT", "/v0/topics/t", b"{}"),
    ("POST", "/v0/topics/t", b'{"records": [{"data": 1}]}'),
    ("POST", "/v0/topics/t/diff", b"{}"),
    ("POST", "/v0/topics/t/delete", b'{"before_seq": 1}'),
]


@pytest.mark.parametrize(("method", "url", "body"), BODY_ROUTES)
def test_wrong_or_missing_content_type_is_415(
    client: TestClient, method: str, url: str, body: bytes
) -> None:
    append_data(client, "t", 0)
    for ctype in (None, "text/plain", "application/x-www-form-urlencoded", "application/jsonx"):
        headers = {} if ctype is None else {"content-type": ctype}
        r = client.request(method, url, content=body, headers=headers)
        assert_error(r, 415, "unsupported_media_type")
    assert state(client, "t")["head_seq"] == 1


def test_json_content_types_are_accepted(client: TestClient) -> None:
    ctypes = [
        "application/json",
        "application/json; charset=utf-8",
        "Application/JSON;charset=UTF-8",
    ]
    for n, ctype in enumerate(ctypes, start=1):
        r = client.post(
            "/v0/topics/t",
            content=b'{"records": [{"data": "\xc3\xa9"}]}',
            headers={"content-type": ctype},
        )
        assert ok(r, 200, 201)["seqs"] == [n]
    assert [x["data"] for x in diff(client, "t")["records"]] == ["é"] * 3


# --- 400 malformed JSON ----------------------------------------------------------------


MALFORMED = [
    b"{",
    b"not json",
    b'{"records": [}',
    b"\xff\xfe",
    b'{"a": NaN}',
    b'{"a": Infinity}',
    b"{}{}",
    b"'x'",
]
NOT_OBJECTS = [b"[]", b"1", b'"s"', b"null", b"true"]


@pytest.mark.parametrize(("method", "url", "_body"), BODY_ROUTES)
def test_malformed_or_non_object_json_is_400(
    client: TestClient, method: str, url: str, _body: bytes
) -> None:
    append_data(client, "t", 0)
    for raw in MALFORMED + NOT_OBJECTS:
        r = client.request(method, url, content=raw, headers=JSON)
        assert_error(r, 400, "invalid_request")
    assert state(client, "t")["head_seq"] == 1


def test_empty_append_body_is_400(client: TestClient) -> None:
    assert_error(client.post("/v0/topics/t"), 400, "invalid_request")
    assert_error(client.post("/v0/topics/t", content=b"", headers=JSON), 400, "invalid_request")


# --- 400 wrong types in every field -----------------------------------------------------

APPEND_BAD: list[dict[str, Any]] = [
    {"records": "x"},
    {"records": 1},
    {"records": [1]},
    {"records": [None]},
    {"records": [[]]},
    {"records": [{"tag": "x"}]},  # data is required
    {"records": [{"data": 1, "tag": 1}]},
    {"records": [{"data": 1, "tag": ["x"]}]},
    {"records": [{"data": 1, "node": False}]},
    {"records": [{"data": 1, "meta": "m"}]},
    {"records": [{"data": 1, "meta": [["k", "v"]]}]},
    {"records": [{"data": 1}], "node": 1},
    {"records": [{"data": 1}], "idempotency_key": 1},
    {"records": [{"data": 1}], "idempotency_key": {"k": 1}},
    {"records": [{"data": 1}], "create": "yes"},
    {"records": [{"data": 1}], "create": 1},
    {"records": [{"data": 1}], "config": "x"},
    {"records": [{"data": 1}], "config": {"ttl_ms": -1}},
    {"records": [{"data": 1}], "disable_backpressure": "no"},
    {"records": [{"data": 1}], "disable_backpressure": 0},
]


def test_append_wrong_types_are_400(client: TestClient) -> None:
    for body in APPEND_BAD:
        assert_error(client.post("/v0/topics/t", json=body), 400, "invalid_request")
    assert_error(client.get("/v0/topics/t"), 404, "topic_not_found")


def test_append_optional_fields_accept_null(client: TestClient) -> None:
    body = {
        "records": [{"data": 1, "tag": None, "node": None, "meta": None}],
        "node": None,
        "idempotency_key": None,
        "create": None,
        "config": None,
        "disable_backpressure": None,
    }
    rec = ok(client.post("/v0/topics/t", json=body), 201)
    assert rec["seqs"] == [1]
    assert set(diff(client, "t", include_tags=True)["records"][0]) == {"$seq", "$ts", "data"}


def test_disable_backpressure_is_accepted(client: TestClient) -> None:
    assert append_data(client, "t", 1, disable_backpressure=True)["seqs"] == [1]


DIFF_BAD: list[dict[str, Any]] = [
    {"from_seq": "1"},
    {"from_seq": -1},
    {"from_seq": 1.5},
    {"from_seq": True},
    {"from_seq": 2**64},
    {"limit": "10"},
    {"limit": -1},
    {"limit": 2.5},
    {"node": 5},
    {"node": [1]},
    {"node": ["a", None]},
    {"node": {"a": 1}},
    {"include_tags": "true"},
    {"include_tags": 1},
    {"include_meta": 0},
    {"include_meta": "false"},
    {"wait_ms": -1},
    {"wait_ms": "100"},
    {"wait_ms": 1.5},
]


def test_diff_wrong_types_are_400(client: TestClient) -> None:
    append_data(client, "t", 1)
    for body in DIFF_BAD:
        assert_error(client.post("/v0/topics/t/diff", json=body), 400, "invalid_request")


CONFIG_BAD: list[dict[str, Any]] = [
    {"type": "stream"},
    {"type": 1},
    {"ttl_ms": "1"},
    {"ttl_ms": -1},
    {"ttl_ms": 1.5},
    {"cap_records": True},
    {"cap_bytes": -5},
    {"discard": "new"},
    {"discard": None},
    {"durable": "true"},
    {"durable": 1},
    {"durability": "sync"},
    {"durability": True},
    {"priority": "high"},
    {"priority": 1.5},
    {"priority": True},
    {"auto_priority": "yes"},
    {"auto_create": 0},
    {"idempotency_window_ms": "120000"},
    {"dedupe_node": None},
    {"lease_ms": "30000"},
    {"claim_jitter_ms": -1},
    {"max_deliveries": "5"},
    {"dead_letter": 5},
    {"dead_letter": "bad name"},
    {"leases_durable": "no"},
    {"unknown_field": 1},
]


def test_put_config_wrong_types_are_400(client: TestClient) -> None:
    for body in CONFIG_BAD:
        assert_error(client.put("/v0/topics/t", json=body), 400, "invalid_request")
    assert_error(client.get("/v0/topics/t"), 404, "topic_not_found")


def test_bad_config_on_existing_topic_changes_nothing(client: TestClient) -> None:
    put_topic(client, "t", {"ttl_ms": 5})
    assert_error(
        client.put("/v0/topics/t", json={"ttl_ms": 7, "discard": "x"}), 400, "invalid_request"
    )
    assert state(client, "t")["config"]["ttl_ms"] == 5


def test_bad_query_parameters_are_400(client: TestClient) -> None:
    put_topic(client, "t")
    for url, params in [
        ("/v0/topics/t", {"touch": "maybe"}),
        ("/v0/topics", {"touch": "2"}),
        ("/v0/topics", {"page_size": "-1"}),
        ("/v0/topics", {"page_size": "ten"}),
    ]:
        assert_error(client.get(url, params=params), 400, "invalid_request")
    assert_error(
        client.delete("/v0/topics/t", params={"if_empty": "perhaps"}), 400, "invalid_request"
    )
    assert_error(
        client.delete("/v0/topics/t", params={"if_empty": "perhaps"}), 400, "invalid_request"
    )
    assert state(client, "t")["head_seq"] == 0


# --- 413 -------------------------------------------------------------------------------


@pytest.fixture
def small_body(make_client: MakeClient) -> TestClient:
    return make_client(limits=Limits(max_body_bytes=1000))


def test_body_over_limit_is_413(small_body: TestClient) -> None:
    fits = json.dumps({"records": [{"data": "x" * 900}]}).encode()
    assert len(fits) <= 1000
    assert ok(small_body.post("/v0/topics/b", content=fits, headers=JSON), 201)
    big = json.dumps({"records": [{"data": "x" * 1000}]}).encode()
    assert_error(
        small_body.post("/v0/topics/b", content=big, headers=JSON), 413, "payload_too_large"
    )
    assert state(small_body, "b")["head_seq"] == 1


def test_413_is_checked_before_parsing(small_body: TestClient) -> None:
    for method, url, _ in BODY_ROUTES:
        # GIVEN an oversized body that is not even JSON, with the wrong content type
        r = small_body.request(
            method, url, content=b"\x00garbage" * 500, headers={"content-type": "text/plain"}
        )
        # THEN the size check wins
        assert_error(r, 413, "payload_too_large")


def test_413_for_chunked_body_without_content_length(small_body: TestClient) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"records": [{"data": "'
        for _ in range(20):
            yield b"x" * 100
        yield b'"}]}'

    r = small_body.post("/v0/topics/b", content=chunks(), headers=JSON)
    assert_error(r, 413, "payload_too_large")
    assert_error(small_body.get("/v0/topics/b"), 404, "topic_not_found")


def test_413_for_gzip_bomb(small_body: TestClient) -> None:
    raw = json.dumps({"records": [{"data": "x" * 50_000}]}).encode()
    packed = gzip.compress(raw)
    assert len(packed) < 1000
    r = small_body.post(
        "/v0/topics/b", content=packed, headers={**JSON, "content-encoding": "gzip"}
    )
    assert_error(r, 413, "payload_too_large")


# --- gzip request bodies ---------------------------------------------------------------


def test_gzip_request_body_is_accepted(client: TestClient) -> None:
    raw = json.dumps({"records": [{"data": {"i": i, "pad": "p" * 50}} for i in range(50)]}).encode()
    r = client.post(
        "/v0/topics/gz", content=gzip.compress(raw), headers={**JSON, "content-encoding": "gzip"}
    )
    assert ok(r, 201)["seqs"] == list(range(1, 51))
    recs = diff(client, "gz")["records"]
    assert [x["data"]["i"] for x in recs] == list(range(50))
    # other JSON routes take gzip bodies too
    r = client.post(
        "/v0/topics/gz/diff",
        content=gzip.compress(b'{"from_seq": 49}'),
        headers={**JSON, "Content-Encoding": "GZIP"},
    )
    assert [x["$seq"] for x in ok(r)["records"]] == [50]
    r = client.put(
        "/v0/topics/gz",
        content=gzip.compress(b'{"ttl_ms": 9}'),
        headers={**JSON, "content-encoding": "gzip"},
    )
    assert ok(r)["config"]["ttl_ms"] == 9


def test_bad_gzip_is_400(client: TestClient) -> None:
    truncated = gzip.compress(b'{"records": [{"data": 1}]}')[:-6]
    for raw in (b"not gzip at all", truncated, b"\x1f\x8b\x08\x00garbage"):
        r = client.post("/v0/topics/gz", content=raw, headers={**JSON, "content-encoding": "gzip"})
        assert_error(r, 400, "invalid_request")
    assert_error(client.get("/v0/topics/gz"), 404, "topic_not_found")


def test_unsupported_content_encoding_is_415(client: TestClient) -> None:
    r = client.post(
        "/v0/topics/gz",
        content=b'{"records": [{"data": 1}]}',
        headers={**JSON, "content-encoding": "br"},
    )
    assert_error(r, 415, "unsupported_media_type")


def test_gzip_response_when_accepted(client: TestClient) -> None:
    append_data(client, "gz", *["x" * 100 for _ in range(50)])
    r = client.post("/v0/topics/gz/diff", json={}, headers={"accept-encoding": "gzip"})
    assert r.status_code == 200 and r.headers.get("content-encoding") == "gzip"
    assert len(r.json()["records"]) == 50  # httpx decodes transparently


# --- 500 / 503 -------------------------------------------------------------------------


@pytest.fixture
def lenient(settings: Settings, aws: AwsClients) -> Iterator[TestClient]:
    """A client that returns server errors as responses instead of re-raising them."""
    with TestClient(create_app(settings, aws), raise_server_exceptions=False) as c:
        yield c


def test_unexpected_error_is_500_internal_in_envelope(
    lenient: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = lenient.app.state.services.get().engine  # type: ignore[attr-defined]

    async def bug(*args: object, **kwargs: object) -> None:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(engine, "get_topic", bug)
    err = assert_error(lenient.get("/v0/topics/t"), 500, "internal")
    assert "secret internals" not in err["message"]


def test_storage_failure_is_503_with_retry_after(
    lenient: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = lenient.app.state.services.get().engine  # type: ignore[attr-defined]

    async def down(*args: object, **kwargs: object) -> None:
        raise StorageUnavailable("storage error: ThrottlingException")

    monkeypatch.setattr(engine, "append", down)
    r = lenient.post("/v0/topics/t", json={"records": [{"data": 1}]})
    assert_error(r, 503, "storage_unavailable")
    assert int(r.headers["retry-after"]) >= 1
