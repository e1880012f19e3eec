"""Record delete (spec §5): before_seq, tag match (Eq, trailing-* Glob, bare string), AND,
point-in-time, silent, earliest_seq advance, counters; and the per-topic tag index."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from api_helpers import (
    MakeClient,
    append,
    append_data,
    assert_error,
    diff,
    ok,
    put_topic,
    read_all,
    seqs_of,
    state,
)
from starlette.testclient import TestClient
from test_tiering import EAGER, services

from headwater.errors import StorageUnavailable, TopicNotFound

pytestmark = pytest.mark.api


def delete(client: TestClient, topic: str, **body: Any) -> dict[str, Any]:
    return ok(client.post(f"/v0/topics/{topic}/delete", json=body))


def live_seqs(client: TestClient, topic: str) -> list[int]:
    return [r["$seq"] for r in read_all(client, topic)]


def tagged(client: TestClient, topic: str, *tags: str | None) -> None:
    append(client, topic, [{"data": i, **({"tag": t} if t else {})} for i, t in enumerate(tags)])


def test_before_seq_deletes_prefix(client: TestClient) -> None:
    append_data(client, "d", *range(10))
    before = state(client, "d")
    # WHEN deleting everything before seq 4
    body = delete(client, "d", before_seq=4)
    # THEN 3 records go, the floor moves, and the counters follow
    assert body == {
        **body,
        "topic": "d",
        "deleted": 3,
        "earliest_seq": 4,
        "head_seq": 10,
        "count": 7,
    }
    assert 0 < body["bytes"] < before["bytes"]
    st = state(client, "d")
    assert (st["earliest_seq"], st["count"], st["bytes"], st["head_seq"]) == (
        4,
        7,
        body["bytes"],
        10,
    )
    assert live_seqs(client, "d") == list(range(4, 11))


def test_before_seq_past_head_deletes_all(client: TestClient) -> None:
    append_data(client, "d", 1, 2, 3)
    body = delete(client, "d", before_seq=10**6)
    assert (body["deleted"], body["count"], body["bytes"]) == (3, 0, 0)
    assert (body["earliest_seq"], body["head_seq"]) == (4, 3)  # empty: head + 1
    assert live_seqs(client, "d") == []
    # AND seqs keep counting from the head
    assert append_data(client, "d", 4)["seqs"] == [4]
    assert state(client, "d")["earliest_seq"] == 4


def test_before_seq_at_floor_deletes_nothing(client: TestClient) -> None:
    append_data(client, "d", 1, 2)
    for before in (0, 1):
        body = delete(client, "d", before_seq=before)
        assert (body["deleted"], body["count"], body["earliest_seq"]) == (0, 2, 1)


def test_delete_is_idempotent(client: TestClient) -> None:
    append_data(client, "d", 1, 2, 3)
    assert delete(client, "d", before_seq=3)["deleted"] == 2
    assert delete(client, "d", before_seq=3)["deleted"] == 0
    tagged(client, "t", "x", "x")
    assert delete(client, "t", match="x")["deleted"] == 2
    assert delete(client, "t", match="x")["deleted"] == 0


def test_match_eq(client: TestClient) -> None:
    tagged(client, "m", "t1", "t2", "t1", None, "t3", "t1x")
    body = delete(client, "m", match=["tag", "Eq", "t1"])
    assert body["deleted"] == 2 and body["count"] == 4
    assert live_seqs(client, "m") == [2, 4, 5, 6]


def test_match_bare_string_is_eq(client: TestClient) -> None:
    tagged(client, "m", "tenant42:job-9001", "tenant42:job-9001x", "tenant42:job-9001")
    assert delete(client, "m", match="tenant42:job-9001")["deleted"] == 2
    assert live_seqs(client, "m") == [2]


def test_match_glob_trailing_prefix(client: TestClient) -> None:
    tagged(
        client, "g", "chat-42:a", "chat-42:b", "chat-420", "chat-4", "chat-43:x", None, "chat-42:"
    )
    body = delete(client, "g", match=["tag", "Glob", "chat-42:*"])
    assert body["deleted"] == 3
    assert live_seqs(client, "g") == [3, 4, 5, 6]


def test_glob_star_matches_every_tagged_record_only(client: TestClient) -> None:
    tagged(client, "g", "a", None, "b", None, "c")
    assert delete(client, "g", match=["tag", "Glob", "*"])["deleted"] == 3
    assert live_seqs(client, "g") == [2, 4]


def test_records_without_tag_are_never_matched(client: TestClient) -> None:
    append(client, "u", [{"data": ""}, {"data": "x"}, {"data": None}])
    assert delete(client, "u", match="")["deleted"] == 0
    assert delete(client, "u", match=["tag", "Glob", "*"])["deleted"] == 0
    assert live_seqs(client, "u") == [1, 2, 3]


def test_match_and_before_seq_combine_with_and(client: TestClient) -> None:
    # GIVEN v1 and v2 of a message, and other records
    tagged(client, "v", "msg-123", "other", "msg-123", "msg-123")  # seqs 1..4
    # WHEN deleting its versions before v2 (seq 3)
    body = delete(client, "v", match=["tag", "Eq", "msg-123"], before_seq=3)
    # THEN only seq 1 goes
    assert body["deleted"] == 1
    assert live_seqs(client, "v") == [2, 3, 4]
    glob = delete(client, "v", match=["tag", "Glob", "msg-*"], before_seq=4)
    assert glob["deleted"] == 1 and live_seqs(client, "v") == [2, 4]


def test_delete_is_point_in_time(client: TestClient) -> None:
    tagged(client, "p", "chat-42:u1", "chat-42:u2")
    assert delete(client, "p", match=["tag", "Glob", "chat-42:*"])["deleted"] == 2
    # WHEN records with a matching tag arrive after the delete
    tagged(client, "p", "chat-42:u1", "chat-42:u3")
    # THEN they survive: a delete is not a standing filter
    recs = read_all(client, "p", include_tags=True)
    assert [(r["$seq"], r["$tag"]) for r in recs] == [(3, "chat-42:u1"), (4, "chat-42:u3")]


def test_delete_is_silent_and_cursor_advances(client: TestClient) -> None:
    tagged(client, "s", None, None, None, "gone", "gone")
    delete(client, "s", match="gone")
    # WHEN a consumer positioned before the deleted tail reads
    body = diff(client, "s", from_seq=3)
    # THEN no records, no tombstone, and the cursor still reaches the head
    assert body["records"] == [] and body["tombstone"] is None
    assert (body["next_from_seq"], body["caught_up"], body["head_seq"]) == (5, True, 5)
    mid = diff(client, "s", from_seq=0)
    assert seqs_of(mid) == [1, 2, 3] and mid["tombstone"] is None


def test_deleted_gap_in_the_middle_is_skipped(client: TestClient) -> None:
    tagged(client, "s", None, "x", "x", None)
    delete(client, "s", match="x")
    body = diff(client, "s", from_seq=1, limit=1)
    assert seqs_of(body) == [4] and body["tombstone"] is None


def test_tag_delete_of_first_records_advances_earliest_seq(client: TestClient) -> None:
    tagged(client, "e", "a", "a", "b", "a")
    body = delete(client, "e", match="a")
    assert body["deleted"] == 3
    assert (body["earliest_seq"], body["count"]) == (3, 1)
    st = state(client, "e")
    assert (st["earliest_seq"], st["count"], st["head_seq"], st["next_seq"]) == (3, 1, 4, 5)
    d = diff(client, "e")
    assert d["earliest_seq"] == 3 and seqs_of(d) == [3]


def test_earliest_seq_skips_a_deleted_run_after_the_prefix(client: TestClient) -> None:
    tagged(client, "e", None, "x", "x", None)
    delete(client, "e", match="x")
    assert state(client, "e")["earliest_seq"] == 1
    body = delete(client, "e", before_seq=2)
    assert (body["deleted"], body["earliest_seq"], body["count"]) == (1, 4, 1)


def test_deleting_everything_by_tag_leaves_empty_topic(client: TestClient) -> None:
    tagged(client, "e", "a", "a")
    body = delete(client, "e", match="a")
    assert (body["count"], body["bytes"], body["earliest_seq"], body["head_seq"]) == (0, 0, 3, 2)
    assert ok(client.delete("/v0/topics/e", params={"if_empty": "true"}))["deleted"] is True


def test_bytes_are_accounted_per_record(client: TestClient) -> None:
    append(client, "b", [{"data": "x" * 10, "tag": "small"}, {"data": "y" * 5000, "tag": "big"}])
    full = state(client, "b")["bytes"]
    after_big = delete(client, "b", match="big")["bytes"]
    assert full - after_big >= 5000
    assert delete(client, "b", match="small")["bytes"] == 0


def test_tag_delete_across_many_frames(client: TestClient) -> None:
    # GIVEN one tagged record per append (one frame each) interleaved with untagged ones
    for i in range(30):
        append(client, "f", [{"data": i, "tag": "x" if i % 3 == 0 else f"y{i}"}])
    # WHEN the tag is deleted THEN exactly its records go
    assert delete(client, "f", match="x")["deleted"] == 10
    assert live_seqs(client, "f") == [i + 1 for i in range(30) if i % 3 != 0]
    assert state(client, "f")["count"] == 20


@pytest.mark.parametrize("creating", [True, False])
def test_many_distinct_tags_in_one_batch_pending_index(client: TestClient, creating: bool) -> None:
    # GIVEN one batch with more distinct tags than fit the commit transaction (the tag index
    # is then written after the commit)
    if not creating:
        append_data(client, "p", "pre")
    tags = [f"u:{i:03d}" for i in range(120)]
    append(client, "p", [{"data": t, "tag": t} for t in tags] + [{"data": "untagged"}])
    first = 1 if creating else 2
    # WHEN deleting one tag exactly and a prefix range
    assert delete(client, "p", match="u:005")["deleted"] == 1
    assert delete(client, "p", match=["tag", "Glob", "u:01*"])["deleted"] == 10
    # THEN exactly those records are gone
    gone = {"u:005"} | {f"u:01{d}" for d in range(10)}
    live = [r["data"] for r in read_all(client, "p")]
    expected = ([] if creating else ["pre"]) + [t for t in tags if t not in gone] + ["untagged"]
    assert live == expected
    st = state(client, "p")
    assert st["count"] == len(expected)
    assert st["head_seq"] == first + 120
    # AND a later batch with the same tags is indexed and deletable too
    append(client, "p", [{"data": "again", "tag": "u:005"}])
    assert delete(client, "p", match=["tag", "Glob", "u:*"])["deleted"] == 110


def test_tag_index_belongs_to_one_topic_incarnation(client: TestClient) -> None:
    tagged(client, "r", "x", "x", "y")
    ok(client.delete("/v0/topics/r"))
    tagged(client, "r", "y", "x")
    body = delete(client, "r", match="x")
    assert (body["deleted"], body["count"]) == (1, 1)
    assert [r["data"] for r in read_all(client, "r")] == [0]


def test_tag_delete_with_idempotent_batches(client: TestClient) -> None:
    append(client, "i", [{"data": 1, "tag": "k"}], idempotency_key="a")
    append(client, "i", [{"data": 2, "tag": "k"}], idempotency_key="b")
    assert delete(client, "i", match="k")["deleted"] == 2


# --- errors ----------------------------------------------------------------------------


BAD_DELETE_BODIES: list[dict[str, Any]] = [
    {},
    {"before_seq": None},
    {"match": None},
    {"before_seq": "5"},
    {"before_seq": -1},
    {"before_seq": 1.5},
    {"before_seq": True},
    {"match": 5},
    {"match": ["tag", "Eq"]},
    {"match": ["tag", "Eq", "x", "y"]},
    {"match": ["tag", "Eq", 5]},
    {"match": ["node", "Eq", "x"]},
    {"match": ["tag", "Regex", "x.*"]},
    {"match": ["tag", "eq", "x"]},
    {"match": ["tag", "Glob", "x"]},
    {"match": ["tag", "Glob", "a*b*"]},
    {"match": ["tag", "Glob", "*x"]},
    {"match": {"tag": "x"}},
    {"match": ["tag", "Eq", "x"], "before_seq": "1"},
]


def test_bad_delete_bodies_are_400(client: TestClient) -> None:
    tagged(client, "d", "x", "x*")
    for body in BAD_DELETE_BODIES:
        r = client.post("/v0/topics/d/delete", json=body)
        assert r.status_code == 400, (body, r.text)
        assert_error(r, 400, "invalid_request")
    assert state(client, "d")["count"] == 2


def test_delete_records_on_missing_topic_is_404(client: TestClient) -> None:
    for body in ({"before_seq": 5}, {"match": "x"}):
        err = assert_error(
            client.post("/v0/topics/ghost/delete", json=body), 404, "topic_not_found"
        )
        assert err["detail"]["topic"] == "ghost"
    assert_error(client.get("/v0/topics/ghost"), 404, "topic_not_found")


def test_delete_requires_json_body(client: TestClient) -> None:
    put_topic(client, "d")
    assert_error(client.post("/v0/topics/d/delete"), 400, "invalid_request")
    r = client.post(
        "/v0/topics/d/delete", content=b'{"before_seq": 1}', headers={"content-type": "text/plain"}
    )
    assert_error(r, 415, "unsupported_media_type")


def test_tag_index_left_pending_by_a_failed_writer_is_completed_on_delete(
    make_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN an app whose post-commit tag indexing fails once (a writer dying after commit)
    c = make_client()
    engine = c.app.state.services.get().engine  # type: ignore[attr-defined]
    real = engine.tail.write_tag_entries
    calls = {"n": 0}

    def flaky(*args: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise StorageUnavailable("storage error: simulated crash")
        real(*args)

    monkeypatch.setattr(engine.tail, "write_tag_entries", flaky)
    append_data(c, "p", "pre")
    tags = [f"u:{i:03d}" for i in range(120)]
    r = c.post("/v0/topics/p", json={"records": [{"data": t, "tag": t} for t in tags]})
    # THEN the committed write is reported as the success it is
    assert ok(r)["seqs"] == list(range(2, 122))
    # WHEN deleting by tag THEN the pending frame is indexed first and matched exactly
    assert delete(c, "p", match=["tag", "Glob", "u:00*"])["deleted"] == 10
    assert delete(c, "p", match="u:119")["deleted"] == 1
    assert state(c, "p")["count"] == 110


# --- LogEngine.delete_seqs: one record by seq (the /api/v1 admin delete) -----------------------
def _delete_seqs(client: TestClient, topic: str, *seqs: int) -> tuple[int, int, int, int]:
    svc = services(client)
    result = asyncio.run(svc.engine.delete_seqs(topic, list(seqs)))
    return result.deleted, result.head.count, result.head.earliest_seq, result.head.head_seq


def test_delete_seqs_removes_exactly_those_records(client: TestClient) -> None:
    append(client, "one", [{"data": i} for i in range(6)])  # one frame holding seqs 1..6
    full = state(client, "one")
    # WHEN deleting seqs 3 and 5 (and 9, past the head: skipped)
    assert _delete_seqs(client, "one", 5, 3, 9) == (2, 4, 1, 6)
    # THEN only they are gone, the counters follow, and a second delete removes nothing
    assert live_seqs(client, "one") == [1, 2, 4, 6]
    st = state(client, "one")
    assert st["count"] == 4 and 0 < st["bytes"] < full["bytes"]
    assert _delete_seqs(client, "one", 3) == (0, 4, 1, 6)


def test_delete_seqs_of_the_first_record_moves_the_floor(client: TestClient) -> None:
    append_data(client, "f", "a", "b", "c")
    assert _delete_seqs(client, "f", 1) == (1, 2, 2, 3)
    assert _delete_seqs(client, "f", 2) == (1, 1, 3, 3)
    assert live_seqs(client, "f") == [3]


def test_delete_seqs_below_the_floor_or_on_a_missing_topic(client: TestClient) -> None:
    append_data(client, "g", *range(4))
    delete(client, "g", before_seq=3)
    assert _delete_seqs(client, "g", 1, 2) == (0, 2, 3, 4)
    with pytest.raises(TopicNotFound):
        _delete_seqs(client, "never-made", 1)


def test_delete_seqs_in_sealed_segments_and_tail(make_client: MakeClient) -> None:
    c = make_client(tiering=EAGER)
    for first in range(0, 30, 5):
        append(c, "sealed", [{"data": {"i": first + k}} for k in range(5)])
    assert services(c).upkeep.run("sealed").sealed >= 1
    append(c, "sealed", [{"data": {"i": 30 + k}} for k in range(5)])  # an unsealed tail
    sealed_through = state(c, "sealed")["sealed_through"]
    assert 10 <= sealed_through <= 30
    # WHEN deleting a sealed record, the first record and a tail record
    deleted, count, earliest, _ = _delete_seqs(c, "sealed", 4, 1, 33)
    # THEN all three are gone, from a fresh reader too
    assert (deleted, count, earliest) == (3, 32, 2)
    want = [s for s in range(1, 36) if s not in (1, 4, 33)]
    assert live_seqs(c, "sealed") == want
    assert live_seqs(make_client(), "sealed") == want
