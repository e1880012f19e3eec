"""POST /v0/watch (spec §7.1/§7.2) and the non-streaming answers of GET /v0/watch/:wid:
validation, auth, prefix allowlist, unknown topics, lenient, 406/404/401."""

from __future__ import annotations

import base64
import json
import re

import pytest
from api_helpers import MakeClient, append_data, assert_error, ok, put_topic
from starlette.testclient import TestClient

from headwater.settings import Caps, Limits

pytestmark = pytest.mark.api

SSE = {"accept": "text/event-stream"}
WID_RE = re.compile(r"wid_[A-Za-z0-9_-]{24,}")


def _watch(client: TestClient, body: dict[str, object], **kw: object) -> dict[str, object]:
    return ok(client.post("/v0/watch", json=body, **kw))  # type: ignore[arg-type]


def test_create_returns_positions_per_topic(client: TestClient) -> None:
    # GIVEN three topics with data
    for t in ("jobs", "events", "audit"):
        put_topic(client, t)
    append_data(client, "jobs", *range(5))
    append_data(client, "events", *range(3))
    # WHEN a session is created with from_seq, tail, and the default
    body = _watch(
        client,
        {"topics": {"jobs": {"from_seq": 2}, "events": {"tail": True}, "audit": {}}},
    )
    # THEN it names an unguessable wid, its stream URL, the TTL and each topic's positions
    wid = body["wid"]
    assert isinstance(wid, str) and WID_RE.fullmatch(wid)
    assert len(base64.urlsafe_b64decode(wid[4:] + "==")) >= 16  # >= 128 random bits
    assert body["stream_url"] == f"/v0/watch/{wid}"
    assert body["session_ttl_ms"] == 300_000
    assert body["topics"] == {
        "jobs": {"from_seq": 2, "head_seq": 5, "earliest_seq": 1},
        "events": {"from_seq": 3, "head_seq": 3, "earliest_seq": 1},
        "audit": {"from_seq": 0, "head_seq": 0, "earliest_seq": 1},
    }
    # and every session gets a fresh wid
    again = _watch(client, {"topics": {"audit": {}}})
    assert again["wid"] != wid


def test_unknown_topic_is_404_unless_lenient(client: TestClient) -> None:
    put_topic(client, "here")
    err = assert_error(
        client.post("/v0/watch", json={"topics": {"here": {}, "gone": {}}}),
        404,
        "topic_not_found",
    )
    assert err["detail"] == {"topic": "gone"}
    body = _watch(client, {"topics": {"here": {}, "gone": {}}}, params={"lenient": "true"})
    assert list(body["topics"]) == ["here"]  # type: ignore[call-overload]
    # a deleted topic is unknown too
    put_topic(client, "dropped")
    ok(client.delete("/v0/topics/dropped"))
    assert_error(client.post("/v0/watch", json={"topics": {"dropped": {}}}), 404, "topic_not_found")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "topics"),
        ({"topics": {}}, "topics"),
        ({"topics": ["a"]}, "topics"),
        ({"topics": {"a": 1}}, "topics.a"),
        ({"topics": {"a": {"from_seq": -1}}}, "from_seq"),
        ({"topics": {"a": {"from_seq": "3"}}}, "from_seq"),
        ({"topics": {"a": {"tail": "yes"}}}, "tail"),
        ({"topics": {"a": {}}, "limit": -5}, "limit"),
        ({"topics": {"a": {}}, "max_batch_bytes": 1.5}, "max_batch_bytes"),
        ({"topics": {"a": {}}, "heartbeat_ms": True}, "heartbeat_ms"),
        ({"topics": {"a": {}}, "include_data": 1}, "include_data"),
        ({"topics": {"a": {}}, "include_meta": "no"}, "include_meta"),
        ({"topics": {"a": {}}, "include_tags": []}, "include_tags"),
        ({"topics": {"a": {}}, "node": 7}, "node"),
        ({"topics": {"a": {}}, "node": ""}, "node"),
        ({"topics": {"a": {}}, "consistency": "linear"}, "consistency"),
    ],
)
def test_malformed_bodies_are_400(client: TestClient, body: dict[str, object], field: str) -> None:
    put_topic(client, "a")
    err = assert_error(client.post("/v0/watch", json=body), 400, "invalid_request")
    assert err["detail"]["field"] == field


def test_bad_topic_name_and_non_json_are_400(client: TestClient) -> None:
    assert_error(
        client.post("/v0/watch", json={"topics": {"bad name": {}}}), 400, "invalid_request"
    )
    assert_error(
        client.post("/v0/watch", content=b"{", headers={"content-type": "application/json"}),
        400,
        "invalid_request",
    )
    assert_error(client.post("/v0/watch", json=[1]), 400, "invalid_request")


