"""Tiering (issue 5): the tail sealed into S3 segments, reads across the boundary, deletes
of sealed records, trimming after the grace period, and concurrent upkeep."""

from __future__ import annotations

from typing import Any

import pytest
from api_helpers import MakeClient, append, diff, path, read_all
from starlette.testclient import TestClient

from headwater.engine.ports import SEGMENT_PREFIX
from headwater.engine.segment import decode_segment
from headwater.engine.values import DiffRequest
from headwater.services import Services
from headwater.settings import Settings, Tiering
from headwater.storage.clients import AwsClients

pytestmark = pytest.mark.api

# Seal anything unsealed at every upkeep run, in small blocks; no timer, no inline trigger.
EAGER = Tiering(
    seal_records=10, seal_age_ms=0, grace_ms=0, block_bytes=256, interval_ms=0, inline=False
)


def services(client: TestClient) -> Services:
    svc: Services = client.app.state.services.get()  # type: ignore[attr-defined]
    return svc


def fill(client: TestClient, topic: str, n: int, per_frame: int, start: int = 0) -> None:
    for first in range(start, start + n, per_frame):
        append(
            client,
            topic,
            [
                {
                    "data": {"i": i, "pad": "x" * (i % 5)},
                    "tag": f"g{i % 3}",
                    "node": "n1" if i % 4 == 0 else None,
                    "meta": {"m": i} if i % 2 else None,
                }
                for i in range(first, min(first + per_frame, start + n))
            ],
        )


def segment_keys(aws: AwsClients, settings: Settings) -> list[str]:
    resp = aws.s3.list_objects_v2(Bucket=settings.bucket_name, Prefix=SEGMENT_PREFIX)
    return sorted(o["Key"] for o in resp.get("Contents", []))


def frame_items(
    aws: AwsClients, settings: Settings, topic: str, epoch: int
) -> list[dict[str, Any]]:
    """Every frame item of the incarnation, over all its partition keys (docs/storage.md
    "The sequencer")."""
    items: list[dict[str, Any]] = []
    for p in range(settings.log_partitions):
        pk = f"{topic}#{epoch}" if p == 0 else f"{topic}#{epoch}~{p}"
        resp = aws.dynamodb.query(
            TableName=settings.table_name("log"),
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": pk}},
            ConsistentRead=True,
        )
        items.extend(resp["Items"])
    return sorted(items, key=lambda it: int(it["sk"]["N"]))


def tail_frames(aws: AwsClients, settings: Settings, topic: str, epoch: int = 1) -> list[int]:
    return [int(it["sk"]["N"]) for it in frame_items(aws, settings, topic, epoch)]


def frames_not_left_to_ttl(
    aws: AwsClients, settings: Settings, topic: str, epoch: int = 1
) -> list[int]:
    """Frame items that no DynamoDB TTL will reclaim. A sealed log's frames are never
    deleted one by one: each carries the tail TTL (HEADWATER_TAIL_TTL_MS), trimming only
    moves trimmed_through (docs/storage.md "The sequencer")."""
    items = frame_items(aws, settings, topic, epoch)
    return [int(it["sk"]["N"]) for it in items if "ttl" not in it]


def every_diff(client: TestClient, topic: str, upto: int, **body: Any) -> list[dict[str, Any]]:
    return [
        {
            k: v
            for k, v in diff(client, topic, from_seq=c, limit=7, **body).items()
            if k != "performance"
        }
        for c in range(upto + 1)
    ]


