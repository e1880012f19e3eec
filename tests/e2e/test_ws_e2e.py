"""/v0/ws against real uvicorn server processes with the real `websockets` client: publish on
one connection and receive on another (ordered, no loss, no duplicates), delivery across
processes (HTTP append on server A, WebSocket on server B), the bearer refused at the
upgrade, and a slow reader whose records coalesce instead of piling up."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect

from tests.e2e.conftest import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

Frame = dict[str, Any]


def ws_url(server: ServerProcess, query: str = "") -> str:
    return server.url.replace("http://", "ws://") + "/v0/ws" + query


@contextmanager
def open_ws(url: str, **kw: Any) -> Iterator[ClientConnection]:
    with connect(url, proxy=None, compression=None, max_size=None, **kw) as ws:
        yield ws


def send(ws: ClientConnection, **cmd: Any) -> None:
    ws.send(json.dumps(cmd))


def recv(ws: ClientConnection, timeout_s: float = 15.0) -> Frame:
    raw = ws.recv(timeout=timeout_s)
    assert isinstance(raw, str), "frames are JSON text"
    frame: Frame = json.loads(raw)
    return frame


def until(
    ws: ClientConnection, done: Callable[[Frame], bool], timeout_s: float = 20
) -> list[Frame]:
    deadline = time.monotonic() + timeout_s
    out: list[Frame] = []
    while time.monotonic() < deadline:
        out.append(recv(ws, max(0.1, deadline - time.monotonic())))
        if done(out[-1]):
            return out
    raise TimeoutError(f"condition not met; got {out[-5:]}")


def put(http: httpx.Client, base: str, topic: str, **headers: str) -> None:
    r = http.put(f"{base}/v0/topics/{topic}", json={}, headers=headers)
    assert r.status_code in (200, 201), r.text


def subscribe(ws: ClientConnection, **cmd: Any) -> Frame:
    send(ws, op="subscribe", request_id="sub", **cmd)
    frame = recv(ws)
    assert frame["op"] == "subscribed", frame
    return frame


N_BATCHES = 100
PER_BATCH = 5


def test_publish_on_one_connection_receive_on_another(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    (server,) = start_servers(1, TOPICS_API_KEYS="pub:w+a,sub:r")
    with httpx.Client(timeout=10) as http:
        put(http, server.url, "room", authorization="Bearer pub")
    # GIVEN a subscriber (browser style: ?token=) and a publisher (Authorization header)
    with (
        open_ws(ws_url(server, "?token=sub")) as sub,
        open_ws(ws_url(server), additional_headers={"Authorization": "Bearer pub"}) as pub,
    ):
        subscribe(sub, topic="room", limit=50)
        until(sub, lambda f: f["op"] == "caught_up")
        received: list[Frame] = []
        errors: list[BaseException] = []

        def consume() -> None:
            try:
                while len(received) < N_BATCHES * PER_BATCH:
                    frame = recv(sub)
                    if frame["op"] == "record":
                        received.extend(frame["records"])
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)

        reader = threading.Thread(target=consume)
        reader.start()
        # WHEN the publisher sends every batch without waiting for acks (pipelined)
        for b in range(N_BATCHES):
            records = [{"data": {"b": b, "i": i}} for i in range(PER_BATCH)]
            send(pub, op="publish", request_id=b, topic="room", records=records)
        acks = [recv(pub) for _ in range(N_BATCHES)]
        reader.join(60)
        assert not errors, errors
        # THEN every batch is acked with contiguous seqs, in command order
        assert all(a["op"] == "ack" for a in acks), acks[:3]
        by_id = {a["request_id"]: a for a in acks}
        assert [by_id[b]["first_seq"] for b in range(N_BATCHES)] == [
            1 + b * PER_BATCH for b in range(N_BATCHES)
        ]
        # AND the subscriber got every record once, in order, payloads intact
        assert [r["$seq"] for r in received] == list(range(1, N_BATCHES * PER_BATCH + 1))
        assert [r["data"] for r in received] == [
            {"b": b, "i": i} for b in range(N_BATCHES) for i in range(PER_BATCH)
        ]
        # a publish with the read-only key's connection is forbidden, and the socket lives on
        send(sub, op="publish", request_id="nope", topic="room", records=[{"data": 1}])
        err = until(sub, lambda f: f.get("request_id") == "nope")[-1]
        assert (err["op"], err["code"]) == ("error", "forbidden")
        send(sub, op="ping", request_id="alive")
        assert until(sub, lambda f: f["op"] == "pong")[-1]["request_id"] == "alive"


def test_http_append_on_one_process_reaches_a_websocket_on_another(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    a, b = start_servers(2, HEADWATER_POLL_INTERVAL_MS="100")
    with httpx.Client(timeout=10) as http, open_ws(ws_url(b)) as ws:
        put(http, a.url, "x1")
        put(http, a.url, "x2")
        subscribe(ws, topics={"x1": {"tail": True}, "x2": {"tail": True}})
        until(ws, lambda f: f["op"] == "caught_up" and f["topic"] == "x1")
        until(ws, lambda f: f["op"] == "caught_up" and f["topic"] == "x2")
        latencies = []
        for i in range(6):
            topic = "x1" if i % 2 else "x2"
            t0 = time.monotonic()
            r = http.post(f"{a.url}/v0/topics/{topic}", json={"records": [{"data": i}]})
            assert r.status_code == 200, r.text
            frame = until(ws, lambda f: f["op"] == "record", 10)[-1]
            latencies.append(time.monotonic() - t0)
            assert frame["topic"] == topic and [x["data"] for x in frame["records"]] == [i]
        assert max(latencies) < 3, latencies
        # a topic deleted through process A is reported on process B
        assert http.delete(f"{a.url}/v0/topics/x1").status_code == 200
        gone = until(ws, lambda f: f["op"] == "topic_deleted", 10)[-1]
        assert gone == {"op": "topic_deleted", "topic": "x1", "head_seq": 3, "reason": "deleted"}


def test_missing_or_wrong_bearer_is_refused_at_the_upgrade(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    (server,) = start_servers(1, TOPICS_API_KEYS="k1")
    for url, headers in (
        (ws_url(server), None),
        (ws_url(server, "?token=wrong"), None),
        (ws_url(server), {"Authorization": "Bearer wrong"}),
    ):
        with pytest.raises(InvalidStatus) as refused, open_ws(url, additional_headers=headers):
            pass
        response = refused.value.response
        assert response.status_code == 401
        assert json.loads(response.body or b"{}")["error"]["code"] == "unauthorized"
    with open_ws(ws_url(server, "?token=k1")) as ws:
        send(ws, op="ping", request_id=1)
        assert recv(ws) == {"op": "pong", "request_id": 1}


RECORD_BYTES = 60_000
SLOW_RECORDS = 300


def test_a_slow_reader_gets_coalesced_batches_and_loses_nothing(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    (server,) = start_servers(1)
    blob = "x" * RECORD_BYTES
    # GIVEN a subscriber whose client buffers at most one message, then stops reading
    with httpx.Client(timeout=10) as http, open_ws(ws_url(server), max_queue=1) as ws:
        put(http, server.url, "firehose")
        subscribe(ws, topic="firehose", max_batch_bytes=8 << 20, limit=1000)
        until(ws, lambda f: f["op"] == "caught_up")
        # WHEN records are appended one at a time, far more than the socket buffers hold
        for i in range(SLOW_RECORDS):
            r = http.post(
                f"{server.url}/v0/topics/firehose",
                json={"records": [{"data": {"i": i, "pad": blob}}]},
            )
            assert r.status_code == 200, r.text
        # THEN reading again yields every record in order, and the ones appended while the
        # socket was full came coalesced into large frames (one append per frame otherwise)
        frames = until(
            ws, lambda f: f["op"] == "record" and f["to_seq"] >= SLOW_RECORDS, timeout_s=60
        )
    recs = [r for f in frames if f["op"] == "record" for r in f["records"]]
    assert [r["$seq"] for r in recs] == list(range(1, SLOW_RECORDS + 1))
    assert [r["data"]["i"] for r in recs] == list(range(SLOW_RECORDS))
    sizes = [len(f["records"]) for f in frames if f["op"] == "record"]
    assert max(sizes) >= 20, sizes
    assert len(sizes) < SLOW_RECORDS * 3 // 4, sizes
