"""The hostile tester's reproductions (issue 23, item 3), one by one: deep JSON, lone
surrogates in names and keys, numbers beyond float range, oversized digit strings. Each is a
400 in its surface's envelope, before any storage call (nothing written), and what the
parsers accept is stored and served back exactly. (test_hostile_input.py sweeps every route;
docs/v0-topics.md "Bad input" states the limits.)"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest
from api_helpers import MakeClient, append_data, assert_error, path, put_topic, state
from dashboard_helpers import fast, item
from flags_helpers import SVC, flag_settings
from starlette.testclient import TestClient
from test_notify_http import SCHEMA, notify_settings
from test_ws import recv, request

from headwater.jsoncodec import MAX_DEPTH
from headwater.notify.requests import MAX_DEPTH as NOTIFY_MAX_DEPTH

pytestmark = pytest.mark.api

JSON = {"content-type": "application/json"}
FLAG_AUTH = {"authorization": f"Bearer {SVC}"}
NOTE = {
    "event_type": "extreme",
    "identifier": {"region": "north", "run_time": "1200", "severity": "3", "anomaly": "12.5"},
    "payload": {"n": 1},
}


@pytest.fixture
def api(make_client: MakeClient, tmp_path: Any) -> TestClient:
    schema = tmp_path / "schema.yaml"
    schema.write_text(SCHEMA)
    return make_client(notify=notify_settings(str(schema)), flags=flag_settings(), dashboard=fast())


def nested(depth: int, inner: bytes = b"1") -> bytes:
    return b"[" * depth + inner + b"]" * depth


def post_raw(client: TestClient, url: str, raw: bytes, **headers: str) -> httpx.Response:
    return client.post(url, content=raw, headers={**JSON, **headers})


def ascii_json(body: Any) -> bytes:
    """JSON with \\u escapes: how a client sends a lone surrogate (httpx's json= cannot)."""
    return json.dumps(body, separators=(",", ":")).encode()


def send(client: TestClient, method: str, url: str, body: Any, **headers: str) -> httpx.Response:
    return client.request(method, url, content=ascii_json(body), headers={**JSON, **headers})


# --- nesting ---------------------------------------------------------------------------------
def test_deep_json_is_400_on_every_surface(api: TestClient) -> None:
    deep = nested(10_000)
    put_topic(api, "t")
    assert api.put("/v1/stream/s", headers=JSON).status_code == 201
    for url in (path("t"), path("t", "/diff"), "/v0/watch"):
        err = assert_error(post_raw(api, url, b'{"records":' + deep + b"}"), 400, "invalid_request")
        assert f"nested deeper than {MAX_DEPTH} levels" in err["message"]
    resp = post_raw(api, "/v1/stream/s", deep)
    assert resp.status_code == 400 and set(resp.json()) == {"error"}
    for kind in ("notification", "watch", "replay"):
        resp = post_raw(api, f"/api/v1/{kind}", b'{"payload":' + deep + b"}")
        assert resp.status_code == 400 and resp.json()["code"] == "INVALID_JSON"
    resp = api.request("DELETE", "/api/v1/admin/wipe/stream", content=deep)
    assert resp.status_code == 400 and resp.json()["success"] is False
    resp = api.put(
        "/api/v1/tenants/acme/namespaces/billing/manifest",
        content=b'{"files":' + deep + b"}",
        headers={**JSON, **FLAG_AUTH},
    )
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_request"
    resp = post_raw(api, "/api/v2/sentiment", deep)
    assert resp.status_code == 400 and "nested deeper" in resp.json()["detail"]
    assert state(api, "t")["head_seq"] == 0


def test_the_deepest_accepted_record_is_stored_and_served_exactly(api: TestClient) -> None:
    put_topic(api, "t")
    data = nested(MAX_DEPTH - 3, b'"\\ud800"')  # body {records: [{data: ...}]} is 1024 deep
    resp = post_raw(api, path("t"), b'{"records":[{"data":' + data + b"}]}")
    assert resp.status_code == 200, resp.text
    raw = api.post(path("t", "/diff"), json={}).content  # bytes: too deep for json.loads here
    assert b'"data":' + data + b"}" in raw
    one_more = b'{"records":[{"data":[' + data + b"]}]}"
    assert_error(post_raw(api, path("t"), one_more), 400, "invalid_request")
    assert state(api, "t")["head_seq"] == 1


def test_the_deepest_accepted_durable_stream_entry_reads_back_exactly(api: TestClient) -> None:
    assert api.put("/v1/stream/s", headers=JSON).status_code == 201
    entry = nested(MAX_DEPTH - 1, b"123456789012345678901234567890")  # 1024 with the batch
    assert post_raw(api, "/v1/stream/s", b"[" + entry + b"]").status_code == 204
    assert api.get("/v1/stream/s", params={"offset": "-1"}).content == b"[" + entry + b"]"
    assert post_raw(api, "/v1/stream/s", b"[[" + entry + b"]]").status_code == 400


def test_a_router_forwards_the_deepest_accepted_record(api: TestClient) -> None:
    put_topic(api, "src")
    put_topic(api, "dst")
    assert api.put("/v0/routers/r", json={"source": "src", "dest": "dst"}).status_code == 201
    data = nested(MAX_DEPTH - 3)
    assert post_raw(api, path("src"), b'{"records":[{"data":' + data + b"}]}").status_code == 200
    append_data(api, "src", "after")
    deadline = time.monotonic() + 20
    while api.get("/v0/routers/r").json()["forwarded_total"] < 2:
        assert time.monotonic() < deadline, "the router is stuck on the deep record"
        time.sleep(0.1)
    assert b'"data":' + data + b"}" in api.post(path("dst", "/diff"), json={}).content


def test_notification_bodies_nest_as_deep_as_serde_json_allows(api: TestClient) -> None:
    ok = {**NOTE, "payload": "PAYLOAD"}
    inner = nested(NOTIFY_MAX_DEPTH - 1)  # the body object is the first level
    body = ascii_json(ok).replace(b'"PAYLOAD"', inner)
    first = post_raw(api, "/api/v1/notification", body)
    assert first.status_code == 200, first.text
    deeper = ascii_json(ok).replace(b'"PAYLOAD"', b"[" + inner + b"]")
    resp = post_raw(api, "/api/v1/notification", deeper)
    assert resp.status_code == 400 and resp.json()["code"] == "INVALID_JSON"
    column = deeper.index(b"[" * NOTIFY_MAX_DEPTH) + NOTIFY_MAX_DEPTH  # the 128th level
    assert resp.json()["message"] == (
        f"JSON parsing failed: recursion limit exceeded at line 1 column {column}"
    )


# --- lone surrogates -------------------------------------------------------------------------
SURROGATE = "\ud800"


@pytest.mark.parametrize(
    ("suffix", "body", "field"),
    [
        ("", {"records": [{"data": 1, "tag": SURROGATE}]}, "tag"),
        ("", {"records": [{"data": 1, "node": "a\udfffb"}]}, "node"),
        ("", {"records": [{"data": 1}], "node": SURROGATE}, "node"),
        ("", {"records": [{"data": 1}], "idempotency_key": SURROGATE}, "idempotency_key"),
        ("/diff", {"node": SURROGATE}, "node"),
        ("/diff", {"node": ["ok", SURROGATE]}, "node"),
        ("/delete", {"match": SURROGATE}, "match"),
        ("/delete", {"match": ["tag", "Glob", SURROGATE + "*"]}, "match"),
    ],
)
def test_lone_surrogates_in_names_are_400_before_storage(
    api: TestClient, suffix: str, body: dict[str, Any], field: str
) -> None:
    put_topic(api, "t")
    append_data(api, "t", 1)
    t0 = time.monotonic()
    err = assert_error(send(api, "POST", path("t", suffix), body), 400, "invalid_request")
    assert err["detail"] == {"field": field} and "lone surrogates" in err["message"]
    assert time.monotonic() - t0 < 1.5  # not a storage call retried until it gave up
    assert state(api, "t")["head_seq"] == 1


@pytest.mark.parametrize(
    ("verb", "bad"),
    [
        ("claim", {"node": SURROGATE}),
        ("ack", {"node": SURROGATE}),
        ("nack", {"node": SURROGATE}),
        ("extend", {"node": SURROGATE}),
        ("ack", {"lease_ids": [f"lease_{SURROGATE}"]}),
        ("nack", {"lease_ids": [f"lease_{SURROGATE}"]}),
        ("extend", {"lease_ids": [f"lease_{SURROGATE}"]}),
    ],
)
def test_lone_surrogates_in_queue_commands_are_400(
    api: TestClient, verb: str, bad: dict[str, str]
) -> None:
    put_topic(api, "q", {"type": "queue"})
    append_data(api, "q", {"job": 1})
    body = {"node": "w1", "seqs": [1], "lease_ids": ["lease_00"], "lease_ms": 1000, **bad}
    field = "node" if "node" in bad else "lease_ids"
    err = assert_error(send(api, "POST", path("q", f"/{verb}"), body), 400, "invalid_request")
    assert err["detail"]["field"] == field
    assert api.get(path("q"), params={"touch": "false"}).json()["queue"]["in_flight"] == 0


def test_lone_surrogates_elsewhere_are_400(api: TestClient) -> None:
    put_topic(api, "t")
    watch = {"topics": {"t": {}}, "node": SURROGATE}
    assert_error(send(api, "POST", "/v0/watch", watch), 400, "invalid_request")
    router = {"source": "t", "dest": "u", "filter": ["tag", "Eq", SURROGATE]}
    assert_error(send(api, "PUT", "/v0/routers/r", router), 400, "invalid_request")
    assert api.get("/v0/routers/r").status_code == 404
    body = {"name": SURROGATE, "tickers": ["AAPL"]}
    cfg = send(api, "POST", "/api/v2/configurations", body, **{"x-user-id": "u"})
    assert cfg.status_code == 400 and cfg.json()["errors"][0]["field"] == "name"
    low = ascii_json(NOTE).replace(b'"north"', b'"\\udfff"')  # a low one: serde refuses both
    resp = post_raw(api, "/api/v1/notification", low)
    assert resp.status_code == 400 and resp.json()["code"] == "INVALID_JSON"


def test_lone_surrogates_in_payloads_are_stored_exactly_names_are_not(api: TestClient) -> None:
    # Payloads (data, meta) are JSON the server stores as text: a \\ud800 escape is kept
    # and served back as sent. A name in the same batch with one fails the whole batch.
    put_topic(api, "t")
    record = b'{"data":{"s":"a\\ud800b","\\udfff":1},"meta":{"m":"\\udc00"}'
    bad = b'{"records":[' + record + b"}," + record + b',"tag":"\\ud800"}]}'
    assert_error(post_raw(api, path("t"), bad), 400, "invalid_request")
    assert post_raw(api, path("t"), b'{"records":[' + record + b"}]}").status_code == 200
    raw = api.post(path("t", "/diff"), json={}).content
    assert b'"data":{"s":"a\\ud800b","\\udfff":1}' in raw and b'"meta":{"m":"\\udc00"}' in raw
    assert state(api, "t")["head_seq"] == 1


@pytest.mark.parametrize(
    ("profile", "schema", "field"),
    [
        (
            None,
            {"schema": {"type": "object"}, "routingKey": {"jsonPointer": "/a", "required": True}},
            "a",
        ),
        ({"profile": {"kind": "evlog"}}, None, "requestId"),
    ],
)
def test_routing_keys_taken_from_entries_follow_stream_key_rules(
    api: TestClient, profile: dict[str, Any] | None, schema: dict[str, Any] | None, field: str
) -> None:
    # A routing key derived from an entry becomes the record's tag, like a Stream-Key header.
    assert api.put("/v1/stream/s", headers=JSON).status_code == 201
    if schema is not None:
        assert api.post("/v1/stream/s/_schema", json=schema).status_code == 200
    if profile is not None:
        assert api.post("/v1/stream/s/_profile", json=profile).status_code == 200
    for bad in (b"\\ud800", b"k" * 257, b"k" * 5000):
        resp = post_raw(api, "/v1/stream/s", b'[{"' + field.encode() + b'":"' + bad + b'"}]')
        assert resp.status_code == 400, (bad[:10], resp.text)
        assert resp.json()["error"]["code"] == "invalid_request"
    assert post_raw(api, "/v1/stream/s", ascii_json([{field: "k" * 256}])).status_code == 204
    entries = api.get("/v1/stream/s/pk/" + "k" * 256, params={"offset": "-1"}).json()
    assert [e[field] for e in entries] == ["k" * 256]  # stored under that key


# --- numbers ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("field", "literal"),
    [
        ("score", b"1" + b"0" * 400),
        ("score", b"-1" + b"0" * 400),
        ("confidence", b"1" + b"0" * 400),
    ],
)
def test_sentiment_numbers_beyond_float_range_are_400(
    api: TestClient, field: str, literal: bytes
) -> None:
    body = ascii_json({"items": [item(**{field: 0.5})]}).replace(b"0.5", literal, 1)
    resp = post_raw(api, "/api/v2/sentiment", body)
    assert resp.status_code == 400, resp.text
    assert isinstance(resp.json()["detail"], str)
    metrics = api.get("/api/v2/metrics").json()
    assert metrics["total"] == 0