def test_sealed_history_reads_exactly_like_the_tail(
    make_client: MakeClient, aws: AwsClients, settings: Settings
) -> None:
    # GIVEN 56 records in frames of 7, with tags, nodes and meta, read from every cursor
    c = make_client(tiering=EAGER)
    fill(c, "t", 56, 7)
    before = every_diff(c, "t", 56, include_tags=True)
    before_filtered = every_diff(c, "t", 56, node="n1")
    # WHEN upkeep seals and (grace 0) trims the tail
    report = services(c).upkeep.run("t")
    assert report.sealed >= 1 and report.trimmed_through == 56
    head = services(c).engine.heads.get("t")
    assert head is not None and head.sealed_through == 56 and head.trimmed_through == 56
    assert len(tail_frames(aws, settings, "t")) == 8  # left to their TTL...
    assert frames_not_left_to_ttl(aws, settings, "t") == []  # ...every one of them
    keys = segment_keys(aws, settings)
    assert keys
    blob = aws.s3.get_object(Bucket=settings.bucket_name, Key=keys[0])["Body"].read()
    info, records = decode_segment(blob)
    assert (info.topic, info.epoch, info.first_seq) == ("t", 1, 1)
    assert [r.seq for r in records][:3] == [1, 2, 3]
    # THEN a server with a cold cache answers every diff exactly as before
    fresh = make_client(tiering=EAGER)
    assert every_diff(fresh, "t", 56, include_tags=True) == before
    assert every_diff(fresh, "t", 56, node="n1") == before_filtered
    # AND appends after the seal continue the log across the boundary
    fill(c, "t", 5, 5, start=56)
    assert [r["data"]["i"] for r in read_all(fresh, "t")] == list(range(61))


def test_a_read_of_sealed_history_costs_a_request_per_run_of_blocks(
    make_client: MakeClient,
) -> None:
    c = make_client(tiering=EAGER)
    for _ in range(4):
        fill(c, "big", 500, 100)
        services(c).upkeep.run("big")
    reader = make_client(tiering=EAGER)
    sealed = services(reader).engine.sealed
    assert sealed is not None
    # One small read from the middle: one ranged GET.
    d = diff(reader, "big", from_seq=1234, limit=10)
    assert [r["$seq"] for r in d["records"]] == list(range(1235, 1245))
    assert sealed.range_gets == 1
    # The whole log: O(N / block size) requests, not one per record or block.
    blocks = 0
    head = services(reader).engine.heads.get("big")
    assert head is not None and head.sealed_through == 2000
    after = 0
    while True:
        found = sealed.segment_after(head, after)
        if found is None:
            break
        blocks += len(found[1].blocks)
        after = found[0].last_seq
    sealed.range_gets = 0
    assert len(read_all(reader, "big")) == 2000
    assert 0 < sealed.range_gets < blocks / 4, (sealed.range_gets, blocks)


def test_deletes_of_sealed_records_stay_deleted_after_the_tail_is_trimmed(
    make_client: MakeClient, aws: AwsClients, settings: Settings
) -> None:
    c = make_client(tiering=EAGER)
    fill(c, "d", 40, 8)
    # A delete before sealing is carried into the segment's item...
    assert c.post(path("d", "/delete"), json={"match": "g0"}).json()["deleted"] == 14
    services(c).upkeep.run("d")
    assert frames_not_left_to_ttl(aws, settings, "d") == []
    # ...and one after sealing is recorded on it.
    assert (
        c.post(path("d", "/delete"), json={"match": ["tag", "Glob", "g1*"]}).json()["deleted"] == 13
    )
    state = c.get(path("d")).json()
    assert state["count"] == 13
    fresh = make_client(tiering=EAGER)
    assert [r["data"]["i"] for r in read_all(fresh, "d")] == [i for i in range(40) if i % 3 == 2]
    # A prefix delete across sealed history counts from the segments and moves the floor.
    out = fresh.post(path("d", "/delete"), json={"before_seq": 21}).json()
    assert out["deleted"] == len([i for i in range(20) if i % 3 == 2])
    assert out["earliest_seq"] == 21  # seq 21 holds i = 20, tagged g2: live
    assert next(r["$seq"] for r in read_all(fresh, "d")) == out["earliest_seq"]


