"""/v0/ws (spec "/v0/ws") against the ASGI app on moto: auth at open, every command (subscribe,
unsubscribe, publish, ping), every server frame (subscribed, record, caught_up, ack,
tombstone, topic_deleted, error), per-command scopes and the prefix allowlist, and bad
commands that never close the socket."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from api_helpers import MakeClient, append, append_data, diff, ok, path, put_topic
from starlette.testclient import TestClient, WebSocketDenialResponse, WebSocketTestSession

from headwater.settings import Limits

pytestmark = [pytest.mark.api, pytest.mark.timeout(60)]

Frame = dict[str, Any]


def send(ws: WebSocketTestSession, **cmd: Any) -> None:
    ws.send_text(json.dumps(cmd))


def recv(ws: WebSocketTestSession, timeout_s: float = 10.0) -> Frame:
    """The next frame; fails (instead of hanging) when none comes."""

    async def get() -> Any:
        with anyio.fail_after(timeout_s):
            return await ws._send_rx.receive()

    message = ws.portal.call(get)
    assert message["type"] == "websocket.send", message
    assert "text" in message and message.get("bytes") is None, "frames are JSON text"
    frame: Frame = json.loads(message["text"])
    return frame


def until(ws: WebSocketTestSession, done: Callable[[Frame], bool]) -> list[Frame]:
    out: list[Frame] = []
    while True:
        out.append(recv(ws))
        if done(out[-1]):
            return out


def request(ws: WebSocketTestSession, **cmd: Any) -> Frame:
    """Send a command and return its reply: the next frame that carries a request_id
    (subscription frames still arriving meanwhile have none and are skipped)."""
    send(ws, **cmd)
    frame = until(ws, lambda f: "request_id" in f)[-1]
    assert frame["request_id"] == cmd.get("request_id"), frame
    return frame


def assert_ws_error(frame: Frame, code: str, request_id: object = None) -> Frame:
    assert frame["op"] == "error", frame
    assert frame["code"] == code, frame
    assert frame["request_id"] == request_id, frame
    assert isinstance(frame["message"], str) and frame["message"], frame
    assert set(frame) <= {"op", "request_id", "code", "message", "detail"}, frame
    return frame


def quiet(ws: WebSocketTestSession, wait_s: float = 0.3) -> None:
    """Nothing but the pong arrives: no frame was pending for this connection."""
    import time

    time.sleep(wait_s)
    send(ws, op="ping", request_id="quiet")
    assert recv(ws) == {"op": "pong", "request_id": "quiet"}


def records(frames: list[Frame], topic: str | None = None) -> list[Frame]:
    return [
        r
        for f in frames
        if f["op"] == "record" and (topic is None or f["topic"] == topic)
        for r in f["records"]
    ]


# --- ping, framing, bad commands ---------------------------------------------------------


def test_ping_pong_echoes_request_ids(client: TestClient) -> None:
    with client.websocket_connect("/v0/ws") as ws:
        assert request(ws, op="ping", request_id="ping-1") == {
            "op": "pong",
            "request_id": "ping-1",
        }
        assert request(ws, op="ping", request_id=7) == {"op": "pong", "request_id": 7}
        send(ws, op="ping")
        assert recv(ws) == {"op": "pong", "request_id": None}


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ("{", None),
        ("not json", None),
        ("[1, 2]", None),
        ('"ping"', None),
        ("{}", "op"),
        ('{"op": "nope"}', "op"),
        ('{"op": 5}', "op"),
        ('{"op": "ping", "request_id": {"a": 1}}', "request_id"),
        ('{"op": "ping", "request_id": true}', "request_id"),
    ],
)
def test_bad_commands_are_error_frames_and_keep_the_socket(
    client: TestClient, raw: str, field: str | None
) -> None:
    with client.websocket_connect("/v0/ws") as ws:
        ws.send_text(raw)
        err = assert_ws_error(recv(ws), "invalid_request")
        if field is not None:
            assert err["detail"] == {"field": field}
        # THEN the socket stays open and serves the next command
        assert request(ws, op="ping", request_id="after")["op"] == "pong"


def test_unknown_op_echoes_its_request_id_and_binary_frames_are_refused(
    client: TestClient,
) -> None:
    with client.websocket_connect("/v0/ws") as ws:
        send(ws, op="frobnicate", request_id="x1")
        assert_ws_error(recv(ws), "invalid_request", "x1")
        ws.send_bytes(json.dumps({"op": "ping", "request_id": "b"}).encode())
        err = assert_ws_error(recv(ws), "invalid_request")
        assert "binary" in err["message"]
        assert request(ws, op="ping", request_id="ok")["op"] == "pong"


def test_oversized_command_is_payload_too_large(make_client: MakeClient) -> None:
    c = make_client(limits=Limits(max_body_bytes=200))
    put_topic(c, "t")
    with c.websocket_connect("/v0/ws") as ws:
        send(ws, op="publish", request_id="big", topic="t", records=[{"data": "x" * 300}])
        assert_ws_error(recv(ws), "payload_too_large")
        assert request(ws, op="ping", request_id="ok")["op"] == "pong"


# --- subscribe: frames, positions, options ----------------------------------------------


def test_subscribe_backlog_then_live_with_verbatim_records(client: TestClient) -> None:
    # GIVEN a topic with a backlog whose payloads a re-encoding would change
    put_topic(client, "jobs")
    big = 123456789012345678901234567890
    append(
        client,
        "jobs",
        [
            {"data": {"z": 1, "a": [1.5, big, "é\u2028"]}, "node": "n1", "meta": {"k": "v"}},
            {"data": None, "tag": "t1"},
        ],
    )
    with client.websocket_connect("/v0/ws") as ws:
        # WHEN it subscribes from the start
        sub = request(ws, op="subscribe", request_id="s1", topic="jobs")
        # THEN subscribed carries the per-topic positions
        assert sub == {
            "op": "subscribed",
            "request_id": "s1",
            "topics": {"jobs": {"from_seq": 0, "head_seq": 2, "earliest_seq": 1}},
        }
        frames = until(ws, lambda f: f["op"] == "caught_up")
        assert [f["op"] for f in frames] == ["record", "caught_up"]
        rec = frames[0]
        assert {k: rec[k] for k in ("topic", "from_seq", "to_seq", "head_seq")} == {
            "topic": "jobs",
            "from_seq": 0,
            "to_seq": 2,
            "head_seq": 2,
        }
        # the records are exactly what a diff returns (meta by default, no $tag)
        assert rec["records"] == diff(client, "jobs")["records"]
        assert rec["records"][0]["data"] == {"z": 1, "a": [1.5, big, "é\u2028"]}
        assert rec["records"][0]["$node"] == "n1" and rec["records"][0]["meta"] == {"k": "v"}
        assert "$tag" not in rec["records"][1] and rec["records"][1]["data"] is None
        assert frames[1] == {"op": "caught_up", "topic": "jobs", "head_seq": 2}
        # WHEN records are appended over HTTP THEN they arrive live, in order
        append_data(client, "jobs", "live1")
        append_data(client, "jobs", "live2", "live3")
        live = until(ws, lambda f: f["op"] == "record" and f["to_seq"] == 5)
        assert [r["data"] for r in records(live)] == ["live1", "live2", "live3"]
        assert [r["$seq"] for r in records(live)] == [3, 4, 5]


def test_subscribe_topics_map_tail_from_seq_node_filter_and_include_options(
    client: TestClient,
) -> None:
    for t in ("a", "b"):
        put_topic(client, t)
    append(
        client,
        "a",
        [
            {"data": 1, "node": "me", "tag": "k"},
            {"data": 2, "node": "other", "tag": "k", "meta": {"x": 1}},
            {"data": 3, "tag": "j"},
            {"data": 4},
        ],
    )
    append_data(client, "b", "old1", "old2")
    with client.websocket_connect("/v0/ws") as ws:
        # WHEN a topics map subscribes a from seq 1 and b at its tail, with options
        sub = request(
            ws,
            op="subscribe",
            request_id="s",
            topics={"a": {"from_seq": 1}, "b": {"tail": True}},
            node="me",
            limit=2,
            include_data=False,
            include_tags=True,
            include_meta=False,
        )
        assert sub["topics"] == {
            "a": {"from_seq": 1, "head_seq": 4, "earliest_seq": 1},
            "b": {"from_seq": 2, "head_seq": 2, "earliest_seq": 1},
        }
        frames: list[Frame] = []
        caught: set[str] = set()
        while caught != {"a", "b"}:
            frames.append(recv(ws))
            if frames[-1]["op"] == "caught_up":
                caught.add(frames[-1]["topic"])
        # THEN a's records after seq 1, own node never, batches of at most `limit`,
        # no data, tags, no meta; b (tail) has no backlog
        got = records(frames, "a")
        for r in got:
            assert isinstance(r.pop("$ts"), int)
        assert got == [
            {"$seq": 2, "$node": "other", "$tag": "k"},
            {"$seq": 3, "$tag": "j"},
            {"$seq": 4},
        ]
        assert all(len(f["records"]) <= 2 for f in frames if f["op"] == "record")
        assert records(frames, "b") == []
        # AND the node filter applies live too
        append(client, "b", [{"data": "mine", "node": "me"}, {"data": "theirs"}])
        live = until(ws, lambda f: f["op"] == "record")
        assert [(r["$seq"], r.get("$node")) for r in live[-1]["records"]] == [(4, None)]


def test_top_level_from_seq_and_tail_apply_to_a_single_topic(client: TestClient) -> None:
    put_topic(client, "t")
    append_data(client, "t", *range(5))
    with client.websocket_connect("/v0/ws") as ws:
        sub = request(ws, op="subscribe", request_id="s", topic="t", from_seq=3)
        assert sub["topics"]["t"]["from_seq"] == 3
        frames = until(ws, lambda f: f["op"] == "caught_up")
        assert [r["$seq"] for r in records(frames)] == [4, 5]
    with client.websocket_connect("/v0/ws") as ws:
        sub = request(ws, op="subscribe", request_id="s", topic="t", tail=True, from_seq=1)
        assert sub["topics"]["t"] == {"from_seq": 5, "head_seq": 5, "earliest_seq": 1}
        assert until(ws, lambda f: f["op"] == "caught_up") == [
            {"op": "caught_up", "topic": "t", "head_seq": 5}
        ]


def test_from_seq_below_the_floor_gets_a_tombstone(client: TestClient) -> None:
    put_topic(client, "t")
    append_data(client, "t", *range(4))
    ok(client.post(path("t", "/delete"), json={"before_seq": 3}))
    with client.websocket_connect("/v0/ws") as ws:
        request(ws, op="subscribe", request_id="s", topic="t", from_seq=1)
        frames = until(ws, lambda f: f["op"] == "caught_up")
        assert frames[0] == {
            "op": "tombstone",
            "topic": "t",
            "reason": "from_seq_too_old",
            "gap_from": 2,
            "gap_to": 2,
            "earliest_seq": 3,
            "head_seq": 4,
        }
        assert frames[1]["op"] == "record" and frames[1]["from_seq"] == 2
        assert [r["$seq"] for r in records(frames)] == [3, 4]


def test_subscribing_again_repositions_the_topic(client: TestClient) -> None:
    put_topic(client, "t")
    append_data(client, "t", *range(3))
    with client.websocket_connect("/v0/ws") as ws:
        request(ws, op="subscribe", request_id="s1", topic="t")
        assert [r["$seq"] for r in records(until(ws, lambda f: f["op"] == "caught_up"))] == [
            1,
            2,
            3,
        ]
        request(ws, op="subscribe", request_id="s2", topic="t", from_seq=1)
        frames = until(ws, lambda f: f["op"] == "caught_up")
        assert [r["$seq"] for r in records(frames)] == [2, 3]
        quiet(ws)


def test_unsubscribe_stops_delivery(client: TestClient) -> None:
    for t in ("a", "b"):
        put_topic(client, t)
    with client.websocket_connect("/v0/ws") as ws:
        request(ws, op="subscribe", request_id="s", topics={"a": {}, "b": {}})
        until(ws, lambda f: f["op"] == "caught_up" and f["topic"] == "a")
        until(ws, lambda f: f["op"] == "caught_up" and f["topic"] == "b")
        # WHEN a is unsubscribed (b was never unsubscribed twice)
        assert request(ws, op="unsubscribe", request_id="u1", topic="a") == {
            "op": "unsubscribed",
            "request_id": "u1",
            "topics": ["a"],
        }
        append_data(client, "a", "not for you")
        append_data(client, "b", "for you")
        # THEN only b's records arrive
        frames = until(ws, lambda f: f["op"] == "record")
        assert frames[-1]["topic"] == "b" and records(frames)[0]["data"] == "for you"
        quiet(ws)
        # unsubscribing what is not subscribed is a no-op; a topics array works too
        assert request(ws, op="unsubscribe", request_id="u2", topics=["a", "b", "zz"])[
            "topics"
        ] == ["b"]
        append_data(client, "b", "gone")
        quiet(ws)


@pytest.mark.parametrize(
    "cmd",
    [
        {},
        {"topic": 5},
        {"topics": []},
        {"topics": "a"},
        {"topics": [1]},
        {"topic": "a", "topics": ["a"]},
        {"topic": "bad name"},
    ],
)
def test_malformed_unsubscribe_is_invalid_request(client: TestClient, cmd: Frame) -> None:
    with client.websocket_connect("/v0/ws") as ws:
        send(ws, op="unsubscribe", request_id="u", **cmd)
        assert_ws_error(recv(ws), "invalid_request", "u")


def test_topic_deleted_while_subscribed(client: TestClient) -> None:
    for t in ("a", "b"):
        put_topic(client, t)
    append_data(client, "a", 1, 2)
    with client.websocket_connect("/v0/ws") as ws:
        request(ws, op="subscribe", request_id="s", topics={"a": {}, "b": {}})
        until(ws, lambda f: f["op"] == "caught_up" and f["topic"] == "a")
        until(ws, lambda f: f["op"] == "caught_up" and f["topic"] == "b")
        # WHEN a is deleted THEN topic_deleted, and b continues
        ok(client.delete(path("a")))
        gone = until(ws, lambda f: f["op"] == "topic_deleted")
        assert gone[-1] == {"op": "topic_deleted", "topic": "a", "head_seq": 2, "reason": "deleted"}
        append_data(client, "b", "still here")
        assert records(until(ws, lambda f: f["op"] == "record"))[0]["data"] == "still here"
        # a recreated topic is a new log: nothing of it arrives until subscribed again
        append_data(client, "a", "new a")
        quiet(ws)
        sub = request(ws, op="subscribe", request_id="s2", topic="a")
        assert sub["topics"]["a"]["head_seq"] == 1
        assert records(until(ws, lambda f: f["op"] == "caught_up"))[0]["data"] == "new a"


@pytest.mark.parametrize(
    ("cmd", "field"),
    [
        ({}, "topics"),
        ({"topics": {}}, "topics"),
        ({"topics": ["t"]}, "topics"),
        ({"topic": 3}, "topic"),
        ({"topic": "t", "topics": {"t": {}}}, "topic"),
        ({"topic": "t", "from_seq": -1}, "from_seq"),
        ({"topic": "t", "tail": "yes"}, "tail"),
        ({"topics": {"t": 1}}, "topics.t"),
        ({"topic": "t", "limit": "9"}, "limit"),
        ({"topic": "t", "max_batch_bytes": 1.5}, "max_batch_bytes"),
        ({"topic": "t", "node": 7}, "node"),
        ({"topic": "t", "include_data": 1}, "include_data"),
        ({"topic": "t", "include_tags": "no"}, "include_tags"),
        ({"topic": "t", "include_meta": []}, "include_meta"),
    ],
)
def test_malformed_subscribe_is_invalid_request(client: TestClient, cmd: Frame, field: str) -> None:
    put_topic(client, "t")
    with client.websocket_connect("/v0/ws") as ws:
        send(ws, op="subscribe", request_id="s", **cmd)
        err = assert_ws_error(recv(ws), "invalid_request", "s")
        assert err["detail"]["field"] == field


def test_subscribe_unknown_topic_and_too_many_topics(make_client: MakeClient) -> None:
    c = make_client(max_watch_topics=2)
    for t in ("a", "b", "c"):
        put_topic(c, t)
    with c.websocket_connect("/v0/ws") as ws:
        # an unknown topic fails the whole command: nothing is subscribed
        send(ws, op="subscribe", request_id="s0", topics={"a": {}, "nope": {}})
        err = assert_ws_error(recv(ws), "topic_not_found", "s0")
        assert err["detail"] == {"topic": "nope"}
        send(ws, op="subscribe", request_id="s1", topic="bad name")
        assert_ws_error(recv(ws), "invalid_request", "s1")
        request(ws, op="subscribe", request_id="s2", topics={"a": {}, "b": {}})
        # the connection's topics count against TOPICS_MAX_WATCH_TOPICS
        send(ws, op="subscribe", request_id="s3", topic="c")
        frames = until(ws, lambda f: f.get("request_id") == "s3")
        err = assert_ws_error(frames[-1], "invalid_request", "s3")
        assert err["detail"] == {"field": "topics", "max": 2}
        # re-subscribing one it already has is fine
        assert request(ws, op="unsubscribe", request_id="u", topic="b")["topics"] == ["b"]
        send(ws, op="subscribe", request_id="s4", topic="c")
        assert until(ws, lambda f: f.get("request_id") == "s4")[-1]["op"] == "subscribed"


# --- publish ------------------------------------------------------------------------------


def test_publish_acks_and_is_delivered_to_subscribers(client: TestClient) -> None:
    put_topic(client, "room")
    with client.websocket_connect("/v0/ws") as sub_ws, client.websocket_connect("/v0/ws") as pub:
        request(sub_ws, op="subscribe", request_id="s", topic="room", node="u017")
        until(sub_ws, lambda f: f["op"] == "caught_up")
        # WHEN one connection publishes (batch-level node, one per-record node)
        ack = request(
            pub,
            op="publish",
            request_id="p1",
            topic="room",
            node="u018",
            records=[{"data": {"packet": 1}}, {"data": {"packet": 2}, "node": "u017"}],
        )
        # THEN the ack carries the spec's fields plus the HTTP append's
        perf = ack.pop("performance")
        assert perf["fsync_ms"] == 0.0 and perf["server_total_ms"] >= perf["wal_append_ms"] >= 0
        assert ack == {
            "op": "ack",
            "request_id": "p1",
            "topic": "room",
            "first_seq": 1,
            "last_seq": 2,
            "seqs": [1, 2],
            "head_seq": 2,
            "count": 2,
            "created": False,
            "deduped": False,
        }
        # AND the other connection (node u017) gets only the record it did not produce
        got = records(until(sub_ws, lambda f: f["op"] == "record"))
        assert [(r["$seq"], r["$node"], r["data"]) for r in got] == [(1, "u018", {"packet": 1})]
    assert [r["data"] for r in diff(client, "room")["records"]] == [{"packet": 1}, {"packet": 2}]


def test_publish_return_seqs_idempotency_create_and_config(client: TestClient) -> None:
    put_topic(client, "t")
    with client.websocket_connect("/v0/ws") as ws:
        ack = request(
            ws, op="publish", request_id=1, topic="t", return_seqs=False, records=[{"data": 1}]
        )
        assert "seqs" not in ack and ack["first_seq"] == ack["last_seq"] == 1
        # the same idempotency_key again: the original seqs, deduped, nothing appended
        first = request(
            ws,
            op="publish",
            request_id=2,
            topic="t",
            idempotency_key="k1",
            records=[{"data": "a"}, {"data": "b"}],
        )
        again = request(
            ws,
            op="publish",
            request_id=3,
            topic="t",
            idempotency_key="k1",
            records=[{"data": "a"}, {"data": "b"}],
        )
        assert first["seqs"] == again["seqs"] == [2, 3]
        assert (first["deduped"], again["deduped"]) == (False, True)
        assert diff(client, "t")["head_seq"] == 3
        # create:false on a missing topic is topic_not_found; create with config makes it
        send(ws, op="publish", request_id=4, topic="new", create=False, records=[{"data": 1}])
        assert_ws_error(recv(ws), "topic_not_found", 4)
        ack = request(
            ws,
            op="publish",
            request_id=5,
            topic="new",
            create=True,
            config={"ttl_ms": 60000},
            disable_backpressure=True,
            records=[{"data": 1}],
        )
        assert ack["created"] is True
        assert ok(client.get(path("new")))["config"]["ttl_ms"] == 60000


def test_pipelined_publishes_commit_in_command_order(client: TestClient) -> None:
    put_topic(client, "t")
    with client.websocket_connect("/v0/ws") as ws:
        for i in range(30):
            send(ws, op="publish", request_id=i, topic="t", records=[{"data": i}])
        # a ping waits for the publishes sent before it
        send(ws, op="ping", request_id="end")
        frames = until(ws, lambda f: f["op"] == "pong")
        acks = {f["request_id"]: f for f in frames if f["op"] == "ack"}
        assert len(acks) == 30 and len(frames) == 31
        assert [acks[i]["last_seq"] for i in range(30)] == list(range(1, 31))
    assert [r["data"] for r in diff(client, "t")["records"]] == list(range(30))


@pytest.mark.parametrize(
    ("cmd", "code"),
    [
        ({"topic": "t"}, "invalid_request"),
        ({"topic": "t", "records": []}, "invalid_request"),
        ({"topic": "t", "records": [{"nodata": 1}]}, "invalid_request"),
        ({"topic": "t", "records": [{"data": 1, "$seq": 4}]}, "invalid_request"),
        ({"topic": "t", "records": [{"data": 1, "meta": [1]}]}, "invalid_request"),
        ({"topic": "t", "records": [{"data": 1, "tag": 5}]}, "invalid_request"),
        ({"topic": "t", "records": [{"data": 1}], "create": "yes"}, "invalid_request"),
        ({"topic": "t", "records": [{"data": 1}], "return_seqs": "no"}, "invalid_request"),
        ({"topic": "t", "records": [{"data": 1}], "idempotency_key": ""}, "invalid_request"),
        ({"topic": "t", "records": [{"data": 1}], "config": {"ttl_ms": -1}}, "invalid_request"),
        ({"topic": "t", "records": [{"data": 1}] * 3}, "batch_too_large"),
        ({"topic": "t", "records": [{"data": "x" * 100}]}, "record_too_large"),
        ({"records": [{"data": 1}]}, "invalid_request"),
        ({"topic": ["t"], "records": [{"data": 1}]}, "invalid_request"),
        ({"topic": "no/slash", "records": [{"data": 1}]}, "invalid_request"),
        ({"topic": "missing", "records": [{"data": 1}], "create": False}, "topic_not_found"),
    ],
)
def test_bad_publish_is_an_error_frame(make_client: MakeClient, cmd: Frame, code: str) -> None:
    c = make_client(limits=Limits(max_batch_records=2, max_record_bytes=50))
    put_topic(c, "t")
    with c.websocket_connect("/v0/ws") as ws:
        send(ws, op="publish", request_id="p", **cmd)
        assert_ws_error(recv(ws), code, "p")
        assert request(ws, op="ping", request_id="still")["op"] == "pong"
    assert diff(c, "t")["head_seq"] == 0  # nothing was appended


# --- auth -----------------------------------------------------------------------------------

KEYS = "full,ro:r:tenant1:|shared.,wo:w,wa:w+a,rw:rw:tenant1:"


def test_open_needs_a_valid_bearer_when_auth_is_on(make_client: MakeClient) -> None:
    c = make_client(api_keys_raw=KEYS)
    for kwargs in (
        {},
        {"headers": {"authorization": "Bearer nope"}},
        {"headers": {"authorization": "Basic full"}},
    ):
        with pytest.raises(WebSocketDenialResponse) as denied:
            c.websocket_connect("/v0/ws", **kwargs).__enter__()  # type: ignore[arg-type]
        assert denied.value.status_code == 401
        assert denied.value.json()["error"]["code"] == "unauthorized"
    with pytest.raises(WebSocketDenialResponse) as denied:
        c.websocket_connect("/v0/ws?token=nope&token=full").__enter__()  # first token counts
    assert denied.value.status_code == 401
    # a valid key by header, or by ?token= (browsers); no scope is needed to open
    with c.websocket_connect("/v0/ws", headers={"authorization": "Bearer wo"}) as ws:
        assert request(ws, op="ping", request_id="h")["op"] == "pong"
    with c.websocket_connect("/v0/ws?token=ro") as ws:
        assert request(ws, op="ping", request_id="q")["op"] == "pong"


def test_each_command_needs_its_scope_and_the_prefix_allowlist(
    make_client: MakeClient, client: TestClient
) -> None:
    for t in ("tenant1:a", "shared.b", "tenant2:c"):
        put_topic(client, t)
    c = make_client(api_keys_raw=KEYS)
    rec = [{"data": 1}]

    def connect(key: str) -> Any:
        return c.websocket_connect(f"/v0/ws?token={key}")

    with connect("ro") as ws:
        # read-only: publish is forbidden, subscribe inside the allowlist works
        send(ws, op="publish", request_id="p", topic="tenant1:a", records=rec)
        err = assert_ws_error(recv(ws), "forbidden", "p")
        assert err["detail"] == {"required": ["write"]}
        sub = request(ws, op="subscribe", request_id="s", topics={"tenant1:a": {}, "shared.b": {}})
        assert set(sub["topics"]) == {"tenant1:a", "shared.b"}
        until(ws, lambda f: f["op"] == "caught_up" and f["topic"] == "tenant1:a")
        until(ws, lambda f: f["op"] == "caught_up" and f["topic"] == "shared.b")
        # a name outside the allowlist is forbidden, even unknown, and nothing is subscribed
        for topics in ({"tenant2:c": {}}, {"tenant1:a": {}, "tenant9:zzz": {}}):
            send(ws, op="subscribe", request_id="x", topics=topics)
            err = assert_ws_error(recv(ws), "forbidden", "x")
            assert err["detail"]["name"].startswith(("tenant2", "tenant9"))
        append_data(client, "tenant2:c", "secret")
        quiet(ws)
    with connect("wo") as ws:
        send(ws, op="subscribe", request_id="s", topic="tenant1:a")
        assert assert_ws_error(recv(ws), "forbidden", "s")["detail"] == {"required": ["read"]}
        assert (
            request(ws, op="publish", request_id="p", topic="tenant2:c", records=rec)["op"] == "ack"
        )
        # publish with config needs admin as well
        send(ws, op="publish", request_id="pc", topic="tenant2:c", records=rec, config={})
        err = assert_ws_error(recv(ws), "forbidden", "pc")
        assert err["detail"] == {"required": ["write", "admin"]}
    with connect("wa") as ws:
        ack = request(
            ws, op="publish", request_id="pc", topic="fresh", records=rec, config={"ttl_ms": 5}
        )
        assert ack["created"] is True
    with connect("rw") as ws:
        send(ws, op="publish", request_id="p", topic="tenant2:c", records=rec)
        err = assert_ws_error(recv(ws), "forbidden", "p")
        assert err["detail"] == {"name": "tenant2:c"}
        assert (
            request(ws, op="publish", request_id="p2", topic="tenant1:a", records=rec)["op"]
            == "ack"
        )
    with connect("full") as ws:
        assert (
            request(ws, op="publish", request_id="p", topic="tenant2:c", records=rec)["last_seq"]
            == 3
        )


# --- the bounded frame queue (a socket that does not drain) -------------------------------


class StalledSocket:
    """A WebSocket stand-in whose client does not read until `drain` is set."""

    def __init__(self) -> None:
        import asyncio

        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.drain = asyncio.Event()
        self.sent: list[Frame] = []

    def command(self, **cmd: Any) -> None:
        self.inbox.put_nowait({"type": "websocket.receive", "text": json.dumps(cmd)})

    async def receive(self) -> dict[str, Any]:
        return await self.inbox.get()

    async def send_text(self, text: str) -> None:
        await self.drain.wait()
        self.sent.append(json.loads(text))

    async def close(self, code: int = 1000) -> None:
        return None


def _run_stalled(client: TestClient, scenario: Callable[[Any, StalledSocket], Any]) -> list[Frame]:
    import asyncio

    from headwater.access.keys import ANONYMOUS
    from headwater.http.ws import Connection

    svc = client.app.state.services.get()  # type: ignore[attr-defined]

    async def main() -> list[Frame]:
        sock = StalledSocket()
        serving = asyncio.create_task(Connection(sock, svc, ANONYMOUS).serve())  # type: ignore[arg-type]
        try:
            await scenario(svc, sock)
        finally:
            sock.inbox.put_nowait({"type": "websocket.disconnect", "code": 1000})
            await asyncio.wait_for(serving, 10)
        return sock.sent

    return asyncio.run(main())


async def _until_sent(sock: StalledSocket, done: Callable[[Frame], bool]) -> None:
    import asyncio

    for _ in range(500):
        if any(done(f) for f in sock.sent):
            return
        await asyncio.sleep(0.01)
    raise TimeoutError(sock.sent[-3:])


async def _publish(svc: Any, topic: str, value: Any) -> None:
    from headwater.engine.records import NewRecord, encoded_size
    from headwater.engine.values import AppendRequest

    raw = json.dumps(value).encode()
    await svc.engine.append(
        topic,
        AppendRequest(
            [NewRecord(None, None, None, None, encoded_size(raw, None, None, None), raw, None)]
        ),
    )


def test_a_stalled_client_holds_the_feed_and_records_coalesce(client: TestClient) -> None:
    import asyncio

    from headwater.http.ws import QUEUE_FRAMES

    put_topic(client, "t")
    n = 3 * QUEUE_FRAMES

    async def scenario(svc: Any, sock: StalledSocket) -> None:
        sock.command(op="subscribe", request_id="s", topic="t", limit=1000)
        await asyncio.sleep(0.2)
        # WHEN records are appended one by one while nothing is written to the socket
        for i in range(n):
            await _publish(svc, "t", i)
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.2)
        sock.drain.set()
        await _until_sent(sock, lambda f: f["op"] == "record" and f["to_seq"] == n)

    sent = _run_stalled(client, scenario)
    # THEN nothing is lost or repeated, and the feed stopped reading once the queue was
    # full: the appends made meanwhile arrive together instead of one frame each
    frames = [f for f in sent if f["op"] == "record"]
    assert [r["data"] for r in records(frames)] == list(range(n))
    # (at most a queue-full of frames plus the one the feed held, then one for the rest)
    assert len(frames) <= QUEUE_FRAMES + 2, len(frames)


def test_frames_queued_before_an_unsubscribe_are_not_sent_after_it(client: TestClient) -> None:
    import asyncio

    put_topic(client, "a")
    put_topic(client, "b")

    async def scenario(svc: Any, sock: StalledSocket) -> None:
        sock.command(op="subscribe", request_id="s", topics={"a": {}, "b": {}})
        await asyncio.sleep(0.2)
        for i in range(5):
            await _publish(svc, "a", i)
        await asyncio.sleep(0.2)  # a's record frames wait in the queue
        sock.command(op="unsubscribe", request_id="u", topic="a")
        await asyncio.sleep(0.1)
        sock.drain.set()
        await _until_sent(sock, lambda f: f["op"] == "unsubscribed")
        await _publish(svc, "b", "b1")
        await _until_sent(sock, lambda f: f["op"] == "record")

    sent = _run_stalled(client, scenario)
    assert [f["op"] for f in sent if f.get("topic") != "b"] == ["subscribed", "unsubscribed"]
    assert [r["data"] for r in records(sent)] == ["b1"]


def test_without_the_denial_extension_a_bad_bearer_is_closed_with_1008(
    make_client: MakeClient,
) -> None:
    import asyncio

    from starlette.websockets import WebSocket

    from headwater.http.ws import _authenticate

    c = make_client(api_keys_raw=KEYS)
    svc = c.app.state.services.get()  # type: ignore[attr-defined]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "websocket.connect"}

    async def capture(message: Any) -> None:
        sent.append(message)

    async def attempt(query: bytes) -> Any:
        scope = {"type": "websocket", "path": "/v0/ws", "headers": [], "query_string": query}
        return await _authenticate(WebSocket(scope, receive, capture), svc)

    # a server without websocket.http.response: refused before accept with 1008
    assert asyncio.run(attempt(b"")) is None
    assert sent == [{"type": "websocket.close", "code": 1008, "reason": "missing bearer token"}]
    principal = asyncio.run(attempt(b"token=ro"))
    assert principal is not None and principal.scopes == frozenset({"read"})
    assert len(sent) == 1


def test_records_evicted_under_the_cursor_arrive_as_one_tombstone(client: TestClient) -> None:
    put_topic(client, "capped", {"cap_records": 3})
    append_data(client, "capped", *range(3))
    append_data(client, "capped", *range(3, 6))
    client.app.state.services.get().upkeep.run("capped")  # type: ignore[attr-defined]
    with client.websocket_connect("/v0/ws") as ws:
        request(ws, op="subscribe", request_id="s", topic="capped", from_seq=0)
        frames = until(ws, lambda f: f["op"] == "caught_up")
        assert frames[0] == {
            "op": "tombstone",
            "topic": "capped",
            "reason": "cap",
            "gap_from": 1,
            "gap_to": 3,
            "missed_estimate": 3,
            "earliest_seq": 4,
            "head_seq": 6,
        }
        assert [r["$seq"] for r in records(frames)] == [4, 5, 6]
    with client.websocket_connect("/v0/ws") as ws:
        # A resume below the floor is reported once, as from_seq_too_old.
        request(ws, op="subscribe", request_id="s", topic="capped", from_seq=1)
        frames = until(ws, lambda f: f["op"] == "caught_up")
        assert [f.get("reason") for f in frames if f["op"] == "tombstone"] == ["from_seq_too_old"]