def test_oversized_digit_strings_in_queries_are_400(api: TestClient) -> None:
    huge = "9" * 5000
    resp = api.get("/v1/streams", params={"limit": huge})
    assert resp.status_code == 400 and set(resp.json()) == {"error"}
    resp = api.get("/v1/streams", params={"limit": "\u00b2"})  # a digit to isdigit(), not int()
    assert resp.status_code == 400
    url = "/api/v1/tenants/acme/namespaces/billing/closure"
    resp = api.get(url, params={"version": huge, "subscription": "Kg"}, headers=FLAG_AUTH)
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_request"


def test_an_idempotency_key_header_out_of_range_is_400_on_the_dashboard(api: TestClient) -> None:
    for key in ("", "k" * 257):
        resp = api.post("/api/v2/sentiment", json=item(), headers={"idempotency-key": key})
        assert resp.status_code == 400 and "Idempotency-Key" in resp.json()["detail"]
    assert api.post("/api/v2/sentiment", json=item(), headers={"idempotency-key": "k"}).is_success


# --- other parsers that recursed -------------------------------------------------------------
def test_deep_toml_in_a_flag_manifest_is_a_lint_finding(api: TestClient) -> None:
    files = {"namespace.toml": "a = " + "[" * 3000 + "]" * 3000 + "\n"}
    resp = api.put(
        "/api/v1/tenants/acme/namespaces/billing/manifest",
        json={"files": files},
        headers=FLAG_AUTH,
    )
    assert resp.status_code == 422, resp.text
    assert resp.json()["error"]["details"][0]["code"] == "invalid_toml"