def test_too_many_topics_is_400(make_client: MakeClient) -> None:
    c = make_client(max_watch_topics=2)
    err = assert_error(
        c.post("/v0/watch", json={"topics": {"a": {}, "b": {}, "c": {}}}), 400, "invalid_request"
    )
    assert err["detail"] == {"field": "topics", "max": 2}


def test_options_are_clamped_and_defaulted(client: TestClient, make_client: MakeClient) -> None:
    # Clamps are not visible in the POST answer; this proves they are accepted, not refused.
    put_topic(client, "a")
    for extra in (
        {"limit": 0, "max_batch_bytes": 0, "heartbeat_ms": 1},
        {"limit": 10**9, "max_batch_bytes": 10**12, "heartbeat_ms": 10**9},
        {"node": "n1", "consistency": "strong", "include_data": False},
    ):
        _watch(client, {"topics": {"a": {"from_seq": None, "tail": None}}, **extra})
    c = make_client(limits=Limits(max_node_bytes=4))
    err = assert_error(
        c.post("/v0/watch", json={"topics": {"a": {}}, "node": "toolong"}), 400, "invalid_request"
    )
    assert err["detail"] == {"field": "node"}


KEYS = "rkey:r:tenant1:|shared.,wkey:w,other:r"


def test_auth_scope_and_prefix_allowlist(make_client: MakeClient, client: TestClient) -> None:
    for t in ("tenant1:a", "shared.b", "tenant2:c"):
        put_topic(client, t)
    c = make_client(api_keys_raw=KEYS)
    rkey = {"authorization": "Bearer rkey"}
    # no key / a bad key: 401; a key without read scope: 403
    assert_error(c.post("/v0/watch", json={"topics": {"tenant1:a": {}}}), 401, "unauthorized")
    assert_error(
        c.post(
            "/v0/watch",
            json={"topics": {"tenant1:a": {}}},
            headers={"authorization": "Bearer nope"},
        ),
        401,
        "unauthorized",
    )
    assert_error(
        c.post(
            "/v0/watch",
            json={"topics": {"tenant1:a": {}}},
            headers={"authorization": "Bearer wkey"},
        ),
        403,
        "forbidden",
    )
    # one body topic outside the allowlist: 403, even if it does not exist, and lenient
    # does not turn it into a silent drop
    for topics in ({"tenant1:a": {}, "tenant2:c": {}}, {"tenant9:zzz": {}}):
        err = assert_error(
            c.post("/v0/watch", json={"topics": topics}, headers=rkey, params={"lenient": "1"}),
            403,
            "forbidden",
        )
        assert err["detail"]["name"].startswith(("tenant2", "tenant9"))
    body = ok(c.post("/v0/watch", json={"topics": {"tenant1:a": {}, "shared.b": {}}}, headers=rkey))
    assert set(body["topics"]) == {"tenant1:a", "shared.b"}


def test_stream_open_errors(make_client: MakeClient, client: TestClient) -> None:
    put_topic(client, "t")
    c = make_client(api_keys_raw=KEYS)
    rkey = {"authorization": "Bearer rkey"}
    put_topic(client, "tenant1:t")
    wid = ok(c.post("/v0/watch", json={"topics": {"tenant1:t": {}}}, headers=rkey))["wid"]
    url = f"/v0/watch/{wid}"
    # 406 without Accept: text/event-stream (checked first)
    for accept in (None, "application/json", "*/*", "text/*"):
        headers = {**rkey, **({"accept": accept} if accept else {})}
        assert_error(c.get(url, headers=headers), 406, "not_acceptable")
    # 401: no key, an invalid key, a different valid key (header or ?token=)
    assert_error(c.get(url, headers=SSE), 401, "unauthorized")
    assert_error(c.get(url, headers={**SSE, "authorization": "Bearer nope"}), 401, "unauthorized")
    assert_error(c.get(url, headers={**SSE, "authorization": "Bearer other"}), 401, "unauthorized")
    assert_error(c.get(url, headers=SSE, params={"token": "other"}), 401, "unauthorized")
    # ?token= takes the first occurrence
    assert_error(c.get(f"{url}?token=other&token=rkey", headers=SSE), 401, "unauthorized")
    # 404 for an unknown wid (with a valid key), and for a malformed one
    assert_error(
        c.get("/v0/watch/wid_unknownunknownunknown", headers={**SSE, **rkey}), 404, "not_found"
    )
    assert_error(c.get("/v0/watch/nonsense", headers={**SSE, **rkey}), 404, "not_found")
    # a malformed Last-Event-ID is a 400 before any stream opens
    err = assert_error(
        c.get(url, headers={**SSE, **rkey, "last-event-id": "%%%"}), 400, "invalid_request"
    )
    assert err["detail"] == {"field": "Last-Event-ID"}
    # dev mode: no auth at all, the wid alone is enough to get past auth; unknown is 404
    assert_error(client.get("/v0/watch/wid_nothere", headers=SSE), 404, "not_found")


