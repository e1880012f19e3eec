"""/v1 Durable Streams behaviour this server promises beyond what the public conformance suite
checks (that suite runs in tests/e2e/test_ds_conformance.py): offsets as §5, epoch fencing,
the error envelope, routing keys, listing, caching headers, expiry, timeouts."""

from __future__ import annotations

import json
import re

import pytest
from api_helpers import MakeClient
from httpx import Response
from starlette.testclient import TestClient

from headwater.durable.offsets import Offset, decode_offset, encode_offset

pytestmark = pytest.mark.api

OFFSET_RE = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")


def url(name: str) -> str:
    return f"/v1/stream/{name}"


def create(client: TestClient, name: str, ct: str = "application/json", **headers: str) -> None:
    r = client.put(url(name), headers={"Content-Type": ct, **headers})
    assert r.status_code == 201, r.text


def append_json(client: TestClient, name: str, *values: object, **headers: str) -> str:
    r = client.post(
        url(name),
        content=json.dumps(list(values)),
        headers={"Content-Type": "application/json", **headers},
    )
    assert r.status_code == 204, r.text
    return r.headers["Stream-Next-Offset"]


def producer_post(c: TestClient, name: str, body: str, epoch: int, seq: int) -> Response:
    """A text append by idempotent producer "w"."""
    return c.post(
        url(name),
        content=body,
        headers={
            "Content-Type": "text/plain",
            "Producer-Id": "w",
            "Producer-Epoch": str(epoch),
            "Producer-Seq": str(seq),
        },
    )


def decoded(text: str) -> Offset:
    off = decode_offset(text)
    assert isinstance(off, Offset)
    return off


def test_offsets_are_canonical_26_char_base32_of_epoch_and_seq(client: TestClient) -> None:
    r = client.put(url("offs"), headers={"Content-Type": "application/json"}, content=b"[1,2]")
    assert r.status_code == 201
    created = r.headers["Stream-Next-Offset"]
    assert OFFSET_RE.match(created)
    after = append_json(client, "offs", 3)
    assert OFFSET_RE.match(after) and after > created
    a, b = decoded(created), decoded(after)
    assert (a.epoch, a.seq, a.in_block) == (b.epoch, 2, 0)
    assert b.seq == 3
    # Lower case is accepted on input; the -1 shorthand reads from the start.
    r = client.get(url("offs"), params={"offset": created.lower()})
    assert r.json() == [3]
    assert client.get(url("offs"), params={"offset": "-1"}).json() == [1, 2, 3]


@pytest.mark.parametrize("bad", ["0", "1", "42", "00", " -1", "0,1", "0 1", "../x", "Z" * 26])
def test_decimal_aliases_and_malformed_offsets_are_400(client: TestClient, bad: str) -> None:
    create(client, "badoff")
    r = client.get(url("badoff"), params={"offset": bad})
    assert r.status_code == 400, (bad, r.text)
    assert set(r.json()) == {"error"} and set(r.json()["error"]) == {"code", "message"}


def test_offset_past_the_tail_is_400(client: TestClient) -> None:
    create(client, "past")
    tail = append_json(client, "past", "a")
    off = decoded(tail)
    beyond = encode_offset(off.epoch, off.seq + 1)
    assert client.get(url("past"), params={"offset": beyond}).status_code == 400
    future_epoch = encode_offset(off.epoch + 1, 0)
    assert client.get(url("past"), params={"offset": future_epoch}).status_code == 400


def test_delete_and_recreate_fences_old_offsets_with_410(client: TestClient) -> None:
    create(client, "fence")
    old = append_json(client, "fence", "old-1", "old-2")
    assert client.delete(url("fence")).status_code == 204
    create(client, "fence")
    append_json(client, "fence", "new")
    r = client.get(url("fence"), params={"offset": old})
    assert r.status_code == 410
    assert r.json()["error"]["code"] == "offset_gone"
    fresh = decoded(r.headers["Stream-Next-Offset"])
    assert fresh.epoch == decoded(old).epoch + 1 and fresh.seq == 0
    assert client.get(url("fence"), params={"offset": "-1"}).json() == ["new"]


def test_error_envelope_is_exactly_code_and_message(client: TestClient) -> None:
    r = client.get(url("nope"), params={"offset": "-1"})
    assert r.status_code == 404
    assert r.json() == {
        "error": {"code": "stream_not_found", "message": "stream 'nope' does not exist"}
    }
    assert r.headers["x-content-type-options"] == "nosniff"