def test_deep_json_schemas_and_deep_values_against_them_are_400(api: TestClient) -> None:
    assert api.put("/v1/stream/s", headers=JSON).status_code == 201
    schema = b'{"type":' + nested(1000, b'"object"') + b"}"
    resp = post_raw(api, "/v1/stream/s/_schema", b'{"schema":' + schema + b"}")
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_schema"
    recursive = {"schema": {"type": "array", "items": {"$ref": "#"}}}
    assert api.post("/v1/stream/s/_schema", json=recursive).status_code == 200
    assert post_raw(api, "/v1/stream/s", b"[" + nested(900, b"") + b"]").status_code == 400
    assert post_raw(api, "/v1/stream/s", b"[[[]]]").status_code == 204


# --- the WebSocket data plane ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ('{"op": "ping", "x": ' + "[" * 10_000 + "]" * 10_000 + "}", None),
        ('{"op": "publish", "topic": "t", "records": [{"data": 1, "tag": "\\ud800"}]}', "tag"),
        ('{"op": "publish", "topic": "t", "records": [{"data": 1}], "node": "\\udfff"}', "node"),
        ('{"op": "subscribe", "topic": "t", "node": "\\ud800"}', "node"),
    ],
)
def test_hostile_websocket_commands_are_invalid_requests(
    api: TestClient, raw: str, field: str | None
) -> None:
    put_topic(api, "t")
    with api.websocket_connect("/v0/ws") as ws:
        ws.send_text(raw)
        err = ws_error(recv(ws))
        assert err["code"] == "invalid_request", err
        if field is not None:
            assert err["detail"] == {"field": field}
        assert request(ws, op="ping", request_id="after")["op"] == "pong"
    assert state(api, "t")["head_seq"] == 0


def ws_error(frame: dict[str, Any]) -> dict[str, Any]:
    assert frame["op"] == "error", frame
    return frame
