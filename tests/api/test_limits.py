"""Resource caps (spec §11): every cap answers 429 throttled with Retry-After and
error.detail.limit/max, frees its slot when the resource goes away, and never leaves a
half-done creation behind."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

import httpx
import pytest
from api_helpers import MakeClient, append_data, assert_error, ok, path, put_topic, read_all
from starlette.testclient import TestClient, WebSocketDenialResponse

from headwater.access.limits import ConnectionLimits
from headwater.engine.quotas import TOPICS, TOTAL_BYTES, WATCH_SESSIONS
from headwater.errors import Throttled
from headwater.http.app import create_app
from headwater.settings import Caps, Settings
from headwater.storage.clients import AwsClients
from headwater.storage.quota import DynamoQuotaStore
from headwater.storage.schema import SESSIONS

pytestmark = pytest.mark.api


def caps(**kw: int) -> Caps:
    return dataclasses.replace(Caps(), **kw)


def assert_cap(resp: httpx.Response, limit: str, cap: int) -> None:
    err = assert_error(resp, 429, "throttled")
    assert err["detail"] == {"limit": limit, "max": cap}, err
    assert int(resp.headers["retry-after"]) >= 1


# --- max_topics ---------------------------------------------------------------------------
def test_topic_cap_on_put_and_auto_create(make_client: MakeClient) -> None:
    c = make_client(caps=caps(max_topics=2))
    put_topic(c, "a")
    append_data(c, "b", 1)  # auto-create takes the second slot
    assert_cap(c.put(path("c"), json={}), "max_topics", 2)
    assert_cap(c.post(path("c"), json={"records": [{"data": 1}]}), "max_topics", 2)
    assert c.get(path("c")).status_code == 404  # nothing half-created
    # An update of an existing topic is not a creation: a saturated server can be reconfigured.
    ok(c.put(path("a"), json={"cap_records": 10}))
    append_data(c, "a", 2)
    # Deleting a topic frees its slot; the recreate is a creation again.
    ok(c.delete(path("b")))
    ok(c.put(path("c"), json={}), 201)
    assert_cap(c.put(path("b"), json={}), "max_topics", 2)


def test_topic_cap_counts_across_servers(make_client: MakeClient) -> None:
    one = make_client(caps=caps(max_topics=3))
    two = make_client(caps=caps(max_topics=3))
    put_topic(one, "x1")
    put_topic(two, "x2")
    put_topic(one, "x3")
    assert_cap(two.put(path("x4"), json={}), "max_topics", 3)


def test_a_counter_left_high_is_corrected(
    make_client: MakeClient, settings: Settings, aws: AwsClients
) -> None:
    c = make_client(caps=caps(max_topics=2))
    put_topic(c, "real")
    # A process that died between reserving and creating leaves the counter too high.
    DynamoQuotaStore(aws.dynamodb, settings).reserve(TOPICS, 5, None)
    ok(c.put(path("second"), json={}), 201)  # refused, recounted (2 real <= cap), retried
    assert DynamoQuotaStore(aws.dynamodb, settings).get(TOPICS) == 2
    assert_cap(c.put(path("third"), json={}), "max_topics", 2)


def test_zero_disables_a_cap(make_client: MakeClient) -> None:
    c = make_client(caps=caps(max_topics=0))
    for i in range(5):
        put_topic(c, f"t{i}")


# --- max_total_bytes ------------------------------------------------------------------------
def test_total_bytes_cap(make_client: MakeClient, settings: Settings, aws: AwsClients) -> None:
    c = make_client(caps=caps(max_total_bytes=1000))
    blob = "x" * 400  # each record is ~402 bytes of JSON
    append_data(c, "big", blob)
    append_data(c, "other", blob)
    resp = c.post(path("big"), json={"records": [{"data": blob}]})
    assert_cap(resp, "max_total_bytes", 1000)
    assert len(read_all(c, "big")) == 1  # the refused write left nothing behind
    # Record deletes and topic deletes give the bytes back.
    ok(c.post(path("big", "/delete"), json={"before_seq": 2}))
    append_data(c, "big", blob)
    ok(c.delete(path("other")))
    append_data(c, "third", blob)
    used = DynamoQuotaStore(aws.dynamodb, settings).get(TOTAL_BYTES)
    assert used is not None and 800 <= used <= 1000


def test_total_bytes_counter_starts_from_a_recount(
    make_client: MakeClient, client: TestClient
) -> None:
    # Data written while the cap was off is counted the first time the cap is used.
    append_data(client, "old", "y" * 600)
    c = make_client(caps=caps(max_total_bytes=1000))
    assert_cap(
        c.post(path("old"), json={"records": [{"data": "y" * 600}]}), "max_total_bytes", 1000
    )
    append_data(c, "old", "small")


# --- max_watch_sessions ---------------------------------------------------------------------
def _watch(c: TestClient, topic: str) -> httpx.Response:
    return c.post("/v0/watch", json={"topics": {topic: {}}})


def test_watch_session_cap_and_gc_sweep(
    make_client: MakeClient, settings: Settings, aws: AwsClients
) -> None:
    c = make_client(caps=caps(max_watch_sessions=2))
    # Recounts are rate-limited per process (a saturated cap must not scan on every request);
    # this test wants the second refusal to recount at once.
    c.app.state.services.get().quotas.recount_interval_s = 0  # type: ignore[attr-defined]
    put_topic(c, "w")
    first = ok(_watch(c, "w"))["wid"]
    ok(_watch(c, "w"))
    assert_cap(_watch(c, "w"), "max_watch_sessions", 2)
    # The first session goes idle past its TTL: the sweep on the next refused POST reclaims it.
    aws.dynamodb.update_item(
        TableName=settings.table_name(SESSIONS.logical),
        Key={"pk": {"S": first}, "sk": {"S": "watch"}},
        UpdateExpression="SET la = :old",
        ExpressionAttributeValues={":old": {"N": "1000"}},
    )
    ok(_watch(c, "w"))
    got = c.get(f"/v0/watch/{first}", headers={"Accept": "text/event-stream"})
    assert_error(got, 404, "not_found")
    assert DynamoQuotaStore(aws.dynamodb, settings).get(WATCH_SESSIONS) == 2


def test_unknown_topic_watch_does_not_take_a_slot(make_client: MakeClient) -> None:
    c = make_client(caps=caps(max_watch_sessions=1))
    assert_error(_watch(c, "missing"), 404, "topic_not_found")
    put_topic(c, "w")
    ok(_watch(c, "w"))


# --- stream caps (per process) ----------------------------------------------------------------
def test_stream_slots_global_and_per_key() -> None:
    limits = ConnectionLimits(caps(max_sse_connections=3, max_sse_connections_per_key=2))
    a1 = limits.acquire_stream("a")
    a2 = limits.acquire_stream("a")
    with pytest.raises(Throttled) as exc:
        limits.acquire_stream("a")
    assert exc.value.detail == {"limit": "max_sse_connections_per_key", "max": 2}
    b1 = limits.acquire_stream("b")
    with pytest.raises(Throttled) as exc:
        limits.acquire_stream(None)
    assert exc.value.detail == {"limit": "max_sse_connections", "max": 3}
    a1.release()
    a1.release()  # idempotent: a double release never frees someone else's slot
    assert limits.streams == 2
    with limits.acquire_stream("a"):
        assert limits.streams_by_key["a"] == 2
    assert limits.streams == 2
    for s in (a2, b1):
        s.release()
    assert limits.streams == 0 and not limits.streams_by_key


def test_dev_mode_streams_have_only_the_global_cap() -> None:
    limits = ConnectionLimits(caps(max_sse_connections=3, max_sse_connections_per_key=1))
    slots = [limits.acquire_stream(None) for _ in range(3)]
    with pytest.raises(Throttled):
        limits.acquire_stream(None)
    for s in slots:
        s.release()


def test_sse_cap_answers_429_before_streaming(make_client: MakeClient) -> None:
    c = make_client(caps=caps(max_sse_connections=1))
    put_topic(c, "s")
    wid = ok(_watch(c, "s"))["wid"]
    svc = c.app.state.services.get()  # type: ignore[attr-defined]
    held = svc.limits.acquire_stream(None)  # another stream holds the only slot
    resp = c.get(f"/v0/watch/{wid}", headers={"Accept": "text/event-stream"})
    assert_cap(resp, "max_sse_connections", 1)
    held.release()
    assert svc.limits.streams == 0


# --- max_inflight_per_key ---------------------------------------------------------------------
def test_inflight_cap_per_key(settings: Settings, aws: AwsClients) -> None:
    s = dataclasses.replace(settings, api_keys_raw="alpha,beta", caps=caps(max_inflight_per_key=1))
    app = create_app(s, aws)

    async def scenario() -> dict[str, Any]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            a = {"Authorization": "Bearer alpha"}
            b = {"Authorization": "Bearer beta"}
            ok(await http.put(path("lp"), json={}, headers=a), 201)
            # A long-poll holds alpha's only in-flight slot...
            hold = asyncio.create_task(
                http.post(path("lp", "/diff"), json={"from_seq": 0, "wait_ms": 1500}, headers=a)
            )
            await asyncio.sleep(0.5)
            refused = await http.get(path("lp"), headers=a)
            other_key = await http.get(path("lp"), headers=b)
            unauth = await http.get(path("lp"), headers={"Authorization": "Bearer nope"})
            held = await hold
            after = await http.get(path("lp"), headers=a)
            return {
                "refused": refused,
                "other": other_key,
                "unauth": unauth,
                "held": held,
                "after": after,
            }

    with TestClient(app):  # runs the lifespan
        out = asyncio.run(scenario())
    assert_cap(out["refused"], "max_inflight_per_key", 1)
    ok(out["other"])
    assert_error(out["unauth"], 401, "unauthorized")
    ok(out["held"])
    ok(out["after"])  # the slot came back when the long-poll answered


def test_websockets_share_the_stream_cap_and_free_it_on_close(make_client: MakeClient) -> None:
    c = make_client(caps=caps(max_sse_connections=1))
    put_topic(c, "ws")
    wid = ok(_watch(c, "ws"))["wid"]
    svc = c.app.state.services.get()  # type: ignore[attr-defined]
    with c.websocket_connect("/v0/ws") as ws:
        ws.send_text('{"op":"ping","request_id":1}')
        assert ws.receive_json()["op"] == "pong"
        assert svc.limits.streams == 1
        # The socket holds the only stream slot: an SSE GET and a second socket are refused.
        resp = c.get(f"/v0/watch/{wid}", headers={"Accept": "text/event-stream"})
        assert_cap(resp, "max_sse_connections", 1)
        with pytest.raises(WebSocketDenialResponse) as denied, c.websocket_connect("/v0/ws"):
            pass
        assert_cap(denied.value, "max_sse_connections", 1)  # type: ignore[arg-type]
    deadline = time.monotonic() + 5
    while svc.limits.streams and time.monotonic() < deadline:
        time.sleep(0.01)
    assert svc.limits.streams == 0  # the close gave the slot back
    with c.websocket_connect("/v0/ws") as ws:
        ws.send_text('{"op":"ping","request_id":2}')
        assert ws.receive_json()["op"] == "pong"


# --- max_routers ----------------------------------------------------------------------------
def test_router_cap_refuses_before_creating_the_dest(make_client: MakeClient) -> None:
    c = make_client(caps=caps(max_routers=1))
    put_topic(c, "src")
    ok(c.put("/v0/routers/r1", json={"source": "src", "dest": "d1"}), 201)
    refused = c.put("/v0/routers/r2", json={"source": "src", "dest": "d2"})
    assert_cap(refused, "max_routers", 1)
    assert c.get(path("d2")).status_code == 404  # no phantom dest topic
    # Reconfiguring the existing router is an update, not a creation.
    ok(c.put("/v0/routers/r1", json={"source": "src", "dest": "d1", "preserve_node": False}))
    ok(c.delete("/v0/routers/r1"))
    ok(c.put("/v0/routers/r2", json={"source": "src", "dest": "d2"}), 201)
    # A topic delete cascades to its routers and frees their slots.
    ok(c.delete(path("src")))
    put_topic(c, "src")
    ok(c.put("/v0/routers/r3", json={"source": "src", "dest": "d3"}), 201)