def test_json_mode_flattens_one_level_and_rejects_bad_bodies(client: TestClient) -> None:
    create(client, "js")
    append_json(client, "js", [1, 2], {"a": 1})
    r = client.post(url("js"), content=b'"solo"', headers={"Content-Type": "application/json"})
    assert r.status_code == 204
    assert client.get(url("js")).json() == [[1, 2], {"a": 1}, "solo"]
    for body in (b"[]", b"{not json", b"[1,"):
        r = client.post(url("js"), content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 400, body
    # Nothing half-written: the stream still holds exactly the three values.
    assert client.get(url("js"), params={"format": "json"}).json() == [[1, 2], {"a": 1}, "solo"]


def test_format_json_on_a_byte_stream_is_400(client: TestClient) -> None:
    create(client, "bytes", "application/octet-stream")
    r = client.get(url("bytes"), params={"offset": "-1", "format": "json"})
    assert r.status_code == 400


def test_routing_key_reads_by_query_and_path(client: TestClient) -> None:
    create(client, "keyed", "text/plain")
    for key, body in [("a", "1"), ("b/x", "2"), ("a", "3"), ("c", "4"), ("b/x", "5")]:
        r = client.post(
            url("keyed"), content=body, headers={"Content-Type": "text/plain", "Stream-Key": key}
        )
        assert r.status_code == 204
    assert client.get(url("keyed"), params={"offset": "-1", "key": "a"}).text == "13"
    r = client.get("/v1/stream/keyed/pk/b%2Fx", params={"offset": "-1"})
    assert r.status_code == 200 and r.text == "25"
    assert r.headers["Stream-Up-To-Date"] == "true"
    # The next offset moves past non-matching entries, so a resumed keyed read is cheap.
    assert decoded(r.headers["Stream-Next-Offset"]).seq == 5
    assert client.get(url("keyed"), params={"offset": "-1", "key": "zzz"}).text == ""


def test_stream_key_limits(client: TestClient) -> None:
    create(client, "klim", "text/plain")
    r = client.post(
        url("klim"), content="x", headers={"Content-Type": "text/plain", "Stream-Key": "k" * 257}
    )
    assert r.status_code == 400


def test_list_streams_pages_and_hides_deleted(client: TestClient) -> None:
    for i in range(5):
        create(client, f"list-{i}", "text/plain", **({"Stream-TTL": "60"} if i == 1 else {}))
    client.delete(url("list-3"))
    r = client.get("/v1/streams", params={"limit": "2"})
    assert r.status_code == 200
    page1 = r.json()
    assert [d["name"] for d in page1] == ["list-0", "list-1"]
    assert page1[1]["ttl_seconds"] == 60 and page1[0]["profile"] == "generic"
    after = r.headers["Stream-List-Next-After"]
    r = client.get("/v1/streams", params={"limit": "10", "after": after})
    assert [d["name"] for d in r.json()] == ["list-2", "list-4"]
    assert "Stream-List-Next-After" not in r.headers
    # /v1 streams never show up among /v0 topics.
    topics = client.get("/v0/topics").json()
    assert not any(t["topic"].startswith("~") for t in topics.get("topics", []))


def test_caching_headers_distinguish_full_pages_from_tail_reads(client: TestClient) -> None:
    from headwater.http.v1_reads import PAGE_BYTES

    size = PAGE_BYTES * 3 // 4  # two such entries do not fit one page
    create(client, "cache", "text/plain")
    client.post(url("cache"), content="x" * size, headers={"Content-Type": "text/plain"})
    client.post(url("cache"), content="y" * size, headers={"Content-Type": "text/plain"})
    first = client.get(url("cache"), params={"offset": "-1"})
    assert first.status_code == 200 and first.text == "x" * size
    assert "Stream-Up-To-Date" not in first.headers
    assert first.headers["Cache-Control"] == "immutable, max-age=31536000"
    etag = first.headers["ETag"]
    assert etag.startswith('W/"slice:-1:') and etag.endswith(':key=:fmt=raw:filter="')
    again = client.get(url("cache"), params={"offset": "-1"}, headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    tail = client.get(url("cache"), params={"offset": first.headers["Stream-Next-Offset"]})
    assert tail.text == "y" * size and tail.headers["Stream-Up-To-Date"] == "true"
    assert tail.headers["Cache-Control"] == "no-cache"
    live = client.get(
        url("cache"),
        params={"offset": first.headers["Stream-Next-Offset"], "live": "long-poll"},
    )
    assert live.headers["Cache-Control"] == "no-store"


def test_payload_over_the_append_cap_is_413_and_writes_nothing(client: TestClient) -> None:
    create(client, "big", "application/octet-stream")
    r = client.post(
        url("big"),
        content=b"z" * (6 << 20 + 1),
        headers={"Content-Type": "application/octet-stream"},
    )
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "payload_too_large"
    assert client.get(url("big"), params={"offset": "-1"}).content == b""


def test_stream_timestamp_is_clamped_so_time_never_goes_back(client: TestClient) -> None:
    create(client, "ts", "text/plain")
    for stamp in ("2030-01-01T00:00:00Z", "2020-01-01T00:00:00Z"):
        r = client.post(
            url("ts"),
            content="e",
            headers={"Content-Type": "text/plain", "Stream-Timestamp": stamp},
        )
        assert r.status_code == 204
    r = client.post(
        url("ts"), content="e", headers={"Content-Type": "text/plain", "Stream-Timestamp": "soon"}
    )
    assert r.status_code == 400
    # The log underneath records the clamped append times.
    svc = client.app.state.services.get()  # type: ignore[attr-defined]
    head = svc.engine.heads.get("~ds/ts")
    assert head is not None and head.last_write_ts == 1893456000000  # 2030-01-01


def test_ttl_and_expires_at_validation(client: TestClient) -> None:
    both = {"Stream-TTL": "60", "Stream-Expires-At": "2030-01-01T00:00:00Z"}
    assert client.put(url("ttlv"), headers=both).status_code == 400
    for bad in ("abc", "-1", "1.5", "+5", "007"):
        assert client.put(url("ttlv"), headers={"Stream-TTL": bad}).status_code == 400
    assert client.put(url("ttlv"), headers={"Stream-TTL": "24h"}).status_code == 201
    h = client.head(url("ttlv"))
    assert h.headers["Stream-TTL"] == str(24 * 3600)
    assert client.put(url("ttlv"), headers={"Stream-TTL": "86400"}).status_code == 200
    assert client.put(url("ttlv"), headers={"Stream-TTL": "3600"}).status_code == 409


def test_expired_stream_reads_as_missing_and_can_be_recreated(client: TestClient) -> None:
    create(client, "exp", "text/plain", **{"Stream-Expires-At": "2001-01-01T00:00:00Z"})
    assert client.head(url("exp")).status_code == 404
    assert client.get(url("exp"), params={"offset": "-1"}).status_code == 404
    r = client.post(url("exp"), content="x", headers={"Content-Type": "text/plain"})
    assert r.status_code == 404
    assert client.put(url("exp"), headers={"Content-Type": "text/plain"}).status_code == 201
    assert client.get(url("exp"), params={"offset": "-1"}).status_code == 200


def test_profile_defaults_to_generic(client: TestClient) -> None:
    create(client, "prof")
    r = client.get("/v1/stream/prof/_profile")
    assert r.json() == {"apiVersion": "durable.streams/profile/v1", "profile": {"kind": "generic"}}


def test_producer_rules(client: TestClient) -> None:
    create(client, "prod", "text/plain")

    def send(body: str, epoch: int, seq: int) -> tuple[int, dict[str, str]]:
        r = producer_post(client, "prod", body, epoch, seq)
        return r.status_code, dict(r.headers)

    assert send("a", 0, 0)[0] == 200
    assert send("b", 0, 1)[0] == 200
    status, headers = send("b", 0, 1)
    assert status == 204 and headers["producer-seq"] == "1"
    status, headers = send("d", 0, 3)
    assert status == 409 and headers["producer-expected-seq"] == "2"
    assert send("x", 1, 5)[0] == 400
    assert send("c", 1, 0)[0] == 200
    status, headers = send("z", 0, 2)
    assert status == 403 and headers["producer-epoch"] == "1"
    assert client.get(url("prod"), params={"offset": "-1"}).text == "abc"


def test_shutting_down_answers_503_with_retry_after(client: TestClient) -> None:
    create(client, "bye", "text/plain")
    svc = client.app.state.services.get()  # type: ignore[attr-defined]
    svc.shutting_down = True
    try:
        r = client.get(url("bye"), params={"offset": "-1"})
    finally:
        svc.shutting_down = False
    assert r.status_code == 503 and r.headers["Retry-After"] == "5"
    assert r.json()["error"]["code"] == "shutting_down"


def test_since_seeks_by_append_time_and_offset_wins(client: TestClient) -> None:
    create(client, "since", "text/plain")
    stamps = ["2030-01-01T00:00:00Z", "2030-01-01T00:00:01Z", "2030-01-01T00:00:02Z"]
    for i, stamp in enumerate(stamps):
        r = client.post(
            url("since"),
            content=str(i),
            headers={"Content-Type": "text/plain", "Stream-Timestamp": stamp},
        )
        assert r.status_code == 204
    assert client.get(url("since"), params={"since": "2030-01-01T00:00:01Z"}).text == "12"
    nanos = str(1893456001500 * 1_000_000)  # 00:00:01.5 as unix nanoseconds
    assert client.get(url("since"), params={"since": nanos}).text == "2"
    assert client.get(url("since"), params={"since": "2031-01-01T00:00:00Z"}).text == ""
    both = client.get(url("since"), params={"since": "2030-01-01T00:00:02Z", "offset": "-1"})
    assert both.text == "012"
    assert client.get(url("since"), params={"since": "yesterday"}).status_code == 400


def test_guards_in_one_group_commit_see_each_others_state(client: TestClient) -> None:
    """Appends queued together commit as one frame; each guard decides on the state the
    requests ahead of it leave (Stream-Seq order, closure), all in one conditional write."""
    from headwater.durable.errors import SeqConflict, StreamClosed
    from headwater.durable.service import Entry

    create(client, "group", "text/plain")
    streams = client.app.state.services.get().streams  # type: ignore[attr-defined]

    async def burst() -> list[object]:
        import asyncio

        def go(body: str, seq: str, close: bool = False) -> object:
            return streams.append(
                "group",
                [Entry(body.encode())],
                content_type="text/plain",
                stream_seq=seq,
                close=close,
            )

        return await asyncio.gather(
            go("b", "b"),
            go("a", "a"),
            go("c", "c", close=True),
            go("d", "d"),
            return_exceptions=True,
        )

    b, a, c, d = client.portal.call(burst)  # type: ignore[union-attr]
    assert isinstance(a, SeqConflict)
    assert isinstance(d, StreamClosed) and d.headers["Stream-Closed"] == "true"
    assert b.appended and c.appended and c.state.closed  # type: ignore[union-attr]
    # b and c landed in one frame: one commit, consecutive seqs.
    b_seq, c_seq = decoded(b.next_offset).seq, decoded(c.next_offset).seq  # type: ignore[union-attr]
    assert c_seq == b_seq + 1
    engine = client.app.state.services.get().engine  # type: ignore[attr-defined]
    head = engine.heads.get("~ds/group")
    frames = engine.tail.read_frames(head, 0, head.head_seq, 100, 0)
    assert [(f.first_seq, f.last_seq) for f in frames] == [(b_seq, c_seq)]
    # The closed-stream error names the final offset, which includes c.
    assert d.headers["Stream-Next-Offset"] == c.next_offset  # type: ignore[union-attr]
    r = client.get(url("group"), params={"offset": "-1"})
    assert r.text == "bc" and r.headers["Stream-Closed"] == "true"


def test_a_verdict_that_writes_nothing_is_judged_on_the_current_head(
    client: TestClient, make_client: MakeClient
) -> None:
    """Two server processes (two apps, two engines, two head caches) over one table: a
    duplicate verdict that process A would reach on its stale cached head is re-judged on a
    fresh read, where process B has since fenced the producer's epoch."""
    other = make_client()
    create(client, "fenced", "text/plain")

    def send(c: TestClient, body: str, epoch: int, seq: int) -> int:
        return producer_post(c, "fenced", body, epoch, seq).status_code

    assert send(client, "a", 0, 0) == 200  # A's cache now holds producer w at (0, 0)
    assert send(other, "b", 1, 0) == 200  # B moves w to epoch 1
    assert send(client, "a", 0, 0) == 403  # not a 204 duplicate off A's stale cache
    r = other.post(url("fenced"), content="", headers={"Stream-Closed": "true"})
    assert r.status_code == 204
    # A's cache still says open: its append is re-judged after the failed condition.
    r = client.post(url("fenced"), content="late", headers={"Content-Type": "text/plain"})
    assert r.status_code == 409 and r.headers["Stream-Closed"] == "true"
    assert client.get(url("fenced"), params={"offset": "-1"}).text == "ab"
