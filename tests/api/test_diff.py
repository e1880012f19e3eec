"""Diff (spec §3, §4.5): exclusive cursor, limit clamp, node filter, long-poll, watermarks."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from api_helpers import (
    append,
    append_data,
    assert_error,
    diff,
    ok,
    put_topic,
    seqs_of,
    state,
)
from starlette.testclient import TestClient

pytestmark = pytest.mark.api


def test_from_seq_is_exclusive(client: TestClient) -> None:
    append_data(client, "d", *range(1, 6))
    assert seqs_of(diff(client, "d", from_seq=0)) == [1, 2, 3, 4, 5]
    assert seqs_of(diff(client, "d", from_seq=2)) == [3, 4, 5]
    assert seqs_of(diff(client, "d", from_seq=4)) == [5]
    tail = diff(client, "d", from_seq=5)
    assert tail["records"] == [] and tail["caught_up"] is True and tail["next_from_seq"] == 5


def test_diff_response_shape(client: TestClient) -> None:
    append_data(client, "d", "a", "b", "c")
    body = diff(client, "d", from_seq=1, limit=1)
    assert body["topic"] == "d"
    assert seqs_of(body) == [2]
    assert body["next_from_seq"] == 2
    assert body["head_seq"] == 3
    assert body["earliest_seq"] == 1
    assert body["caught_up"] is False
    assert body["tombstone"] is None
    assert body["lag"] == 1
    assert isinstance(body["performance"].get("records_scanned", 0), int)
    # WHEN the consumer passes next_from_seq back
    nxt = diff(client, "d", from_seq=body["next_from_seq"])
    assert seqs_of(nxt) == [3]
    assert (nxt["next_from_seq"], nxt["caught_up"], nxt["lag"]) == (3, True, 0)


def test_diff_of_empty_topic(client: TestClient) -> None:
    put_topic(client, "e")
    body = diff(client, "e")
    assert body["records"] == []
    assert (body["head_seq"], body["earliest_seq"], body["next_from_seq"]) == (0, 1, 0)
    assert body["caught_up"] is True and body["lag"] == 0 and body["tombstone"] is None


def test_diff_with_empty_body_uses_defaults(client: TestClient) -> None:
    append_data(client, "d", 1, 2)
    r = client.post("/v0/topics/d/diff")
    assert seqs_of(ok(r)) == [1, 2]


def test_limit_is_clamped_not_rejected(client: TestClient) -> None:
    # GIVEN more records than the max limit
    append(client, "l", [{"data": i} for i in range(1200)])
    # WHEN asking for more than TOPICS_MAX_LIMIT
    big = diff(client, "l", limit=5000)
    # THEN 1000 records come back, with the cursor and lag to continue
    assert seqs_of(big) == list(range(1, 1001))
    assert (big["next_from_seq"], big["caught_up"], big["lag"]) == (1000, False, 200)
    rest = diff(client, "l", from_seq=1000, limit=5000)
    assert seqs_of(rest) == list(range(1001, 1201)) and rest["caught_up"] is True


def test_limit_zero_and_absent_mean_default_256(client: TestClient) -> None:
    append(client, "l", [{"data": i} for i in range(300)])
    assert len(diff(client, "l", limit=0)["records"]) == 256
    assert len(diff(client, "l")["records"]) == 256
    small = diff(client, "l", limit=10)
    assert seqs_of(small) == list(range(1, 11))
    assert (small["next_from_seq"], small["lag"]) == (10, 290)


def test_node_filter_string_omits_own_records_but_advances(client: TestClient) -> None:
    # GIVEN records from nodes a and b and from no node
    append(
        client,
        "n",
        [
            {"data": 1, "node": "a"},
            {"data": 2, "node": "b"},
            {"data": 3},
            {"data": 4, "node": "a"},
        ],
    )
    # WHEN node a reads
    body = diff(client, "n", node="a")
    # THEN its own records are omitted, the cursor still reaches the head
    assert seqs_of(body) == [2, 3]
    assert (body["next_from_seq"], body["caught_up"], body["lag"]) == (4, True, 0)
    assert [r["$node"] for r in body["records"] if "$node" in r] == ["b"]


def test_node_filter_array(client: TestClient) -> None:
    append(
        client,
        "n",
        [{"data": 1, "node": "a"}, {"data": 2, "node": "b"}, {"data": 3}, {"data": 4, "node": "c"}],
    )
    body = diff(client, "n", node=["a", "b"])
    assert seqs_of(body) == [3, 4]
    assert body["next_from_seq"] == 4
    assert seqs_of(diff(client, "n", node=[])) == [1, 2, 3, 4]


def test_node_filter_matches_byte_exact_only(client: TestClient) -> None:
    append(
        client,
        "n",
        [
            {"data": 1, "node": "worker-1"},
            {"data": 2, "node": "worker-10"},
            {"data": 3, "node": "Worker-1"},
        ],
    )
    assert seqs_of(diff(client, "n", node="worker-1")) == [2, 3]


def test_all_own_records_give_empty_page_with_advanced_cursor(client: TestClient) -> None:
    append(client, "n", [{"data": i} for i in range(5)], node="me")
    body = diff(client, "n", node="me")
    assert body["records"] == []
    assert (body["next_from_seq"], body["caught_up"], body["lag"]) == (5, True, 0)


def test_node_filter_with_limit_advances_past_filtered(client: TestClient) -> None:
    append(
        client,
        "n",
        [
            {"data": 1, "node": "me"},
            {"data": 2, "node": "me"},
            {"data": 3},
            {"data": 4},
            {"data": 5},
        ],
    )
    body = diff(client, "n", node="me", limit=2)
    assert seqs_of(body) == [3, 4]
    assert body["next_from_seq"] == 4 and body["caught_up"] is False
    assert seqs_of(diff(client, "n", node="me", from_seq=4)) == [5]


def test_batch_level_node_is_filtered(client: TestClient) -> None:
    append(client, "n", [{"data": 1}, {"data": 2, "node": "other"}], node="me")
    assert seqs_of(diff(client, "n", node="me")) == [2]


def test_dedupe_node_false_returns_own_records(client: TestClient) -> None:
    put_topic(client, "echo", {"dedupe_node": False})
    append(client, "echo", [{"data": 1, "node": "me"}, {"data": 2, "node": "you"}])
    body = diff(client, "echo", node="me")
    assert seqs_of(body) == [1, 2] and body["records"][0]["$node"] == "me"
    # AND turning it back on filters again
    put_topic(client, "echo", {"dedupe_node": True})
    assert seqs_of(diff(client, "echo", node="me")) == [2]


def test_include_flags(client: TestClient) -> None:
    append(client, "f", [{"data": 1, "tag": "t", "meta": {"m": 1}, "node": "x"}])
    recs = [
        diff(client, "f", include_tags=it, include_meta=im)["records"][0]
        for it in (False, True)
        for im in (False, True)
    ]
    assert [("$tag" in r, "meta" in r) for r in recs] == [
        (False, False),
        (False, True),
        (True, False),
        (True, True),
    ]
    assert all(r["$node"] == "x" for r in recs)


def test_diff_on_missing_topic_is_404_and_never_creates(client: TestClient) -> None:
    err = assert_error(client.post("/v0/topics/ghost/diff", json={}), 404, "topic_not_found")
    assert err["detail"]["topic"] == "ghost"
    assert_error(
        client.post("/v0/topics/ghost/diff", json={"wait_ms": 200}), 404, "topic_not_found"
    )
    assert_error(client.get("/v0/topics/ghost"), 404, "topic_not_found")


def test_diff_after_topic_delete_is_404(client: TestClient) -> None:
    append_data(client, "d", 1)
    ok(client.delete("/v0/topics/d"))
    assert_error(client.post("/v0/topics/d/diff", json={}), 404, "topic_not_found")


def test_diff_bumps_read_recency(client: TestClient) -> None:
    append_data(client, "d", 1)
    assert state(client, "d")["last_read_ts"] is None
    diff(client, "d")
    assert state(client, "d")["last_read_ts"] is not None


def test_from_seq_below_earliest_after_delete_is_silent(client: TestClient) -> None:
    append_data(client, "d", *range(10))
    ok(client.post("/v0/topics/d/delete", json={"before_seq": 6}))
    body = diff(client, "d", from_seq=2)
    assert seqs_of(body) == [6, 7, 8, 9, 10]
    assert body["tombstone"] is None and body["earliest_seq"] == 6


# --- long-poll -------------------------------------------------------------------------


def test_wait_ms_returns_as_soon_as_data_arrives(client: TestClient) -> None:
    # GIVEN a caught-up consumer on an existing topic
    append_data(client, "lp", "old")
    appended = threading.Event()

    def later() -> None:
        time.sleep(0.2)
        r = client.post("/v0/topics/lp", json={"records": [{"data": "new"}]})
        assert r.status_code == 200
        appended.set()

    t = threading.Thread(target=later)
    t0 = time.monotonic()
    t.start()
    # WHEN it long-polls from the head
    body = diff(client, "lp", from_seq=1, wait_ms=5000)
    elapsed = time.monotonic() - t0
    t.join()
    # THEN the append wakes it well before wait_ms
    assert appended.is_set()
    assert [r["data"] for r in body["records"]] == ["new"]
    assert body["next_from_seq"] == 2 and body["caught_up"] is True
    assert 0.1 <= elapsed < 4.0


def test_wait_ms_times_out_empty_and_caught_up(client: TestClient) -> None:
    append_data(client, "lp", 1, 2)
    t0 = time.monotonic()
    body = diff(client, "lp", from_seq=2, wait_ms=300)
    elapsed = time.monotonic() - t0
    assert body["records"] == [] and body["caught_up"] is True
    assert body["next_from_seq"] == 2 and body["lag"] == 0
    assert elapsed >= 0.25


def test_wait_ms_with_data_available_returns_immediately(client: TestClient) -> None:
    append_data(client, "lp", 1)
    t0 = time.monotonic()
    # wait_ms over the max is clamped, not rejected
    body = diff(client, "lp", from_seq=0, wait_ms=10**9)
    assert seqs_of(body) == [1]
    assert time.monotonic() - t0 < 2.0


def test_wait_ms_ignores_own_node_records(client: TestClient) -> None:
    append_data(client, "lp", 0)
    results: dict[str, Any] = {}

    def later() -> None:
        time.sleep(0.1)
        client.post("/v0/topics/lp", json={"records": [{"data": "mine"}], "node": "me"})
        time.sleep(0.2)
        client.post("/v0/topics/lp", json={"records": [{"data": "theirs"}], "node": "them"})

    t = threading.Thread(target=later)
    t.start()
    results["body"] = diff(client, "lp", from_seq=1, node="me", wait_ms=5000)
    t.join()
    # THEN the own-node record does not end the wait: the next foreign one does
    body = results["body"]
    assert [r["data"] for r in body["records"]] == ["theirs"]
    assert body["next_from_seq"] == 3 and body["caught_up"] is True
