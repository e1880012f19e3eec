"""Watch over SSE (spec §7) against real uvicorn server processes with a streaming httpx
client: ordered records with composite-cursor ids, caught-up/heartbeat/tombstone/
topic-deleted frames, exact resume after forced disconnects across 3 topics (Last-Event-ID
and session cursors), and cross-process wake-ups through the shared emulator."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import boto3
import httpx
import pytest

from tests.e2e.conftest import Cluster, ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]

SSE = {"accept": "text/event-stream"}
READ_TIMEOUT = httpx.Timeout(10.0)


@dataclass
class Event:
    name: str
    data: Any = None
    id: str | None = None
    comment: str | None = None
    retry: int | None = None


def cursor(event_id: str) -> dict[str, int]:
    value: dict[str, int] = json.loads(
        base64.urlsafe_b64decode(event_id + "=" * (-len(event_id) % 4))
    )
    return value


@dataclass
class Stream:
    response: httpx.Response
    lines: Iterator[str] = field(init=False)

    def __post_init__(self) -> None:
        self.lines = self.response.iter_lines()

    def next(self) -> Event:
        """The next frame: an event, a comment (heartbeat) or a retry field."""
        fields: dict[str, str] = {}
        comment = None
        for line in self.lines:
            if line == "":
                if fields or comment is not None:
                    break
                continue
            if line.startswith(":"):
                comment = line[1:].strip()
                continue
            name, _, value = line.partition(":")
            fields[name] = value[1:] if value.startswith(" ") else value
        else:
            raise EOFError("stream ended")
        if "retry" in fields and "event" not in fields:
            return Event("retry", retry=int(fields["retry"]), comment=comment)
        if "event" not in fields:
            return Event("comment", comment=comment)
        data = json.loads(fields["data"]) if "data" in fields else None
        return Event(fields["event"], data, fields.get("id"))

    def until(self, done: Callable[[Event], bool], timeout_s: float = 15.0) -> list[Event]:
        """Events (heartbeats and retry dropped) up to and including the first `done` one."""
        deadline = time.monotonic() + timeout_s
        out: list[Event] = []
        while time.monotonic() < deadline:
            e = self.next()
            if e.name in ("comment", "retry"):
                continue
            out.append(e)
            if done(e):
                return out
        raise TimeoutError(f"condition not met; got {[(e.name, e.data) for e in out]}")


@contextmanager
def open_stream(
    http: httpx.Client, url: str, headers: dict[str, str] | None = None
) -> Iterator[Stream]:
    with http.stream("GET", url, headers={**SSE, **(headers or {})}) as resp:
        assert resp.status_code == 200, resp.read()
        assert resp.headers["content-type"].startswith("text/event-stream")
        assert resp.headers["cache-control"] == "no-store"
        assert resp.headers["x-accel-buffering"] == "no"
        yield Stream(resp)


def put(http: httpx.Client, base: str, topic: str) -> None:
    r = http.put(f"{base}/v0/topics/{topic}", json={})
    assert r.status_code in (200, 201), r.text


def append(http: httpx.Client, base: str, topic: str, records: list[dict[str, Any]]) -> list[int]:
    r = http.post(f"{base}/v0/topics/{topic}", json={"records": records})
    assert r.status_code in (200, 201), r.text
    seqs: list[int] = r.json()["seqs"]
    return seqs


def watch(http: httpx.Client, base: str, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
    r = http.post(f"{base}/v0/watch", json=body, **kw)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def test_records_in_order_with_ids_caught_up_heartbeat_and_topic_deleted(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    (server,) = start_servers(1)
    base = server.url
    with httpx.Client(timeout=READ_TIMEOUT) as http:
        # GIVEN a backlog in two topics, and a third whose first records were deleted
        for t in ("a", "b", "c"):
            put(http, base, t)
        append(http, base, "a", [{"data": {"i": i}} for i in range(5)])
        append(http, base, "b", [{"data": {"i": i}, "node": "me"} for i in range(2)])
        append(http, base, "b", [{"data": {"i": 2}, "tag": "x", "meta": {"m": 1}}])
        append(http, base, "c", [{"data": i} for i in range(4)])
        r = http.post(f"{base}/v0/topics/c/delete", json={"before_seq": 3})
        assert r.status_code == 200, r.text
        sess = watch(
            http,
            base,
            {
                "topics": {"a": {}, "b": {"from_seq": 0}, "c": {"from_seq": 1}},
                "limit": 2,
                "heartbeat_ms": 1000,
            },
        )
        with open_stream(http, base + sess["stream_url"]) as s:
            # THEN retry: 2000 comes first
            first = s.next()
            assert first.name == "retry" and first.retry == 2000
            # the backlog arrives in order, batched by `limit`, every data frame with the
            # full composite cursor as its id; one caught-up per topic
            events: list[Event] = []
            caught: set[str] = set()
            while caught != {"a", "b", "c"}:
                batch = s.until(lambda e: e.name == "caught-up")
                events.extend(batch)
                caught.add(batch[-1].data["topic"])
            seqs: dict[str, list[int]] = {"a": [], "b": [], "c": []}
            for e in events:
                assert e.id is not None
                if e.name == "record":
                    assert len(e.data["records"]) <= 2
                    got = [r["$seq"] for r in e.data["records"]]
                    assert e.data["from_seq"] < got[0] and e.data["to_seq"] == got[-1]
                    seqs[e.data["topic"]].extend(got)
                    assert cursor(e.id)[e.data["topic"]] == got[-1]
                    assert set(cursor(e.id)) == {"a", "b", "c"}
            assert seqs == {"a": [1, 2, 3, 4, 5], "b": [1, 2, 3], "c": [3, 4]}
            tomb = [e for e in events if e.name == "tombstone"]
            assert len(tomb) == 1 and tomb[0].data == {
                "topic": "c",
                "reason": "from_seq_too_old",
                "gap_from": 2,
                "gap_to": 2,
                "earliest_seq": 3,
                "head_seq": 4,
            }
            assert cursor(tomb[0].id or "")["c"] == 2
            b_recs = [
                r
                for e in events
                if e.name == "record" and e.data["topic"] == "b"
                for r in e.data["records"]
            ]
            assert b_recs[0] == {
                "$seq": 1,
                "$ts": b_recs[0]["$ts"],
                "$node": "me",
                "data": {"i": 0},
            }
            assert b_recs[2]["meta"] == {"m": 1} and "$tag" not in b_recs[2]
            # WHEN the stream is idle THEN heartbeats (comments, no id) keep it alive
            hb = s.next()
            assert hb.name == "comment" and hb.comment is not None and hb.comment.startswith("hb ")
            # WHEN records are appended live THEN they arrive at once, in order
            t0 = time.monotonic()
            append(http, base, "a", [{"data": "live1"}])
            append(http, base, "a", [{"data": "live2"}, {"data": "live3"}])
            live = s.until(lambda e: e.name == "record" and e.data["records"][-1]["$seq"] == 8)
            assert time.monotonic() - t0 < 5
            got = [r["data"] for e in live if e.name == "record" for r in e.data["records"]]
            assert got == ["live1", "live2", "live3"]
            assert cursor(live[-1].id or "") == {"a": 8, "b": 3, "c": 4}
            # WHEN a watched topic is deleted THEN topic-deleted, and the rest continues
            assert http.delete(f"{base}/v0/topics/b").status_code == 200
            gone = s.until(lambda e: e.name == "topic-deleted")[-1]
            assert gone.data == {"topic": "b", "head_seq": 3, "reason": "deleted"}
            assert gone.id is not None
            append(http, base, "c", [{"data": "after"}])
            rec = s.until(lambda e: e.name == "record")[-1]
            assert rec.data["topic"] == "c" and rec.data["records"][0]["data"] == "after"


def test_node_filter_and_include_options(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    (server,) = start_servers(1)
    base = server.url
    with httpx.Client(timeout=READ_TIMEOUT) as http:
        put(http, base, "t")
        append(
            http,
            base,
            "t",
            [
                {"data": 1, "node": "me", "tag": "k"},
                {"data": 2, "node": "other", "tag": "k", "meta": {"x": 1}},
                {"data": 3, "tag": "j"},
            ],
        )
        sess = watch(
            http,
            base,
            {
                "topics": {"t": {}},
                "node": "me",
                "include_data": False,
                "include_tags": True,
                "include_meta": False,
            },
        )
        with open_stream(http, base + sess["stream_url"]) as s:
            events = s.until(lambda e: e.name == "caught-up")
        records = [r for e in events if e.name == "record" for r in e.data["records"]]
        for r in records:
            assert isinstance(r.pop("$ts"), int)
        assert records == [
            {"$seq": 2, "$node": "other", "$tag": "k"},
            {"$seq": 3, "$tag": "j"},
        ]
        assert events[-1].data == {"topic": "t", "head_seq": 3}


TOPICS = ("r1", "r2", "r3")
PER_TOPIC = 120


def test_resume_after_forced_disconnects_is_exactly_once_across_three_topics(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    (server,) = start_servers(1)
    base = server.url
    with httpx.Client(timeout=READ_TIMEOUT) as http:
        for t in TOPICS:
            put(http, base, t)
        sess = watch(http, base, {"topics": {t: {} for t in TOPICS}, "limit": 7})
        url = base + sess["stream_url"]

        def produce() -> None:
            with httpx.Client(timeout=READ_TIMEOUT) as p:
                for i in range(0, PER_TOPIC, 4):
                    for t in TOPICS:
                        append(p, base, t, [{"data": {"t": t, "i": i + k}} for k in range(4)])
                    time.sleep(0.01)

        producer = threading.Thread(target=produce)
        producer.start()
        seen: dict[str, list[int]] = {t: [] for t in TOPICS}
        last_id: str | None = None
        retry_ms = 2000
        try:
            # WHEN the client drops the connection three times mid-stream, each time
            # resuming with the id of the last frame it processed
            for round_ in range(4):
                headers = {"last-event-id": last_id} if last_id else {}
                with open_stream(http, url, headers) as s:
                    first = s.next()
                    assert first.retry is not None
                    retry_ms = first.retry
                    frames = 0
                    deadline = time.monotonic() + 20
                    while time.monotonic() < deadline:
                        e = s.next()
                        if e.name == "record":
                            seen[e.data["topic"]].extend(r["$seq"] for r in e.data["records"])
                            frames += 1
                        if e.id is not None:
                            last_id = e.id
                        if round_ < 3 and frames >= 5:
                            # forced disconnect while the server keeps sending: frames it
                            # flushed meanwhile are never processed by this client
                            time.sleep(0.3)
                            break
                        if round_ == 3 and all(len(v) >= PER_TOPIC for v in seen.values()):
                            break
                # an EventSource waits `retry` ms; the server saves the cursors meanwhile
                time.sleep(retry_ms / 1000 if round_ < 3 else 0)
        finally:
            producer.join(30)
        # THEN every record arrived exactly once, in order
        for t in TOPICS:
            assert seen[t] == list(range(1, PER_TOPIC + 1)), t

        # WHEN the client disconnects at a quiet point and reconnects with no
        # Last-Event-ID THEN the session's own cursors resume it exactly
        time.sleep(retry_ms / 1000)
        for t in TOPICS:
            append(http, base, t, [{"data": "more"}])
        with open_stream(http, url) as s:
            got: dict[str, list[int]] = {t: [] for t in TOPICS}
            caught: set[str] = set()
            while caught != set(TOPICS):
                for e in s.until(lambda e: e.name == "caught-up"):
                    if e.name == "record":
                        got[e.data["topic"]].extend(r["$seq"] for r in e.data["records"])
                    else:
                        caught.add(e.data["topic"])
        assert got == {t: [PER_TOPIC + 1] for t in TOPICS}


def test_two_processes_append_on_one_watch_on_the_other(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    a, b = start_servers(2, HEADWATER_POLL_INTERVAL_MS="100")
    with httpx.Client(timeout=READ_TIMEOUT) as http:
        put(http, a.url, "x1")
        put(http, a.url, "x2")
        sess = watch(http, b.url, {"topics": {"x1": {"tail": True}, "x2": {"tail": True}}})
        with open_stream(http, b.url + sess["stream_url"]) as s:
            assert len(s.until(lambda e: e.name == "caught-up" and e.data["topic"] == "x2")) >= 1
            latencies = []
            for i in range(5):
                t0 = time.monotonic()
                topic = "x1" if i % 2 else "x2"
                append(http, a.url, topic, [{"data": i}])
                rec = s.until(lambda e: e.name == "record", 10)[-1]
                latencies.append(time.monotonic() - t0)
                assert rec.data["topic"] == topic and rec.data["records"][0]["data"] == i
            assert max(latencies) < 3, latencies


def test_stream_open_errors_over_real_http(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    (server,) = start_servers(1, TOPICS_API_KEYS="k1:r+w+a,k2:r+w+a")
    base = server.url
    k1 = {"authorization": "Bearer k1"}
    with httpx.Client(timeout=READ_TIMEOUT) as http:
        assert http.put(f"{base}/v0/topics/t", json={}, headers=k1).status_code == 201
        sess = watch(http, base, {"topics": {"t": {}}}, headers=k1)
        url = base + sess["stream_url"]
        cases = [
            ({**k1, "accept": "application/json"}, 406, "not_acceptable"),
            (SSE, 401, "unauthorized"),
            ({**SSE, "authorization": "Bearer k2"}, 401, "unauthorized"),
        ]
        for headers, status, code in cases:
            r = http.get(url, headers=headers)
            assert r.status_code == status and r.json()["error"]["code"] == code, r.text
        r = http.get(f"{base}/v0/watch/wid_doesnotexist0000000000", headers={**SSE, **k1})
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
        # the creating key opens it, by header or by the dev-only ?token=
        with open_stream(http, url, k1) as s:
            assert s.next().retry == 2000
        with open_stream(http, f"{url}?token=k1") as s:
            assert s.next().retry == 2000
            assert s.until(lambda e: e.name == "caught-up")[-1].data == {
                "topic": "t",
                "head_seq": 0,
            }


def test_session_removed_while_streaming_gets_a_terminal_410_frame(
    start_servers: Callable[..., list[ServerProcess]], cluster: Cluster
) -> None:
    # A short TTL makes the stream refresh its session every second (TTL/3).
    (server,) = start_servers(1, HEADWATER_WATCH_SESSION_TTL_MS="3000")
    base = server.url
    with httpx.Client(timeout=READ_TIMEOUT) as http:
        put(http, base, "t")
        sess = watch(http, base, {"topics": {"t": {}}, "heartbeat_ms": 1000})
        assert sess["session_ttl_ms"] == 3000
        with open_stream(http, base + sess["stream_url"]) as s:
            s.until(lambda e: e.name == "caught-up")
            # WHEN the session disappears (reclaimed) under an open stream
            ddb = boto3.Session(region_name="us-east-1").client(
                "dynamodb", endpoint_url=cluster.emulator.url
            )
            ddb.delete_item(
                TableName=f"{cluster.prefix}-sessions",
                Key={"pk": {"S": sess["wid"]}, "sk": {"S": "watch"}},
            )
            # THEN the stream ends with an error frame: 410, re-POST
            err = s.until(lambda e: e.name == "error", 10)[-1]
            assert err.data["code"] == 410 and err.id is None
            with pytest.raises(EOFError):
                s.next()
        r = http.get(base + sess["stream_url"], headers=SSE)
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


def test_a_session_resumed_after_delete_and_recreate_gets_a_recreated_tombstone(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    (server,) = start_servers(1)
    base = server.url
    with httpx.Client(timeout=READ_TIMEOUT) as http:
        put(http, base, "r")
        append(http, base, "r", [{"data": i} for i in range(3)])
        sess = watch(http, base, {"topics": {"r": {}}})
        url = base + sess["stream_url"]
        with open_stream(http, url) as s:
            events = s.until(lambda e: e.name == "caught-up")
            assert [r["$seq"] for e in events if e.name == "record" for r in e.data["records"]] == [
                1,
                2,
                3,
            ]
            append(http, base, "r", [{"data": 3}])
            s.until(lambda e: e.name == "record")  # seq 4 delivered: cursor 4
        time.sleep(1.0)  # the stream's close saves its cursors
        # WHILE the consumer is away the topic is deleted and recreated with new records
        assert http.delete(f"{base}/v0/topics/r").status_code == 200
        append(http, base, "r", [{"data": "new-1"}, {"data": "new-2"}])
        # WHEN it resumes THEN the loss is a `recreated` tombstone, then the new incarnation
        with open_stream(http, url) as s:
            events = s.until(lambda e: e.name == "caught-up")
            tomb = events[0]
            assert tomb.name == "tombstone" and tomb.data == {
                "topic": "r",
                "reason": "recreated",
                "gap_from": 5,
                "gap_to": 4,
                "missed_estimate": 0,
                "earliest_seq": 1,
                "head_seq": 2,
            }
            assert cursor(tomb.id or "") == {"r": 0}
            recs = [r for e in events if e.name == "record" for r in e.data["records"]]
            assert [(r["$seq"], r["data"]) for r in recs] == [(1, "new-1"), (2, "new-2")]
            # AND the stream follows the new incarnation live
            append(http, base, "r", [{"data": "new-3"}])
            live = s.until(lambda e: e.name == "record")
            assert [r["data"] for r in live[-1].data["records"]] == ["new-3"]
        time.sleep(1.0)
        # WHEN it resumes again THEN no second tombstone: the session follows the new epoch
        append(http, base, "r", [{"data": "new-4"}])
        with open_stream(http, url) as s:
            events = s.until(lambda e: e.name == "caught-up")
            assert [e.name for e in events] == ["record", "caught-up"]
            assert [r["data"] for r in events[0].data["records"]] == ["new-4"]
