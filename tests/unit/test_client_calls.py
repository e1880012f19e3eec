"""headwater_client: request bodies (spec §2, §3, §7, §10 shapes), typed errors from the /v0
and /v1 envelopes, and result parsing, against httpx.MockTransport (no server)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from headwater_client import (
    ApiError,
    Client,
    Conflict,
    ConnectionFailed,
    NewRecord,
    NotFound,
    ServerError,
    Throttled,
    _calls,
)


def test_append_body_merges_batch_and_record_fields() -> None:
    call = _calls.append(
        "t",
        [{"a": 1}, NewRecord("x", tag="own", meta={"m": 2}, node="n9"), None],
        tag="batch",
        meta={"m": 1},
        node="n1",
        idempotency_key="k",
        create=True,
    )
    assert call.method == "POST" and call.path == "/v0/topics/t"
    assert call.json == {
        "records": [
            {"data": {"a": 1}, "tag": "batch", "meta": {"m": 1}},
            {"data": "x", "tag": "own", "meta": {"m": 2}, "node": "n9"},
            {"data": None, "tag": "batch", "meta": {"m": 1}},
        ],
        "node": "n1",
        "idempotency_key": "k",
        "create": True,
    }
    with pytest.raises(ValueError):
        _calls.append("t", [])
    with pytest.raises(ValueError):
        _calls.append("t", "not a list")


def test_diff_long_poll_extends_the_timeout_and_quotes_names() -> None:
    call = _calls.diff("tenant:a.b", 5, limit=10, node=["n1", "n2"], wait_ms=20_000)
    assert call.path == "/v0/topics/tenant:a.b/diff"
    assert call.json == {
        "from_seq": 5,
        "include_tags": False,
        "include_meta": True,
        "limit": 10,
        "node": ["n1", "n2"],
        "wait_ms": 20_000,
    }
    assert call.extra_timeout_s == 20.0
    assert _calls.diff("t").extra_timeout_s == 0.0


def test_watch_and_queue_bodies() -> None:
    assert _calls.watch_body({"a": 3}, heartbeat_ms=1000)["topics"] == {"a": {"from_seq": 3}}
    assert _calls.watch_body(["a"], tail=True)["topics"] == {"a": {"tail": True}}
    with pytest.raises(ValueError):
        _calls.watch_body([])
    assert _calls.queue_config(max_deliveries=3, dead_letter="dlq") == {
        "type": "queue",
        "max_deliveries": 3,
        "dead_letter": "dlq",
    }
    assert _calls.nack("q", "n", [1], ["lease_a"], delay_ms=5).json == {
        "node": "n",
        "seqs": [1],
        "lease_ids": ["lease_a"],
        "delay_ms": 5,
    }
    assert _calls.extend("q", "n", [1, 2], 900).json == {
        "node": "n",
        "seqs": [1, 2],
        "lease_ms": 900,
    }


def mock(handler: Any) -> Client:
    return Client("http://hw.test", "secret", node="me", transport=httpx.MockTransport(handler))


def test_errors_carry_the_envelope_and_are_typed() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["authorization"] == "Bearer secret"
        path = request.url.path
        if path == "/v0/topics/missing":
            body = {
                "error": {
                    "code": "topic_not_found",
                    "message": "no topic 'missing'",
                    "detail": {"topic": "missing"},
                }
            }
            return httpx.Response(404, json=body)
        if path == "/v0/topics/q/claim":
            return httpx.Response(409, json={"error": {"code": "not_a_queue", "message": "log"}})
        if path == "/v0/topics":
            return httpx.Response(
                429,
                headers={"Retry-After": "3"},
                json={"error": {"code": "throttled", "message": "cap"}},
            )
        if path == "/v1/stream/s":  # Durable Streams' envelope has no detail
            return httpx.Response(404, json={"error": {"code": "not_found", "message": "no s"}})
        if path == "/v0/topics/hot":  # a saturated topic: a sub-second hint in the detail
            return httpx.Response(
                429,
                headers={"Retry-After": "1"},
                json={
                    "error": {
                        "code": "throttled",
                        "message": "hot",
                        "detail": {"topic": "hot", "retry_after_ms": 120},
                    }
                },
            )
        return httpx.Response(502, text="<html>bad gateway</html>")

    with mock(handler) as hw:
        with pytest.raises(NotFound) as nf:
            hw.get_topic("missing")
        e = nf.value
        assert (e.status, e.code, e.message, e.detail) == (
            404,
            "topic_not_found",
            "no topic 'missing'",
            {"topic": "missing"},
        )
        assert e.method == "GET" and e.url.endswith("/v0/topics/missing")
        assert str(e) == "404 topic_not_found: no topic 'missing'"
        with pytest.raises(Conflict, match="not_a_queue"):
            hw.claim("q")
        with pytest.raises(Throttled) as th:
            hw.list_topics()
        assert th.value.retry_after == 3.0
        with pytest.raises(Throttled) as hot:
            hw.get_topic("hot")
        assert hot.value.retry_after == 0.12
        with pytest.raises(NotFound) as ds:
            hw.streams.head("s")
        assert ds.value.code == "not_found" and ds.value.detail is None
        with pytest.raises(ServerError) as se:
            hw.health()
        assert se.value.status == 502 and se.value.code == "http_error"
        assert "bad gateway" in se.value.message and isinstance(se.value, ApiError)


def test_transport_failures_become_connection_failed() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with mock(handler) as hw, pytest.raises(ConnectionFailed) as err:
        hw.health()
    assert isinstance(err.value.cause, httpx.ConnectError)


def test_results_parse_the_wire_shapes() -> None:
    answers = {
        "/v0/topics/t": {
            "topic": "t",
            "first_seq": 4,
            "last_seq": 5,
            "seqs": [4, 5],
            "head_seq": 5,
            "count": 2,
            "created": False,
            "deduped": True,
            "performance": {"server_total_ms": 1},
        },
        "/v0/topics/q/claim": {
            "topic": "q",
            "count": 1,
            "ready": 0,
            "claimed": [
                {
                    "$seq": 7,
                    "$ts": 9,
                    "$tag": "g",
                    "data": {"x": 1},
                    "meta": {"k": "v"},
                    "lease_id": "lease_ab",
                    "deadline": 123,
                    "deliveries": 2,
                }
            ],
        },
        "/v0/topics/q/extend": {
            "topic": "q",
            "extended": 1,
            "skipped": [8],
            "deadlines": {"7": 999},
        },
    }

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=answers[request.url.path])

    with mock(handler) as hw:
        res = hw.append("t", [1, 2], idempotency_key="k")
        assert (res.first_seq, res.last_seq, res.deduped, res.seqs) == (4, 5, True, [4, 5])
        (job,) = hw.claim("q").jobs
        assert (job.topic, job.seq, job.tag, job.data, job.meta) == (
            "q",
            7,
            "g",
            {"x": 1},
            {"k": "v"},
        )
        assert (job.lease_id, job.deadline, job.deliveries) == ("lease_ab", 123, 2)
        assert job.to_json()["$seq"] == 7 and json.dumps(job.to_json())
        ext = hw.extend("q", [7, 8], 1000)
        assert ext.deadlines == {7: 999} and ext.skipped == [8]
