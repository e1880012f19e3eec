"""/api/v1 over HTTP (headwater.http.notifications) through the whole app against moto: every
error code path, the notify -> replay round trip with CloudEvents, live watches, polygon and
point filters, from_date, constraints, X-Request-ID, the schema and admin routes, API-key
scopes, and shutdown closing open streams. Tests marked `aviso:` port aviso-server's
tests/api/streaming.rs, admin.rs, request_id.rs and schema.rs."""

from __future__ import annotations

import dataclasses
import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from api_helpers import MakeClient
from starlette.testclient import TestClient
from test_tiering import services

from headwater.errors import ConfigurationError, StorageUnavailable
from headwater.http.app import begin_shutdown, create_app
from headwater.http.limits import is_stream_request
from headwater.settings import NotifySettings, Settings, StreamSettings
from headwater.storage.clients import AwsClients

pytestmark = pytest.mark.api

UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
INSIDE = "(52.5,13.4,52.6,13.5,52.5,13.6,52.4,13.5,52.5,13.4)"  # aviso: test_polygon()
OUTSIDE = "(10.0,10.0,10.2,10.0,10.2,10.2,10.0,10.2,10.0,10.0)"  # aviso: outside_polygon()
DOMAINS = "[a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, q, r, s, t, u, v, w, x, y, z]"

# aviso's test schemas (tests/api/helpers.rs), with the auth blocks of its config example
SCHEMA = f"""
notification_schema:
  mars:
    payload: {{required: false}}
    topic:
      base: mars
      key_order: [class, expver, domain, date, time, stream, step]
    auth:
      required: true
      read_roles: {{localrealm: ["*"]}}
      write_roles: {{localrealm: [producer]}}
    identifier:
      class: {{type: StringHandler, max_length: 2, required: true,
               description: "MARS class, for example od for operational data."}}
      expver: {{type: ExpverHandler, default: "0001", required: false}}
      domain: {{type: EnumHandler, values: {DOMAINS}, required: false}}
      date: {{type: DateHandler, canonical_format: "%Y%m%d", required: false}}
      time: {{type: TimeHandler, required: false}}
      stream: {{type: StringHandler, required: false}}
      step: {{type: IntHandler, range: [0, 100000], required: false}}
  dissemination:
    payload: {{required: true}}
    topic:
      base: diss
      key_order: [destination, target, class, expver, domain, date, time, stream, step]
    auth: {{required: true}}
    identifier:
      destination: {{type: StringHandler, required: true}}
      target: {{type: StringHandler, required: false}}
      class: {{type: StringHandler, max_length: 2, required: true}}
      expver: {{type: ExpverHandler, default: "0001", required: false}}
      domain: {{type: EnumHandler, values: {DOMAINS}, required: false}}
      date: {{type: DateHandler, canonical_format: "%Y%m%d", required: false}}
      time: {{type: TimeHandler, required: false}}
      stream: {{type: StringHandler, required: false}}
      step: {{type: IntHandler, range: [0, 100000], required: false}}
  test_polygon:
    payload: {{required: true}}
    topic: {{base: polygon, key_order: [date, time]}}
    identifier:
      date: {{type: DateHandler, canonical_format: "%Y%m%d", required: false}}
      time: {{type: TimeHandler, required: false}}
      polygon: {{type: PolygonHandler, required: true}}
  test_polygon_optional:
    payload: {{required: true}}
    topic: {{base: polygon_optional, key_order: [date, time]}}
    identifier:
      date: {{type: DateHandler, canonical_format: "%Y%m%d", required: false}}
      time: {{type: TimeHandler, required: false}}
      polygon: {{type: PolygonHandler, required: false}}
  extreme:
    payload: {{required: false}}
    topic: {{base: extreme, key_order: [region, run_time, severity, anomaly]}}
    identifier:
      region: {{type: EnumHandler, values: [north, south, east, west], required: false}}
      run_time: {{type: TimeHandler, required: false}}
      severity: {{type: IntHandler, range: [1, 7], required: false}}
      anomaly: {{type: FloatHandler, range: [0.0, 200.0], required: false}}
"""
EVENT_TYPES = ["dissemination", "extreme", "mars", "test_polygon", "test_polygon_optional"]
KEYS = "adm-key:admin,rw-key:read+write,ro-key:read,mars-only:read+write:mars"


@pytest.fixture(scope="module")
def schema_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("notify") / "schema.yaml"
    path.write_text(SCHEMA)
    return str(path)


def notify_settings(schema: str, **stream: Any) -> NotifySettings:
    cfg = {"replay_batch_delay_ms": 0, "sse_heartbeat_interval_sec": 1, **stream}
    return NotifySettings(schema=schema, base_url="http://aviso.test", stream=StreamSettings(**cfg))


@pytest.fixture
def api(make_client: MakeClient, schema_path: str) -> TestClient:
    return make_client(notify=notify_settings(schema_path))


@pytest.fixture
def keyed(make_client: MakeClient, schema_path: str) -> TestClient:
    return make_client(notify=notify_settings(schema_path), api_keys_raw=KEYS)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


# --- helpers -------------------------------------------------------------------------------------
def mars(note: str, *, stream: str = "enfo", step: str = "1", domain: str = "g") -> dict[str, Any]:
    """aviso: post_mars_notification_with_identifier's body."""
    return {
        "event_type": "mars",
        "identifier": {
            "class": "od",
            "expver": "0001",
            "domain": domain,
            "date": "20250706",
            "time": "1200",
            "stream": stream,
            "step": step,
        },
        "payload": note,
    }


def polygon_note(
    note: str, polygon: str = INSIDE, event_type: str = "test_polygon"
) -> dict[str, Any]:
    return {
        "event_type": event_type,
        "identifier": {"date": "20250706", "time": "1200", "polygon": polygon},
        "payload": {"note": note},
    }