def test_frames_stay_through_the_grace_period_and_stale_heads_reread(
    make_client: MakeClient, aws: AwsClients, settings: Settings
) -> None:
    import dataclasses

    c = make_client(tiering=dataclasses.replace(EAGER, grace_ms=3_600_000))
    fill(c, "g", 30, 10)
    engine = services(c).engine
    old = engine.heads.get("g")
    assert old is not None
    services(c).upkeep.run("g")
    head = engine.heads.get("g")
    assert head is not None and head.sealed_through == 30 and head.trimmed_through == 0
    # In-flight readers holding the pre-seal head still find every frame in the tail.
    assert len(tail_frames(aws, settings, "g")) == 3
    res = engine.reader.diff_sync("g", DiffRequest(from_seq=0, limit=100), old)
    assert len(res.records) == 30
    # After trimming (the frames are left to their TTL) and once DynamoDB's TTL has
    # deleted them (done here by hand), a reader with that stale head re-reads the head and
    # the segments.
    quick = make_client(tiering=EAGER)
    services(quick).upkeep.run("g")
    assert engine.heads.get("g").trimmed_through == 30  # type: ignore[union-attr]
    assert frames_not_left_to_ttl(aws, settings, "g") == []
    for sk in tail_frames(aws, settings, "g"):
        aws.dynamodb.delete_item(
            TableName=settings.table_name("log"),
            Key={"pk": {"S": old.frame_pk(sk)}, "sk": {"N": str(sk)}},
        )
    engine.cache.drop_topic(old.log_key)
    res = engine.reader.diff_sync("g", DiffRequest(from_seq=0, limit=100), old)
    assert len(res.records) == 30 and res.head.sealed_through == 30


def test_a_seal_that_loses_the_race_leaves_nothing_behind(
    make_client: MakeClient, aws: AwsClients, settings: Settings
) -> None:
    # In-process moto must stay single-threaded: the race is played out step by step (the
    # multi-process test in tests/e2e/test_tiering_stress.py runs it for real).
    a, b = make_client(tiering=EAGER), make_client(tiering=EAGER)
    fill(a, "c", 30, 10)
    head = services(a).engine.heads.get("c")
    assert head is not None
    now = services(a).engine.clock()
    won = services(a).upkeep._seal(head, now)
    lost = services(b).upkeep._seal(head, now)  # read the same head: its commit must fail
    assert won is not None and won.sealed_through == 30
    assert lost is None
    keys = segment_keys(aws, settings)
    assert len(keys) == 1
    seqs = [
        r.seq
        for r in decode_segment(
            aws.s3.get_object(Bucket=settings.bucket_name, Key=keys[0])["Body"].read()
        )[1]
    ]
    assert seqs == list(range(1, 31))
    # A delete between a seal's read and its commit also makes the seal retry.
    fill(a, "c", 10, 10, start=30)
    head = services(a).engine.heads.get("c")
    assert head is not None
    assert a.post(path("c", "/delete"), json={"match": "g0"}).json()["deleted"] > 0
    assert services(b).upkeep._seal(head, now) is None
    assert services(b).upkeep.run("c").sealed == 1
    assert [r["data"]["i"] for r in read_all(b, "c")] == [i for i in range(40) if i % 3]


def test_frames_below_a_floor_nothing_will_seal_past_are_collected_once(
    make_client: MakeClient, aws: AwsClients, settings: Settings
) -> None:
    # GIVEN a sealed log whose every record is then deleted by a prefix delete before the
    # sealer ran: nothing is left to seal, so trimming would never move past the frames
    c = make_client(tiering=EAGER)
    fill(c, "gone", 20, 5)
    out = c.post(path("gone", "/delete"), json={"before_seq": 21}).json()
    assert out["earliest_seq"] == 21
    svc = services(c)
    scans: list[tuple[int, int]] = []
    real = svc.engine.tail.frame_summaries

    def counted(head: Any, after: int, upto: int, limit: int, **kw: Any) -> Any:
        scans.append((after, upto))
        return real(head, after, upto, limit, **kw)

    svc.engine.tail.frame_summaries = counted  # type: ignore[method-assign]
    # WHEN upkeep runs twice
    svc.upkeep.run("gone")
    first = list(scans)
    svc.upkeep.run("gone")
    # THEN the first run found the dead frames and marked them trimmed (left to their TTL,
    # not deleted one by one), and the second run did not look for them again
    assert first and first[0] == (0, 20)
    assert scans == first
    head = svc.engine.heads.get("gone")
    assert head is not None and head.trimmed_through == 20
    assert frames_not_left_to_ttl(aws, settings, "gone") == []
    assert sorted(tail_frames(aws, settings, "gone")) == [1, 6, 11, 16]
    assert read_all(c, "gone") == []
