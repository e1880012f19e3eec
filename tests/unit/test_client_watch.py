"""headwater_client.watch: the resume bookkeeping of a watch stream without a server. The
cursor maps are built here by hand (base64url JSON, as spec §7.3 spells an event id)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from httpx_sse import ServerSentEvent

from headwater_client.errors import ConnectionFailed
from headwater_client.models import WatchEvent, WatchSession, decode_cursor_map
from headwater_client.watch import _Resume


def cid(cursors: dict[str, int]) -> str:
    return base64.urlsafe_b64encode(json.dumps(cursors).encode()).rstrip(b"=").decode()


def record_frame(topic: str, seqs: list[int], cursors: dict[str, int]) -> ServerSentEvent:
    data = {
        "topic": topic,
        "records": [{"$seq": s, "$ts": 1, "data": s} for s in seqs],
        "from_seq": seqs[0] - 1,
        "to_seq": seqs[-1],
        "head_seq": seqs[-1],
    }
    return ServerSentEvent("record", json.dumps(data), cid(cursors))


def resume(**kw: Any) -> _Resume:
    body = {"topics": {"a": {"from_seq": 0}, "b": {"tail": True}}, "heartbeat_ms": 2000}
    options: dict[str, Any] = {
        "wid": None,
        "last_event_id": None,
        "reconnect": True,
        "max_retries": 3,
        "backoff_s": 0.1,
        "max_backoff_s": 1.0,
    }
    options.update(kw)
    return _Resume(body, **options)


def test_records_are_handed_out_once_across_a_resume_that_starts_behind() -> None:
    r = resume()
    first = r.frame(record_frame("a", [1, 2, 3], {"a": 3, "b": 0}))
    assert isinstance(first, WatchEvent) and [x.seq for x in first.records] == [1, 2, 3]
    assert r.cursors == {"a": 3, "b": 0}
    # the server resumed from a session cursor saved before the drop: 2..4 again
    again = r.frame(record_frame("a", [2, 3, 4], {"a": 4, "b": 0}))
    assert isinstance(again, WatchEvent) and [x.seq for x in again.records] == [4]
    assert r.frame(record_frame("a", [3, 4], {"a": 4, "b": 0})) is None  # all seen: dropped
    # a frame of the other topic carrying a stale cursor for `a` does not rewind it
    stale = r.frame(
        ServerSentEvent("caught-up", '{"topic":"b","head_seq":0}', cid({"a": 1, "b": 0}))
    )
    assert isinstance(stale, WatchEvent) and r.cursors == {"a": 4, "b": 0}
    assert decode_cursor_map(r.last_event_id) == {"a": 4, "b": 0}


def test_a_recreated_topic_resets_its_cursor() -> None:
    r = resume(last_event_id=cid({"a": 9, "b": 2}))
    tomb = {
        "topic": "a",
        "reason": "recreated",
        "gap_from": 10,
        "gap_to": 12,
        "earliest_seq": 1,
        "head_seq": 1,
    }
    out = r.frame(ServerSentEvent("tombstone", json.dumps(tomb), cid({"a": 0, "b": 2})))
    assert isinstance(out, WatchEvent) and out.tombstone is not None
    assert out.tombstone.reason == "recreated"
    assert r.cursors == {"a": 0, "b": 2}
    first = r.frame(record_frame("a", [1], {"a": 1, "b": 2}))
    assert isinstance(first, WatchEvent) and [x.seq for x in first.records] == [1]


def test_error_frames_ask_for_a_reconnect_or_a_new_session() -> None:
    r = resume(wid="wid_x")
    advisory = r.frame(ServerSentEvent("error", '{"code":429,"error":"slow down"}'))
    assert isinstance(advisory, WatchEvent) and advisory.code == 429
    assert r.frame(ServerSentEvent("error", '{"code":408,"terminal":true}')) == "reconnect"
    assert r.frame(ServerSentEvent("error", '{"code":503}')) == "reconnect"
    assert r.wid == "wid_x"
    assert r.frame(ServerSentEvent("error", '{"code":410,"error":"gone"}')) == "recreate"
    assert r.wid is None


def test_a_new_session_starts_at_the_cursors_and_keeps_resolved_tails() -> None:
    r = resume()
    assert r.session_body() == (r.body, False)  # the first session is the request as given
    r.created(
        WatchSession(
            "wid_1", "/v0/watch/wid_1", 60_000, {"a": {"from_seq": 0}, "b": {"from_seq": 7}}
        )
    )
    assert r.wid == "wid_1" and r.sessions == 1
    body, lenient = r.session_body()  # lost before any event: b stays at the resolved head
    assert lenient and body["topics"] == {"a": {"from_seq": 0}, "b": {"from_seq": 7}}
    r.frame(record_frame("a", [1, 2], {"a": 2, "b": 7}))
    body, _ = r.session_body()
    assert body["topics"] == {"a": {"from_seq": 2}, "b": {"from_seq": 7}}
    assert body["heartbeat_ms"] == 2000


def test_backoff_grows_and_gives_up_after_max_retries() -> None:
    r = resume()
    delays = [r.failed(OSError("x")) for _ in range(3)]
    assert delays == [0.1, 0.2, 0.4]
    with pytest.raises(ConnectionFailed, match="watch stream failed"):
        r.failed(OSError("x"))
    no = resume(reconnect=False)
    with pytest.raises(ConnectionFailed, match="watch stream failed"):
        no.failed(OSError("y"))


def test_idle_timeout_is_twice_the_heartbeat_plus_slack() -> None:
    assert resume().idle_timeout_s == 9.0


def test_opaque_ids_are_passed_back_as_they_are() -> None:
    r = resume()
    out = r.frame(ServerSentEvent("caught-up", '{"topic":"a","head_seq":3}', "ckpt_opaque_token"))
    assert isinstance(out, WatchEvent)
    assert r.last_event_id == "ckpt_opaque_token" and r.cursors is None