def notify(client: TestClient, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
    resp = client.post("/api/v1/notification", json=body, **kw)
    assert resp.status_code == 200, resp.text
    out: dict[str, Any] = resp.json()
    return out


def frames_of(text: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        lines = block.split("\n")
        assert lines[0].startswith("event: ") and lines[1].startswith("data: "), block
        out.append((lines[0][7:], json.loads(lines[1][6:])))
    return out


def replay(client: TestClient, body: dict[str, Any], **kw: Any) -> list[tuple[str, dict[str, Any]]]:
    resp = client.post("/api/v1/replay", json=body, **kw)
    assert resp.status_code == 200, resp.text
    return frames_of(resp.text)


def replayed(frames: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    return [data for event, data in frames if event == "replay"]


def assert_aviso_error(resp: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    body: dict[str, Any] = resp.json()
    assert body["code"] == code, body
    rid = resp.headers["x-request-id"]
    assert UUID.match(rid) and body["request_id"] == rid
    assert list(body) == sorted(body)  # serde_json maps: sorted keys
    return body


class Sse:
    """Frames of an open SSE response, read as they come (heartbeats keep it moving)."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.lines = response.iter_lines()

    def next(self) -> tuple[str, dict[str, Any]]:
        event = None
        for line in self.lines:
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: ") and event is not None:
                return event, json.loads(line[6:])
        raise EOFError("stream ended")

    def until(
        self, done: Callable[[str, dict[str, Any]], bool], timeout_s: float = 10.0
    ) -> list[tuple[str, dict[str, Any]]]:
        """Frames up to and including the first for which `done` holds (heartbeats too)."""
        seen: list[tuple[str, dict[str, Any]]] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            frame = self.next()
            seen.append(frame)
            if done(*frame):
                return seen
        raise AssertionError(f"no matching frame in {timeout_s}s: {seen}")


@contextmanager
def watching(client: TestClient, body: dict[str, Any], **kw: Any) -> Iterator[Sse]:
    with client.stream("POST", "/api/v1/watch", json=body, **kw) as resp:
        assert resp.status_code == 200, resp.read()
        yield Sse(resp)


def is_notification(event: str, _data: dict[str, Any]) -> bool:
    return event in ("live-notification", "replay") and "specversion" in _data


def closing(event: str, _data: dict[str, Any]) -> bool:
    return event == "connection-closing"


# --- notify --------------------------------------------------------------------------------------
def test_notify_answers_avisos_body_with_the_request_id(api: TestClient) -> None:
    resp = api.post("/api/v1/notification", json=mars("hello"))
    assert resp.status_code == 200
    body = resp.json()
    # aviso's NotificationResponse: struct fields in declaration order
    assert list(body) == ["status", "request_id", "processed_at"]
    assert body["status"] == "success" and STAMP.match(body["processed_at"])
    assert UUID.match(body["request_id"]) and resp.headers["x-request-id"] == body["request_id"]
    assert resp.headers["content-type"] == "application/json"


def test_notify_round_trip_through_replay_with_cloudevents(api: TestClient) -> None:
    with_payload = mars("x")
    with_payload["payload"] = {"z": [1.0, 2, "é"], "a": {"y": None, "b": True}, "n": 12.5}
    notify(api, with_payload)
    without = mars("")
    del without["payload"]
    notify(api, without)
    notify(api, mars("plain string"))
    frames = replay(api, {**{k: v for k, v in mars("").items() if k != "payload"}, "from_id": "1"})
    assert [e for e, _ in frames] == [
        "replay-control",
        "replay",
        "replay",
        "replay",
        "replay-control",
        "connection-closing",
    ]
    started, events = frames[0][1], replayed(frames)
    assert started["type"] == "replay_started" and started["from_sequence"] == 1
    assert [e["id"] for e in events] == ["mars@1", "mars@2", "mars@3"]
    first = events[0]
    assert first == {
        "data": {
            "identifier": {
                "class": "od",
                "date": "20250706",
                "domain": "g",
                "expver": "0001",
                "step": "1",
                "stream": "enfo",
                "time": "1200",
            },
            "payload": {"a": {"b": True, "y": None}, "n": 12.5, "z": [1.0, 2, "é"]},
        },
        "datacontenttype": "application/json",
        "dataschema": "http://aviso.test/schema/mars",
        "id": "mars@1",
        "source": "http://aviso.test",
        "specversion": "1.0",
        "time": first["time"],
        "type": "int.ecmwf.aviso.mars",
    }
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3})?Z", first["time"])
    # payload omitted -> null; a scalar payload stays a scalar (never reshaped)
    assert events[1]["data"]["payload"] is None
    assert events[2]["data"]["payload"] == "plain string"
    assert frames[-1][1]["reason"] == "end_of_stream"


def test_replay_payload_bytes_are_avisos(api: TestClient) -> None:
    body = mars("")
    body["payload"] = {"b": 1.0, "a": "ü"}
    notify(api, body)
    resp = api.post("/api/v1/replay", json={**body, "payload": None, "from_id": "1"})
    # serde_json: sorted keys, 1.0 stays 1.0, non-ASCII unescaped
    assert '"payload":{"a":"ü","b":1.0}},"datacontenttype"' in resp.text


def test_from_id_is_inclusive(api: TestClient) -> None:
    for i in range(4):
        notify(api, mars(f"n{i}"))
    ids = [e["id"] for e in replayed(replay(api, {**mars(""), "from_id": "3"}))]
    assert ids == ["mars@3", "mars@4"]


def test_replay_with_no_match_is_empty_but_complete(api: TestClient) -> None:
    notify(api, mars("x", stream="enfo"))
    frames = replay(api, {**mars("", stream="other"), "from_id": "1"})
    assert [e for e, _ in frames] == ["replay-control", "replay-control", "connection-closing"]


# --- errors: every code path, never a 500 --------------------------------------------------------
@pytest.mark.parametrize(
    ("route", "label"),
    [
        ("notification", "Invalid Notification Request"),
        ("watch", "Invalid Watch Request"),
        ("replay", "Invalid Replay Request"),
    ],
)
def test_malformed_json_is_invalid_json(api: TestClient, route: str, label: str) -> None:
    for raw in (b"not-valid-json", b"{", b'{"event_type": NaN}', b"\xff\xfe", b""):
        body = assert_aviso_error(api.post(f"/api/v1/{route}", content=raw), 400, "INVALID_JSON")
        assert body["error"] == label
        assert body["message"].startswith("JSON parsing failed: ")
        assert body["details"] == body["message"]


@pytest.mark.parametrize("route", ["notification", "watch", "replay"])
def test_unknown_top_level_field(api: TestClient, route: str) -> None:
    resp = api.post(f"/api/v1/{route}", json={**mars("x"), "extra": 1, "another": 2})
    body = assert_aviso_error(resp, 400, "UNKNOWN_FIELD")
    assert body["message"] == (
        "Request contains unknown fields: Unknown field 'another' in request. Allowed fields: "
        '["event_type", "identifier", "from_id", "from_date", "payload"]'
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            [1, 2],
            "Request deserialization failed: invalid type: sequence, expected struct "
            "NotificationRequest",
        ),
        (
            {"event_type": 1, "identifier": {}},
            "Request deserialization failed: invalid type: integer `1`, expected a string",
        ),
        ({"event_type": "mars"}, "Request deserialization failed: missing field `identifier`"),
        (
            {"event_type": "mars", "identifier": []},
            "Request deserialization failed: invalid type: sequence, expected a map",
        ),
        (
            {"event_type": "mars", "identifier": {}, "from_id": 3},
            "Request deserialization failed: invalid type: integer `3`, expected a string",
        ),
    ],
)
def test_bad_shapes_are_invalid_request_shape(api: TestClient, body: Any, message: str) -> None:
    resp = api.post("/api/v1/watch", json=body)
    assert assert_aviso_error(resp, 400, "INVALID_REQUEST_SHAPE")["message"] == message


@pytest.mark.parametrize("route", ["notification", "watch", "replay"])
def test_unknown_event_type_lists_the_configured_ones(api: TestClient, route: str) -> None:
    resp = api.post(f"/api/v1/{route}", json={"event_type": "nope", "identifier": {"x": 1}})
    body = assert_aviso_error(resp, 400, "UNKNOWN_EVENT_TYPE")
    assert body == {
        "code": "UNKNOWN_EVENT_TYPE",
        "configured_event_types": EVENT_TYPES,
        "error": "unknown_event_type",
        "message": "unknown event type 'nope'",
        "request_id": body["request_id"],
    }


def test_without_a_schema_every_event_type_is_unknown(make_client: MakeClient) -> None:
    bare = make_client()  # no HEADWATER_NOTIFICATION_SCHEMA
    body = assert_aviso_error(
        bare.post("/api/v1/notification", json=mars("x")), 400, "UNKNOWN_EVENT_TYPE"
    )
    assert body["configured_event_types"] == []
    listing = bare.get("/api/v1/schema")
    assert listing.status_code == 200 and listing.json() == {
        "event_types": [],
        "message": "No notification schema configured",
        "schema": {},
        "status": "success",
        "total_schemas": 0,
    }
    one = bare.get("/api/v1/schema/mars")
    assert one.status_code == 404 and one.json()["message"] == "No notification schema configured"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {**mars("x"), "identifier": {"class": "od"}},
            "Required field 'expver' missing for notify operation",
        ),
        (
            {**mars("x"), "identifier": {**mars("x")["identifier"], "step": {"gte": 4}}},
            "Field 'step' constraint object is not supported for notify operation",
        ),  # aviso
        (
            {**mars("x"), "identifier": {**mars("x")["identifier"], "bogus": "1"}},
            "Unknown field 'bogus' provided for notify operation",
        ),
        (
            polygon_note("x") | {"identifier": {"time": "1200", "point": "52.5,13.5"}},
            "identifier.point is only supported for watch/replay endpoints, not /notification",
        ),
        (
            {k: v for k, v in polygon_note("x").items() if k != "payload"},
            "Payload is required for notify operation based on schema configuration",
        ),
    ],
)
def test_invalid_notifications(api: TestClient, body: dict[str, Any], message: str) -> None:
    resp = api.post("/api/v1/notification", json=body)
    got = assert_aviso_error(resp, 400, "INVALID_NOTIFICATION_REQUEST")
    assert got["error"] == "Invalid Notification Request" and got["message"] == message


def test_invalid_field_value_has_message_and_details(api: TestClient) -> None:
    body = mars("x", step="abc")
    got = assert_aviso_error(
        api.post("/api/v1/notification", json=body), 400, "INVALID_NOTIFICATION_REQUEST"
    )
    assert got["details"] == "invalid digit found in string" and "step" in got["message"]


@pytest.mark.parametrize(
    ("extra", "identifier", "fragment"),
    [
        ({"from_id": "1", "from_date": "2025-01-15T10:00:00Z"}, None, "Cannot specify both"),
        ({"from_id": "abc"}, None, "from_id must be a valid positive integer"),
        ({"from_id": ""}, None, "from_id cannot be empty"),
        ({"from_date": "yesterday"}, None, "from_date must be a valid datetime/timestamp"),
        (
            {},
            {"time": "1200", "polygon": INSIDE, "point": "52.55,13.5"},
            "Cannot specify both identifier.polygon and identifier.point",
        ),  # aviso
        ({}, {"time": "1200", "point": "invalid-point"}, "identifier.point must be a valid"),
        ({}, {"time": "1200"}, "Required field 'polygon' missing for watch operation"),
        (
            {},
            {"time": "1200", "polygon": INSIDE, "date": {"gte": 1}},
            "does not support constraint filters",
        ),
    ],
)
def test_invalid_watches(
    api: TestClient, extra: dict[str, Any], identifier: dict[str, Any] | None, fragment: str
) -> None:
    body = {"event_type": "test_polygon", "identifier": identifier or {"polygon": INSIDE}, **extra}
    got = assert_aviso_error(api.post("/api/v1/watch", json=body), 400, "INVALID_WATCH_REQUEST")
    assert got["error"] == "Invalid Watch Request" and fragment in got["message"]


def test_replay_needs_exactly_one_start(api: TestClient) -> None:
    base = {"event_type": "test_polygon", "identifier": {"time": "1200", "polygon": INSIDE}}
    got = assert_aviso_error(api.post("/api/v1/replay", json=base), 400, "INVALID_REPLAY_REQUEST")
    assert got["message"] == (
        "Replay endpoint requires either from_id or from_date parameter. Use from_id for "
        "sequence-based replay or from_date for time-based replay."
    )
    both = {**base, "from_id": "1", "from_date": "1740509903"}
    got = assert_aviso_error(api.post("/api/v1/replay", json=both), 400, "INVALID_REPLAY_REQUEST")
    assert got["message"].startswith("Cannot specify both from_id and from_date")
    point_and_polygon = {
        **base,
        "identifier": {**base["identifier"], "point": "52.55,13.5"},
        "from_id": "1",
    }
    assert_aviso_error(
        api.post("/api/v1/replay", json=point_and_polygon), 400, "INVALID_REPLAY_REQUEST"
    )


@pytest.mark.parametrize(
    "raw",
    [
        b"[]",
        b'"x"',
        b"null",
        b'{"event_type": "mars", "identifier": {"class": [1]}}',
        b'{"event_type": "mars", "identifier": {"class": "od", "step": 1e999}}',
        b'{"event_type": "test_polygon", "identifier": {"polygon": "(1,2)"}, "payload": 1}',
        b'{"event_type": "extreme", "identifier": {"anomaly": {"gte": "x"}}, "from_id": "1"}',
        b'{"event_type": "extreme", "identifier": {"severity": {"between": [5, 1]}}}',
        b'{"event_type": "mars", "identifier": {"class": "od"}, "from_date": "99999999999999999"}',
        b'{"event_type": "mars", "identifier": {"class": "od"}, "from_id": "99999999999999999999"}',
        b'{"event_type": "mars", "identifier": {"class": "\\ud800"}}',
    ],
)
def test_junk_is_always_a_400(api: TestClient, raw: bytes) -> None:
    for route in ("notification", "watch", "replay"):
        resp = api.post(f"/api/v1/{route}", content=raw)
        assert resp.status_code == 400, (route, resp.text)
        assert resp.json()["code"].startswith("INVALID_")


def test_body_over_the_record_limit_is_413(make_client: MakeClient, schema_path: str) -> None:
    small = make_client(
        notify=notify_settings(schema_path),
        limits=dataclasses.replace(Settings().limits, max_record_bytes=1000),
    )
    body = mars("x" * 2000)
    got = assert_aviso_error(
        small.post("/api/v1/notification", json=body), 413, "PAYLOAD_TOO_LARGE"
    )
    assert got["error"] == "payload_too_large"


def test_storage_failure_is_notification_storage_failed(
    api: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*_: Any) -> Any:
        raise StorageUnavailable("dynamodb throttled past retries")

    monkeypatch.setattr(services(api).notifications.store, "publish", broken)
    got = assert_aviso_error(
        api.post("/api/v1/notification", json=mars("x")), 500, "NOTIFICATION_STORAGE_FAILED"
    )
    assert got["error"] == "Notification Storage Failed"
    assert got["details"] == "dynamodb throttled past retries"


def test_a_bug_is_avisos_internal_error_with_the_request_id(
    settings: Settings, aws: AwsClients, schema_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = create_app(dataclasses.replace(settings, notify=notify_settings(schema_path)), aws)
    with TestClient(app, raise_server_exceptions=False) as c:

        async def bug(*_: Any) -> Any:
            raise RuntimeError("boom")

        monkeypatch.setattr(services(c).notifications, "publish", bug)
        got = assert_aviso_error(
            c.post("/api/v1/notification", json=mars("x")), 500, "INTERNAL_ERROR"
        )
        assert got == {
            "code": "INTERNAL_ERROR",
            "error": "internal_error",
            "message": "internal error",
            "request_id": got["request_id"],
        }


def test_unknown_routes_keep_the_shape_and_the_id(api: TestClient) -> None:
    assert_aviso_error(api.get("/api/v1/nothing-here"), 404, "NOT_FOUND")
    assert_aviso_error(api.get("/api/v1/notification"), 405, "METHOD_NOT_ALLOWED")
    # other surfaces keep their own envelopes and get no X-Request-ID
    other = api.get("/v0/topics/x/nothing")
    assert "x-request-id" not in other.headers and "error" in other.json()


# --- X-Request-ID (aviso: tests/api/request_id.rs) -----------------------------------------------
def test_request_ids_are_fresh_uuids(api: TestClient) -> None:
    a = api.get("/api/v1/schema").headers["x-request-id"]
    b = api.get("/api/v1/schema").headers["x-request-id"]
    assert UUID.match(a) and UUID.match(b) and a != b


def test_an_incoming_uuid_is_echoed_anything_else_replaced(api: TestClient) -> None:
    mine = str(uuid.uuid4())
    resp = api.post("/api/v1/notification", json=mars("x"), headers={"X-Request-ID": mine.upper()})
    assert resp.headers["x-request-id"] == mine and resp.json()["request_id"] == mine
    err = api.post("/api/v1/watch", content=b"{", headers={"X-Request-ID": mine})
    assert err.headers["x-request-id"] == mine and err.json()["request_id"] == mine
    for junk in ("abc", "req-1\r", mine + "0", "' or 1=1"):
        resp = api.get("/api/v1/schema", headers={"X-Request-ID": junk})
        assert UUID.match(resp.headers["x-request-id"]), junk


def test_request_id_on_schema_404_and_admin_errors(api: TestClient) -> None:
    resp = api.get("/api/v1/schema/event_does_not_exist")
    assert resp.status_code == 404 and resp.json()["request_id"] == resp.headers["x-request-id"]
    for path, status in (("not-a-valid-id", 400), ("test_polygon@999999999", 404)):
        resp = api.delete(f"/api/v1/admin/notification/{path}")
        assert resp.status_code == status
        assert resp.json()["request_id"] == resp.headers["x-request-id"]


def test_sse_headers_and_first_frame_carry_the_id(api: TestClient) -> None:
    body = {"event_type": "test_polygon", "identifier": {"time": "1200", "polygon": INSIDE}}
    with watching(api, body) as sse:
        headers = sse.response.headers
        assert headers["content-type"] == "text/event-stream"
        assert headers["cache-control"] == "no-cache"
        assert headers["connection"] == "keep-alive"
        assert headers["x-accel-buffering"] == "no"
        event, data = sse.next()
        assert event == "live-notification" and data["type"] == "connection_established"
        assert data["request_id"] == headers["x-request-id"]
        assert data["connection_will_close_in_seconds"] == 3600
        assert data["topic"] == "polygon.%2A.1200"


# --- watch ---------------------------------------------------------------------------------------
def test_watch_without_replay_params_is_live_only(api: TestClient) -> None:  # aviso
    notify(api, polygon_note("HISTORICAL_BEFORE_WATCH"))
    body = {"event_type": "test_polygon", "identifier": {"time": "1200", "polygon": INSIDE}}
    with watching(api, body) as sse:
        first = sse.until(lambda e, d: e == "heartbeat")  # the stream is live
        notify(api, polygon_note("LIVE_AFTER_WATCH"))
        seen = sse.until(is_notification)
    events = [d for e, d in first + seen if e == "live-notification" and "specversion" in d]
    assert [e["data"]["payload"]["note"] for e in events] == ["LIVE_AFTER_WATCH"]
    assert events[0]["id"] == "test_polygon@2"


def test_watch_from_date_replays_then_goes_live(api: TestClient) -> None:  # aviso
    target = "target.v1.x"

    def diss(note: str) -> dict[str, Any]:
        ident = {**mars("")["identifier"], "destination": "FOO", "target": target}
        return {"event_type": "dissemination", "identifier": ident, "payload": note}

    notify(api, diss("DISS_HISTORICAL_BEFORE"))
    time.sleep(0.05)
    from_date = datetime.now(UTC).isoformat()
    time.sleep(0.05)
    notify(api, diss("DISS_AFTER_FROM_DATE"))
    body = {**diss(""), "from_date": from_date}
    del body["payload"]
    with watching(api, body) as sse:
        before_live = sse.until(lambda e, d: d.get("type") == "replay_completed")
        notify(api, diss("DISS_LIVE_AFTER"))
        live = sse.until(lambda e, d: e == "live-notification" and "specversion" in d)
    assert before_live[0][1]["type"] == "replay_started"
    assert before_live[0][1]["from_date"] is not None and before_live[0][1]["from_sequence"] is None
    notes = [d["data"]["payload"] for e, d in before_live if e == "replay"]
    assert notes == ["DISS_AFTER_FROM_DATE"]
    assert live[-1][1]["data"]["payload"] == "DISS_LIVE_AFTER"


def test_watch_with_a_point_gets_only_containing_polygons_live(api: TestClient) -> None:
    body = {"event_type": "test_polygon", "identifier": {"time": "1200", "point": "52.55,13.5"}}
    with watching(api, body) as sse:
        sse.until(lambda e, d: e == "heartbeat")
        notify(api, polygon_note("OUTSIDE", OUTSIDE))
        notify(api, polygon_note("INSIDE", INSIDE))
        seen = sse.until(is_notification)
    assert [d["data"]["payload"]["note"] for e, d in seen if is_notification(e, d)] == ["INSIDE"]


def test_watch_optional_polygon_without_spatial_filter_gets_everything(api: TestClient) -> None:
    body = {"event_type": "test_polygon_optional", "identifier": {"time": "1200"}}  # aviso
    with watching(api, body) as sse:
        sse.until(lambda e, d: e == "heartbeat")
        notify(api, polygon_note("OPTIONAL_LIVE", OUTSIDE, "test_polygon_optional"))
        seen = sse.until(is_notification)
    assert seen[-1][1]["data"]["payload"] == {"note": "OPTIONAL_LIVE"}


def test_watch_ends_at_its_maximum_duration(make_client: MakeClient, schema_path: str) -> None:
    short = make_client(notify=notify_settings(schema_path, connection_max_duration_sec=1))
    body = {"event_type": "extreme", "identifier": {}}
    with watching(short, body) as sse:
        frames = sse.until(closing, timeout_s=5)
        with pytest.raises(EOFError):  # the response ends after the closing frame
            sse.next()
    assert frames[0][1]["connection_will_close_in_seconds"] == 1
    assert frames[-1][1]["reason"] == "max_duration_reached"
    assert [e for e, _ in frames[1:-1]] == ["heartbeat"] * (len(frames) - 2)
    limits = services(short).limits
    deadline = time.monotonic() + 5
    while limits.streams and time.monotonic() < deadline:
        time.sleep(0.01)
    assert limits.streams == 0  # the stream's slot came back


def test_streams_are_not_held_to_the_in_flight_cap() -> None:
    assert is_stream_request("POST", "/api/v1/watch")
    assert is_stream_request("POST", "/api/v1/replay")
    assert not is_stream_request("POST", "/api/v1/notification")


# --- replay filters ------------------------------------------------------------------------------
def test_replay_from_date_excludes_older_messages(api: TestClient) -> None:  # aviso
    notify(api, polygon_note("OLD_BEFORE_FROM_DATE"))
    time.sleep(0.05)
    from_date = datetime.now(UTC).isoformat()
    time.sleep(0.05)
    notify(api, polygon_note("NEW_AFTER_FROM_DATE"))
    body = {"event_type": "test_polygon", "identifier": {"time": "1200", "polygon": INSIDE}}
    for start in (from_date, str(int(datetime.fromisoformat(from_date).timestamp() * 1000) + 1)):
        notes = [
            e["data"]["payload"]["note"]
            for e in replayed(replay(api, {**body, "from_date": start}))
        ]
        assert notes == ["NEW_AFTER_FROM_DATE"], start


def test_replay_with_a_point_matches_only_containing_polygons(api: TestClient) -> None:  # aviso
    notify(api, polygon_note("POINT_INSIDE", INSIDE))
    notify(api, polygon_note("POINT_OUTSIDE", OUTSIDE))
    on_edge = "(52.55,13.5,52.7,13.5,52.7,13.7,52.55,13.7,52.55,13.5)"  # the point is a corner
    notify(api, polygon_note("POINT_ON_CORNER", on_edge))
    body = {
        "event_type": "test_polygon",
        "identifier": {"time": "1200", "point": "52.55,13.5"},
        "from_id": "1",
    }
    assert [e["data"]["payload"]["note"] for e in replayed(replay(api, body))] == ["POINT_INSIDE"]


def test_replay_with_a_polygon_matches_intersecting_polygons(api: TestClient) -> None:
    notify(api, polygon_note("INSIDE", INSIDE))
    notify(api, polygon_note("OUTSIDE", OUTSIDE))
    touching = "(10.2,10.2,10.4,10.2,10.4,10.4,10.2,10.4,10.2,10.2)"  # shares one corner only
    notify(api, polygon_note("TOUCHING", touching))
    body = {"event_type": "test_polygon", "identifier": {"polygon": OUTSIDE}, "from_id": "1"}
    notes = [e["data"]["payload"]["note"] for e in replayed(replay(api, body))]
    assert notes == ["OUTSIDE", "TOUCHING"]
    # the polygon never takes part in exact matching: the time field still filters
    other_time = {**body, "identifier": {"polygon": OUTSIDE, "time": "0600"}}
    assert replayed(replay(api, other_time)) == []


def test_replay_optional_polygon_without_spatial_filter(api: TestClient) -> None:  # aviso
    notify(api, polygon_note("FIRST", INSIDE, "test_polygon_optional"))
    notify(api, polygon_note("SECOND", OUTSIDE, "test_polygon_optional"))
    body = {"event_type": "test_polygon_optional", "identifier": {"time": "1200"}, "from_id": "1"}
    notes = [e["data"]["payload"]["note"] for e in replayed(replay(api, body))]
    assert notes == ["FIRST", "SECOND"]


def test_replay_mars_values_with_dots(api: TestClient) -> None:  # aviso
    notify(api, mars("MARS_FIRST", stream="ens.member.1"))
    notify(api, mars("MARS_OTHER", stream="ens.member.2"))
    events = replayed(replay(api, {**mars("", stream="ens.member.1"), "from_id": "1"}))
    assert [e["data"]["payload"] for e in events] == ["MARS_FIRST"]
    assert events[0]["data"]["identifier"]["stream"] == "ens.member.1"


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("step", {"gte": 4}, ["STEP_4", "STEP_9"]),  # aviso: int constraint
        ("step", {"between": [3, 4]}, ["STEP_3", "STEP_4"]),
        ("step", 4, ["STEP_4"]),  # aviso: a scalar integer is an eq filter
        ("step", "4", ["STEP_4"]),
        ("domain", {"in": ["G", "x"]}, ["STEP_3", "STEP_4"]),  # aviso: enum in
    ],
)
def test_replay_mars_constraints(
    api: TestClient, field: str, value: Any, expected: list[str]
) -> None:
    notify(api, mars("STEP_3", step="3"))
    notify(api, mars("STEP_4", step="4"))
    notify(api, mars("STEP_9", step="9", domain="z"))
    body = mars("")
    body["identifier"] = {**body["identifier"], field: value}
    if field == "domain":
        del body["identifier"]["step"]
    else:
        del body["identifier"]["domain"]
    del body["payload"]
    assert [e["data"]["payload"] for e in replayed(replay(api, {**body, "from_id": "1"}))] == (
        expected
    )


def test_replay_float_constraint(api: TestClient) -> None:  # aviso: extreme anomaly
    for note, anomaly in (("LOW", 12.5), ("HIGH", 42.5)):
        notify(
            api,
            {
                "event_type": "extreme",
                "identifier": {
                    "region": "north",
                    "run_time": "1200",
                    "severity": 4,
                    "anomaly": anomaly,
                },
                "payload": note,
            },
        )
    body = {
        "event_type": "extreme",
        "identifier": {
            "region": "north",
            "run_time": "1200",
            "severity": 4,
            "anomaly": {"gte": 40.0},
        },
        "from_id": "1",
    }
    assert [e["data"]["payload"] for e in replayed(replay(api, body))] == ["HIGH"]


def test_replay_limit_is_reached(make_client: MakeClient, schema_path: str) -> None:
    capped = make_client(notify=notify_settings(schema_path, max_historical_notifications=2))
    for i in range(3):
        notify(capped, mars(f"n{i}"))
    frames = replay(capped, {**mars(""), "from_id": "1"})
    assert [e for e, _ in frames] == [
        "replay-control",
        "replay",
        "replay",
        "replay-control",
        "replay-control",
        "connection-closing",
    ]
    assert frames[3][1]["type"] == "notification_replay_limit_reached"
    assert frames[3][1]["max_allowed"] == 2


# --- schema routes (aviso: tests/api/schema.rs) --------------------------------------------------
def test_schema_list_and_one_event_type(api: TestClient) -> None:
    listing = api.get("/api/v1/schema")
    body = listing.json()
    assert listing.status_code == 200 and body["status"] == "success"
    assert body["event_types"] == EVENT_TYPES and body["total_schemas"] == 5
    assert "message" not in body
    mars_schema = body["schema"]["mars"]
    assert mars_schema["payload"] == {"required": False}
    assert mars_schema["identifier"]["class"] == {
        "description": "MARS class, for example od for operational data.",
        "type": "StringHandler",
        "max_length": 2,
        "required": True,
    }
    assert "topic" not in mars_schema and "auth" not in mars_schema
    one = api.get("/api/v1/schema/mars")
    assert one.status_code == 200
    assert one.json() == {"event_type": "mars", "schema": mars_schema, "status": "success"}
    missing = api.get("/api/v1/schema/nope")
    assert missing.status_code == 404
    assert missing.json() == {
        "available_types": EVENT_TYPES,
        "message": "Event type 'nope' not found",
        "request_id": missing.headers["x-request-id"],
        "status": "error",
    }


# --- admin (aviso: tests/api/admin.rs) -----------------------------------------------------------
@pytest.mark.parametrize("alias", ["mars", "MARS", "Mars"])
def test_delete_one_notification_by_event_type_or_stream(api: TestClient, alias: str) -> None:
    notify(api, mars("keep"))
    notify(api, mars("drop"))
    resp = api.delete(f"/api/v1/admin/notification/{alias}@2")
    assert resp.status_code == 200
    assert resp.json() == {
        "success": True,
        "message": "Notification deleted",
        "notification_id": f"{alias}@2",
        "request_id": resp.headers["x-request-id"],
    }
    assert [e["id"] for e in replayed(replay(api, {**mars(""), "from_id": "1"}))] == ["mars@1"]
    again = api.delete(f"/api/v1/admin/notification/{alias}@2")
    assert again.status_code == 404 and again.json()["success"] is False
    assert again.json()["message"] == "Notification not found"


def test_delete_by_topic_base_alias(api: TestClient) -> None:
    notify(api, polygon_note("a"))
    assert api.delete("/api/v1/admin/notification/polygon@1").status_code == 200
    notify(api, polygon_note("b"))
    assert api.delete("/api/v1/admin/notification/test_polygon@2").status_code == 200
    assert api.delete("/api/v1/admin/notification/nostream@1").status_code == 404


@pytest.mark.parametrize(
    ("notification_id", "message"),
    [
        ("not-a-valid-id", "notification_id must be in '<stream>@<sequence>' format"),
        ("mars@0", "notification_id sequence must be greater than zero"),
        ("mars@abc", "notification_id sequence must be a positive integer"),
    ],
)
def test_delete_rejects_bad_ids(api: TestClient, notification_id: str, message: str) -> None:
    resp = api.delete(f"/api/v1/admin/notification/{notification_id}")
    assert resp.status_code == 400
    assert resp.json() == {
        "success": False,
        "message": message,
        "notification_id": notification_id,
        "request_id": resp.headers["x-request-id"],
    }


def test_wipe_one_stream_keeps_the_others_and_the_numbering(api: TestClient) -> None:
    notify(api, mars("m1"))
    notify(api, mars("m2"))
    notify(api, polygon_note("p1"))
    resp = api.request("DELETE", "/api/v1/admin/wipe/stream", json={"stream_name": "MARS"})
    assert resp.status_code == 200
    assert resp.json() == {
        "success": True,
        "message": "Successfully wiped stream: MARS",
        "request_id": resp.headers["x-request-id"],
    }
    assert replayed(replay(api, {**mars(""), "from_id": "1"})) == []
    poly = {"event_type": "test_polygon", "identifier": {"polygon": INSIDE}, "from_id": "1"}
    assert len(replayed(replay(api, poly))) == 1
    # new notifications are accepted at once, after the last seq (a JetStream purge's rule)
    notify(api, mars("m3"))
    assert [e["id"] for e in replayed(replay(api, {**mars(""), "from_id": "1"}))] == ["mars@3"]


def test_wipe_stream_errors(api: TestClient) -> None:
    unknown = api.request("DELETE", "/api/v1/admin/wipe/stream", json={"stream_name": "NOPE"})
    assert unknown.status_code == 404 and unknown.json()["success"] is False
    assert unknown.json()["message"] == "Failed to wipe stream: Failed to get stream NOPE"
    for raw in (b"", b"{", b"[]", b'{"stream_name": 1}', b'{"stream_name": "\\ud800"}'):
        bad = api.request("DELETE", "/api/v1/admin/wipe/stream", content=raw)
        assert bad.status_code == 400, raw
        assert bad.json()["success"] is False
        assert bad.json()["message"].startswith("Json deserialize error")
        assert bad.json()["request_id"] == bad.headers["x-request-id"]


def test_wipe_all(api: TestClient) -> None:
    notify(api, mars("m"))
    notify(api, polygon_note("p"))
    resp = api.delete("/api/v1/admin/wipe/all")
    assert resp.status_code == 200
    assert resp.json() == {
        "success": True,
        "message": "Successfully wiped all data",
        "request_id": resp.headers["x-request-id"],
    }
    assert replayed(replay(api, {**mars(""), "from_id": "1"})) == []
    poly = {"event_type": "test_polygon", "identifier": {"polygon": INSIDE}, "from_id": "1"}
    assert replayed(replay(api, poly)) == []


# --- API keys -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("DELETE", "/api/v1/admin/notification/mars@1", None),
        ("DELETE", "/api/v1/admin/wipe/stream", {"stream_name": "MARS"}),
        ("DELETE", "/api/v1/admin/wipe/all", None),
    ],
)
def test_admin_routes_need_the_admin_scope(
    keyed: TestClient, method: str, path: str, body: dict[str, Any] | None
) -> None:
    def call(headers: dict[str, str]) -> httpx.Response:
        return keyed.request(method, path, json=body, headers=headers)

    missing = call({})
    got = assert_aviso_error(missing, 401, "UNAUTHORIZED")
    assert got["message"] == "Authorization header is required"
    assert missing.headers["www-authenticate"] == "Bearer"
    got = assert_aviso_error(call(bearer("wrong")), 401, "UNAUTHORIZED")
    assert got["message"] == "Invalid or expired token"
    got = assert_aviso_error(call({"Authorization": "Basic dTpw"}), 401, "UNAUTHORIZED")
    assert got["message"] == "Authorization header must use Bearer token"
    got = assert_aviso_error(call(bearer("rw-key")), 403, "FORBIDDEN")
    assert got == {
        "code": "FORBIDDEN",
        "error": "forbidden",
        "message": "User does not have required administrative role",
        "request_id": got["request_id"],
    }
    allowed = call(bearer("adm-key"))
    assert allowed.status_code in (200, 404), allowed.text  # 404: nothing to delete yet
    assert "success" in allowed.json()


def test_admin_routes_are_open_without_keys(api: TestClient) -> None:
    assert api.delete("/api/v1/admin/wipe/all").status_code == 200


def test_schema_routes_are_public_even_with_keys(keyed: TestClient) -> None:
    assert keyed.get("/api/v1/schema").status_code == 200
    assert keyed.get("/api/v1/schema/mars", headers=bearer("wrong")).status_code == 200


def test_streams_without_an_auth_block_are_public(keyed: TestClient) -> None:
    notify(keyed, polygon_note("anon"))
    body = {"event_type": "test_polygon", "identifier": {"polygon": INSIDE}, "from_id": "1"}
    assert len(replayed(replay(keyed, body))) == 1
    # a bearer that does not authenticate is refused anyway (aviso's middleware does)
    got = assert_aviso_error(
        keyed.post("/api/v1/replay", json=body, headers=bearer("nope")), 401, "UNAUTHORIZED"
    )
    assert got["message"] == "Invalid or expired token"
    # a malformed header counts as no header
    assert len(replayed(replay(keyed, body, headers={"Authorization": "Token x"}))) == 1


def test_stream_auth_maps_roles_to_scopes(keyed: TestClient) -> None:
    query = {**mars(""), "from_id": "1"}
    # mars: auth required, read_roles and write_roles listed
    got = assert_aviso_error(
        keyed.post("/api/v1/notification", json=mars("x")), 401, "UNAUTHORIZED"
    )
    assert got["message"] == "Authentication is required for this stream"
    got = assert_aviso_error(
        keyed.post("/api/v1/notification", json=mars("x"), headers=bearer("ro-key")),
        403,
        "FORBIDDEN",
    )
    assert got["message"] == "User does not have required write role for this stream"
    notify(keyed, mars("by-writer"), headers=bearer("rw-key"))
    notify(keyed, mars("by-admin"), headers=bearer("adm-key"))
    assert_aviso_error(keyed.post("/api/v1/replay", json=query), 401, "UNAUTHORIZED")
    assert len(replayed(replay(keyed, query, headers=bearer("ro-key")))) == 2
    # a key limited to name prefixes reaches only matching event types
    assert len(replayed(replay(keyed, query, headers=bearer("mars-only")))) == 2
    diss = {
        "event_type": "dissemination",
        "payload": "p",
        "identifier": {**mars("")["identifier"], "destination": "FOO", "target": "t"},
    }
    assert_aviso_error(
        keyed.post("/api/v1/notification", json=diss, headers=bearer("mars-only")), 403, "FORBIDDEN"
    )
    # dissemination: auth required, no write_roles -> only admins write
    got = assert_aviso_error(
        keyed.post("/api/v1/notification", json=diss, headers=bearer("rw-key")), 403, "FORBIDDEN"
    )
    assert got["message"] == "Only administrators can write to this stream"
    notify(keyed, diss, headers=bearer("adm-key"))
    diss_query = {**diss, "payload": None, "from_id": "1"}
    assert len(replayed(replay(keyed, diss_query, headers=bearer("ro-key")))) == 1


def test_unknown_event_type_comes_before_authorization(keyed: TestClient) -> None:
    resp = keyed.post("/api/v1/watch", json={"event_type": "nope", "identifier": {}})
    assert_aviso_error(resp, 400, "UNKNOWN_EVENT_TYPE")


# --- shutdown -------------------------------------------------------------------------------------
def test_shutdown_closes_open_streams_with_server_shutdown(api: TestClient) -> None:
    live = {"event_type": "test_polygon", "identifier": {"polygon": INSIDE}}
    with watching(api, live) as sse:
        first = sse.next()
        assert first[1]["type"] == "connection_established"
        api.portal.call(begin_shutdown, api.app)  # type: ignore[union-attr]
        frames = sse.until(closing)
        assert frames[-1][1]["reason"] == "server_shutdown"
        assert frames[-1][1]["message"] == "Server is shutting down gracefully"
        with pytest.raises(EOFError):
            sse.next()
    # a stream opened during shutdown says goodbye at once
    with watching(api, live) as sse:
        frames = sse.until(closing)
    assert [e for e, _ in frames] == ["live-notification", "connection-closing"]


def test_the_lifespan_shutdown_sets_the_shutdown_signal(
    settings: Settings, aws: AwsClients, schema_path: str
) -> None:
    app = create_app(dataclasses.replace(settings, notify=notify_settings(schema_path)), aws)
    with TestClient(app) as c:
        svc = services(c)
        assert not svc.notifications.shutdown.is_set()
    assert svc.notifications.shutdown.is_set() and svc.shutting_down


# --- the schema at start ------------------------------------------------------------------------
def test_a_bad_schema_file_refuses_to_start(
    settings: Settings, aws: AwsClients, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("notification_schema:\n  mars:\n    identifier:\n      x: {type: Nope}\n")
    for location in (str(bad), str(tmp_path / "missing.yaml")):
        with pytest.raises(ConfigurationError, match=re.escape(location)):
            create_app(dataclasses.replace(settings, notify=NotifySettings(schema=location)), aws)


def test_an_s3_schema_is_read_through_the_apps_clients(settings: Settings, aws: AwsClients) -> None:
    bucket = settings.bucket_name
    aws.s3.put_object(Bucket=bucket, Key="cfg/schema.yaml", Body=SCHEMA.encode())
    good = NotifySettings(schema=f"s3://{bucket}/cfg/schema.yaml")
    with TestClient(create_app(dataclasses.replace(settings, notify=good), aws)) as c:
        assert c.get("/api/v1/schema").json()["event_types"] == EVENT_TYPES
    aws.s3.put_object(Bucket=bucket, Key="cfg/bad.yaml", Body=b"notification_schema: [1]")
    for key in ("cfg/bad.yaml", "cfg/missing.yaml"):
        bad = NotifySettings(schema=f"s3://{bucket}/{key}")
        app = create_app(dataclasses.replace(settings, notify=bad), aws)  # no AWS call yet
        with pytest.raises(ConfigurationError, match=key), TestClient(app):
            pass  # the lifespan's startup builds the services: the server does not start
