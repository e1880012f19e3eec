"""Reads of large records (issue 5): a diff fetches about one response's worth of bytes
from S3 (spilled tail frames and sealed blocks alike), not a record count's worth, so a
reader with a small frame cache fetches each record once."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import random
from collections.abc import Iterator
from typing import Any

import pytest
from api_helpers import MakeClient, append, diff, read_all
from test_tiering import EAGER, services

from headwater.engine.ports import SEGMENT_PREFIX
from headwater.settings import Settings
from headwater.storage.clients import AwsClients

pytestmark = pytest.mark.api


RECORD_CHARS = 400_000  # > the 64 KiB spill threshold: each frame is its own S3 object


def big_records(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        {"data": {"i": i, "blob": base64.b64encode(rng.randbytes(RECORD_CHARS * 3 // 4)).decode()}}
        for i in range(n)
    ]


@pytest.fixture
def s3_gets(aws: AwsClients) -> Iterator[list[int]]:
    """The byte count of every S3 GetObject made while the test runs."""
    seen: list[int] = []

    def count(parsed: dict[str, Any], **_: Any) -> None:
        seen.append(int(parsed.get("ContentLength", 0)))

    aws.s3.meta.events.register("after-call.s3.GetObject", count)
    try:
        yield seen
    finally:
        aws.s3.meta.events.unregister("after-call.s3.GetObject", count)


def test_large_tail_records_are_fetched_once_and_a_response_at_a_time(
    make_client: MakeClient, s3_gets: list[int]
) -> None:
    writer = make_client()
    for rec in big_records(12, seed=1):
        append(writer, "big", [rec])
    # A reader whose frame cache holds ~5 of these frames: fetching 8 frames per response
    # (a record-count read-ahead) would evict them before they are read.
    reader = make_client(frame_cache_bytes=2 << 20)
    s3_gets.clear()
    per_response = []
    got: list[int] = []
    cursor = 0
    while cursor < 12:
        before = len(s3_gets)
        d = diff(reader, "big", from_seq=cursor, limit=1000)
        per_response.append(len(s3_gets) - before)
        got += [r["data"]["i"] for r in d["records"]]
        cursor = d["next_from_seq"]
    assert got == list(range(12))
    assert max(per_response) <= 3, per_response  # 1 MiB budget: 3 frames of 400 KB at most
    assert len(s3_gets) == 12, s3_gets  # each spilled frame fetched once


def test_large_sealed_records_are_fetched_about_once(
    make_client: MakeClient, s3_gets: list[int], aws: AwsClients, settings: Settings
) -> None:
    writer = make_client(tiering=dataclasses.replace(EAGER, block_bytes=64 * 1024))
    for rec in big_records(12, seed=2):
        append(writer, "bigs", [rec])
    assert services(writer).upkeep.run("bigs").sealed >= 1
    reader = make_client(frame_cache_bytes=2 << 20)
    s3_gets.clear()
    assert [r["data"]["i"] for r in read_all(reader, "bigs")] == list(range(12))
    # Every record is one block of ~300 KB stored (base64 of random bytes): each is fetched
    # once. A 1 MiB read-ahead past the byte budget would fetch about twice the log.
    listing = aws.s3.list_objects_v2(Bucket=settings.bucket_name, Prefix=SEGMENT_PREFIX)
    stored = sum(o["Size"] for o in listing["Contents"])
    assert 0.9 * stored <= sum(s3_gets) <= stored, (stored, s3_gets)


def test_reading_chosen_seqs_fetches_only_their_blocks_and_skips_deleted_ones(
    make_client: MakeClient, s3_gets: list[int]
) -> None:
    """engine.read_seqs (the index candidates' read): exactly the live records at the asked
    seqs, across sealed segments and the tail, deleted and trimmed ones left out, and only
    the blocks holding them fetched."""
    c = make_client(tiering=EAGER, frame_cache_bytes=1)  # nothing stays cached
    svc = services(c)
    for i in range(0, 60, 5):
        append(c, "pick", [{"data": {"i": j, "pad": "x" * 40}} for j in range(i, i + 5)])
        svc.upkeep.run("pick")
    append(c, "pick", [{"data": {"i": j}} for j in range(60, 64)])  # stays in the tail
    asyncio.run(svc.engine.delete_seqs("pick", [7, 33]))
    head = svc.engine.heads.get("pick")
    assert head is not None and 40 <= head.sealed_through < head.head_seq == 64
    rng = random.Random(3)
    live = {r["$seq"]: r["data"]["i"] for r in read_all(c, "pick")}
    for _ in range(20):
        want = sorted([*rng.sample(range(0, 70), rng.randrange(1, 12)), 7])
        got = asyncio.run(svc.engine.read_seqs(head, want))
        assert [r.seq for r in got] == [q for q in want if q in live]
        assert [json.loads(r.data_raw)["i"] for r in got] == [live[r.seq] for r in got]
    # one sealed seq: one small ranged GET, not its segment
    s3_gets.clear()
    assert [r.seq for r in asyncio.run(svc.engine.read_seqs(head, [12]))] == [12]
    sealed_bytes = sum(s3_gets)
    s3_gets.clear()
    asyncio.run(svc.engine.read_seqs(head, list(range(1, head.sealed_through + 1))))
    assert len(s3_gets) >= 1 and sealed_bytes * 4 < sum(s3_gets)
    # trimmed below the floor: gone
    asyncio.run(svc.engine.delete_seqs("pick", [1, 2, 3]))
    head = svc.engine.heads.get("pick")
    assert [r.seq for r in asyncio.run(svc.engine.read_seqs(head, [1, 2, 3, 4]))] == [4]
