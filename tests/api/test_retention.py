"""Retention (spec §0.10, §3.3, §4.4): caps and TTL evict lazily and unit by unit, every
involuntary loss under a cursor is a tombstone (cap / ttl / mixed / recreated), deletes are
silent, and the durability classes map onto the tiering."""

from __future__ import annotations

import dataclasses
import time

import pytest
from api_helpers import MakeClient, append_data, diff, path, put_topic, read_all, seqs_of, state
from starlette.testclient import TestClient
from test_tiering import (
    EAGER,
    frame_items,
    frames_not_left_to_ttl,
    segment_keys,
    services,
    tail_frames,
)

from headwater.settings import Settings
from headwater.storage.clients import AwsClients

pytestmark = pytest.mark.api


def one_by_one(client: TestClient, topic: str, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        append_data(client, topic, {"i": i})


def test_cap_records_evicts_whole_units_and_tombstones_the_gap(make_client: MakeClient) -> None:
    c = make_client(tiering=EAGER)
    put_topic(c, "capped", {"cap_records": 10})
    one_by_one(c, "capped", 25)
    # Lazy: until upkeep runs, nothing is evicted.
    assert state(c, "capped")["count"] == 25
    services(c).upkeep.run("capped")
    s = state(c, "capped")
    assert (s["count"], s["earliest_seq"], s["head_seq"]) == (10, 16, 25)
    # A cursor below the floor: a tombstone, then the records from earliest_seq.
    body = diff(c, "capped", from_seq=3)
    assert body["tombstone"] == {
        "gap_from": 4,
        "gap_to": 15,
        "reason": "cap",
        "missed_estimate": 12,
        "earliest_seq": 16,
        "head_seq": 25,
    }
    assert seqs_of(body) == list(range(16, 26))
    assert body["earliest_seq"] == 16
    # At the floor: nothing was missed.
    assert diff(c, "capped", from_seq=15)["tombstone"] is None
    # from_seq 0 fell below the involuntary floor too (spec: from_seq + 1 < evict_floor).
    assert diff(c, "capped", from_seq=0)["tombstone"]["gap_from"] == 1


def test_cap_never_cuts_a_unit_so_a_topic_may_exceed_it(make_client: MakeClient) -> None:
    c = make_client(tiering=EAGER)
    put_topic(c, "wide", {"cap_records": 10})
    append_data(c, "wide", *range(20))  # one frame of 20 records
    services(c).upkeep.run("wide")
    assert state(c, "wide")["count"] == 20  # dropping the frame would leave 0 < cap
    append_data(c, "wide", *range(20, 35))  # a second frame of 15
    services(c).upkeep.run("wide")
    s = state(c, "wide")
    assert (s["count"], s["earliest_seq"]) == (15, 21)


def test_cap_bytes_and_discard_reject(make_client: MakeClient) -> None:
    c = make_client(tiering=EAGER)
    put_topic(c, "bytes", {"cap_bytes": 300})
    one_by_one(c, "bytes", 20)
    services(c).upkeep.run("bytes")
    s = state(c, "bytes")
    assert 300 <= s["bytes"] < 300 + 40 and s["earliest_seq"] > 1
    assert diff(c, "bytes", from_seq=0)["tombstone"]["reason"] == "cap"
    # discard: reject refuses instead, and never evicts.
    put_topic(c, "strict", {"cap_records": 3, "discard": "reject"})
    one_by_one(c, "strict", 3)
    assert c.post(path("strict"), json={"records": [{"data": 1}]}).status_code == 422
    services(c).upkeep.run("strict")
    assert state(c, "strict")["earliest_seq"] == 1


def test_sealed_segments_are_evicted_whole_and_their_objects_removed(
    make_client: MakeClient, aws: AwsClients, settings: Settings
) -> None:
    c = make_client(tiering=EAGER)
    put_topic(c, "seg", {"cap_records": 25})
    for k in range(4):  # four segments of 10
        append_data(c, "seg", *range(k * 10, k * 10 + 10))
        services(c).upkeep.run("seg")
    # At 40 records the first segment went (30 left >= 25); the second had to stay.
    assert len(segment_keys(aws, settings)) == 3
    assert state(c, "seg")["earliest_seq"] == 11
    append_data(c, "seg", *range(40, 50))
    services(c).upkeep.run("seg")
    s = state(c, "seg")
    assert (s["earliest_seq"], s["count"]) == (21, 30)
    assert len(segment_keys(aws, settings)) == 3  # one more dropped, one more sealed
    body = diff(c, "seg", from_seq=0, limit=100)
    assert body["tombstone"]["reason"] == "cap" and body["tombstone"]["gap_to"] == 20
    assert [r["data"] for r in body["records"]] == list(range(20, 50))


def test_ttl_is_a_read_time_filter_with_a_tombstone_then_lazy_reclamation(
    make_client: MakeClient, aws: AwsClients, settings: Settings
) -> None:
    c = make_client(tiering=dataclasses.replace(EAGER, seal_records=1000, seal_age_ms=3_600_000))
    # the records appended after the sleep must outlive the asserts that follow, on a loaded
    # machine too (one CI run took more than 400 ms for them)
    put_topic(c, "ttl", {"ttl_ms": 1500})
    one_by_one(c, "ttl", 5)
    time.sleep(1.6)
    one_by_one(c, "ttl", 3, start=5)
    # Expired records are skipped at read time, and the cursor crossing them is told.
    body = diff(c, "ttl", from_seq=2)
    assert body["tombstone"]["reason"] == "ttl"
    assert (body["tombstone"]["gap_from"], body["tombstone"]["gap_to"]) == (3, 5)
    assert body["tombstone"]["missed_estimate"] == 3
    assert body["earliest_seq"] == 6 and seqs_of(body) == [6, 7, 8]
    assert diff(c, "ttl", from_seq=5)["tombstone"] is None
    # Upkeep moves the floor past the expired frames (reason kept); a sealed log's frames
    # are then reclaimed by their DynamoDB TTL, never deleted one by one.
    assert len(tail_frames(aws, settings, "ttl")) == 8
    services(c).upkeep.run("ttl")
    assert len(tail_frames(aws, settings, "ttl")) == 8
    assert frames_not_left_to_ttl(aws, settings, "ttl") == []
    s = state(c, "ttl")
    assert (s["count"], s["earliest_seq"]) == (3, 6)
    assert diff(c, "ttl", from_seq=1)["tombstone"]["reason"] == "ttl"


def test_a_gap_lost_to_cap_and_then_ttl_is_mixed(make_client: MakeClient) -> None:
    c = make_client(tiering=dataclasses.replace(EAGER, seal_records=1000, seal_age_ms=3_600_000))
    put_topic(c, "mix", {"cap_records": 6})
    one_by_one(c, "mix", 10)
    services(c).upkeep.run("mix")  # evicts 1..4 for the cap
    assert state(c, "mix")["earliest_seq"] == 5
    c.put(path("mix"), json={"ttl_ms": 1000, "cap_records": 0})
    time.sleep(1.1)
    one_by_one(c, "mix", 2, start=10)
    body = diff(c, "mix", from_seq=1)
    assert body["tombstone"]["reason"] == "mixed"
    assert (body["tombstone"]["gap_from"], body["tombstone"]["gap_to"]) == (2, 10)
    assert seqs_of(body) == [11, 12]
    services(c).upkeep.run("mix")  # reclaims 5..10 for the TTL: the runs keep both reasons
    assert diff(c, "mix", from_seq=1)["tombstone"]["reason"] == "mixed"
    assert diff(c, "mix", from_seq=6)["tombstone"]["reason"] == "ttl"
    assert diff(c, "mix", from_seq=2)["tombstone"]["reason"] == "mixed"


def test_a_cursor_from_before_delete_and_recreate_gets_a_recreated_tombstone(
    client: TestClient,
) -> None:
    append_data(client, "again", *range(10))
    assert client.delete(path("again")).json()["deleted"] is True
    append_data(client, "again", "a", "b", "c")
    body = diff(client, "again", from_seq=8)
    assert body["tombstone"] == {
        "gap_from": 9,
        "gap_to": 10,
        "reason": "recreated",
        "missed_estimate": 2,
        "earliest_seq": 1,
        "head_seq": 3,
    }
    assert [r["data"] for r in body["records"]] == ["a", "b", "c"]
    assert body["next_from_seq"] == 3
    # Once the new incarnation is past the old cursor, diff cannot tell (no epoch in a
    # cursor); a watch session can (it reports topic-deleted).
    append_data(client, "again", *range(10))
    assert diff(client, "again", from_seq=8)["tombstone"] is None


def test_deleted_gaps_are_silent(client: TestClient) -> None:
    append_data(client, "del", *range(10))
    client.post(path("del", "/delete"), json={"before_seq": 6})
    body = diff(client, "del", from_seq=0)
    assert body["tombstone"] is None and seqs_of(body) == [6, 7, 8, 9, 10]


def test_ephemeral_and_memory_stay_in_the_tail_with_a_bounded_life(
    make_client: MakeClient, aws: AwsClients, settings: Settings
) -> None:
    # The window is long enough that a loaded machine still reads the frames inside it
    # (300 ms was not: the background sealer reclaimed them before the query below).
    retention_s = 2.0
    tiering = dataclasses.replace(
        EAGER, ephemeral_retention_ms=int(retention_s * 1000), memory_retention_ms=3_600_000
    )
    c = make_client(tiering=tiering)
    put_topic(c, "eph", {"durability": "ephemeral"})
    put_topic(c, "mem", {"durability": "memory"})
    put_topic(c, "dsk", {"durability": "disk"})
    written: dict[str, float] = {}
    for topic in ("eph", "mem", "dsk"):
        append_data(c, topic, *range(30))
        written[topic] = time.monotonic()  # after the append was acknowledged
        services(c).upkeep.run(topic)
    # Only the durable classes are sealed into S3.
    head = services(c).engine.heads
    assert [head.get(t).sealed_through for t in ("eph", "mem", "dsk")] == [0, 0, 30]  # type: ignore[union-attr]
    # Lossy-class frames carry a DynamoDB TTL (the backstop; upkeep reclaims them first).
    item = frame_items(aws, settings, "eph", 1)[0]
    assert int(item["ttl"]["N"]) > time.time()
    plain = frame_items(aws, settings, "mem", 1)[0]
    assert "ttl" in plain
    # An ephemeral record outlives its window only as a tombstone.
    time.sleep(max(0.0, retention_s + 0.1 - (time.monotonic() - written["eph"])))
    append_data(c, "eph", "fresh")
    body = diff(c, "eph", from_seq=0)
    assert body["tombstone"]["reason"] == "ttl" and [r["data"] for r in body["records"]] == [
        "fresh"
    ]
    services(c).upkeep.run("eph")
    assert state(c, "eph")["count"] == 1
    assert len(read_all(c, "mem")) == 30