def test_idle_session_past_its_ttl_is_gone(make_client: MakeClient, client: TestClient) -> None:
    put_topic(client, "t")
    c = make_client(watch_session_ttl_ms=1000)
    body = ok(c.post("/v0/watch", json={"topics": {"t": {}}}))
    assert body["session_ttl_ms"] == 1000
    import time

    time.sleep(1.2)
    assert_error(c.get(body["stream_url"], headers=SSE), 404, "not_found")


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, 0),  # not on Lambda: no limit
        ({"HEADWATER_WATCH_MAX_STREAM_SEC": "600"}, 600),
        ({"AWS_LAMBDA_FUNCTION_NAME": "fn"}, 840),  # Lambda's 15 minutes less 60 s
        ({"AWS_LAMBDA_FUNCTION_NAME": "fn", "HEADWATER_LAMBDA_TIMEOUT_SEC": "30"}, 25),
        ({"AWS_LAMBDA_FUNCTION_NAME": "fn", "HEADWATER_WATCH_MAX_STREAM_SEC": "120"}, 120),
    ],
)
def test_a_watch_stream_ends_before_the_lambda_timeout(env: dict[str, str], expected: int) -> None:
    from headwater.settings import Settings

    assert Settings.from_env(env).watch_max_stream_sec == expected


def _events(raw: str) -> list[dict[str, str]]:
    out = []
    for block in raw.split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in block.splitlines() if ": " in line and line[0] != ":"
        )
        if "event" in fields:
            out.append(fields)
    return out


def test_a_stream_past_its_longest_ends_and_the_next_one_resumes(
    make_client: MakeClient, client: TestClient
) -> None:
    import time

    # GIVEN streams limited to one second, and a session over a topic with two records
    c = make_client(watch_max_stream_sec=1)
    put_topic(c, "t")
    append_data(c, "t", "a", "b")
    body = ok(c.post("/v0/watch", json={"topics": {"t": {}}}))
    # WHEN its stream is opened (the test client reads until the server ends it)
    started = time.monotonic()
    first = c.get(body["stream_url"], headers=SSE)
    took = time.monotonic() - started
    # THEN the server ended it after about a second, having sent both records
    assert first.status_code == 200 and 0.9 <= took < 10
    records = [e for e in _events(first.text) if e["event"] == "record"]
    assert [r["$seq"] for e in records for r in json.loads(e["data"])["records"]] == [1, 2]
    # AND a record appended after it ended is what the next stream starts with: the cursors
    # were saved as it ended (no Last-Event-ID needed)
    append_data(c, "t", "c")
    time.sleep(0.2)  # the close's cursor save runs in the background
    second = c.get(body["stream_url"], headers=SSE)
    again = [e for e in _events(second.text) if e["event"] == "record"]
    assert [r["$seq"] for e in again for r in json.loads(e["data"])["records"]] == [3]


def test_a_streams_events_hold_at_most_half_its_buffer(make_client: MakeClient) -> None:
    """GIVEN a session that asks for batches of up to 8 MiB over 300 records of ~1 KB, and a
    16 KiB stream buffer WHEN its stream is read THEN every record arrives, in events of at
    most 8 KiB of records each (a client that stops reading holds the buffer, not 8 MiB
    batches)."""
    c = make_client(watch_max_stream_sec=1, caps=Caps(stream_buffer_bytes=16 << 10))
    put_topic(c, "big")
    for i in range(3):
        append_data(c, "big", *({"i": 100 * i + k, "pad": "x" * 1000} for k in range(100)))
    body = ok(
        c.post("/v0/watch", json={"topics": {"big": {}}, "max_batch_bytes": 8 << 20, "limit": 1000})
    )
    got = c.get(body["stream_url"], headers=SSE)
    events = [e for e in _events(got.text) if e["event"] == "record"]
    seqs = [r["$seq"] for e in events for r in json.loads(e["data"])["records"]]
    assert seqs == list(range(1, 301))
    assert len(events) >= 300 * 1000 // (8 << 10)
    assert max(len(e["data"]) for e in events) <= (8 << 10) + 1100  # one record past
