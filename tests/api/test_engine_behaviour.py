"""Engine behaviour against moto that the HTTP tests cannot observe directly: group commit
sharing one transaction, and record deletes that span more frames than one transaction."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import pytest
from api_helpers import counting_engine

from headwater.engine.records import NewRecord
from headwater.engine.values import AppendRequest, DiffRequest, TagMatch
from headwater.settings import Settings

pytestmark = pytest.mark.api


def _rec(i: int, tag: str | None = None) -> NewRecord:
    return NewRecord({"i": i}, tag=tag, size=24)


def test_concurrent_appends_in_one_process_share_transactions(
    moto: None, resource_prefix: str
) -> None:
    # GIVEN an engine and a topic that exists
    calls: Counter[str] = Counter()
    engine = counting_engine(Settings(resource_prefix=resource_prefix), calls)

    async def scenario() -> list[int]:
        await engine.append("gc", AppendRequest([_rec(-1)]))
        calls.clear()
        # WHEN 64 single-record appends arrive at once
        results = await asyncio.gather(
            *(engine.append("gc", AppendRequest([_rec(i)])) for i in range(64))
        )
        return [r.first_seq for r in results]

    seqs = asyncio.run(scenario())
    engine.close()
    # THEN every append got its own seq, in arrival order, and they shared commits
    assert seqs == list(range(2, 66))
    assert calls["TransactWriteItems"] < 64 // 4, calls


def test_tag_delete_spanning_more_frames_than_one_transaction(
    moto: None, resource_prefix: str
) -> None:
    # GIVEN 150 frames, each with one record tagged "drop" and one tagged "keep"
    calls: Counter[str] = Counter()
    engine = counting_engine(Settings(resource_prefix=resource_prefix), calls)

    async def scenario() -> tuple[int, list[dict[str, Any]], int, int]:
        for i in range(150):
            await engine.append(
                "big", AppendRequest([_rec(2 * i, "drop"), _rec(2 * i + 1, "keep")])
            )
        # WHEN every "drop" record is deleted (150 frames > 99 per transaction)
        result = await engine.delete_records("big", None, TagMatch("drop", prefix=False))
        diff = await engine.diff("big", DiffRequest(limit=1000, include_tags=True))
        head = await engine.get_topic("big", touch=False)
        return result.deleted, [json.loads(r) for r in diff.records], head.count, head.earliest_seq

    deleted, records, count, earliest = asyncio.run(scenario())
    engine.close()
    # THEN exactly those records are gone, counters agree, and the floor moved past seq 1
    assert deleted == 150
    assert [r["$tag"] for r in records] == ["keep"] * 150
    assert [r["$seq"] for r in records] == list(range(2, 301, 2))
    assert count == 150
    assert earliest == 2
    assert calls["TransactWriteItems"] >= 150 + 2  # appends + at least two delete chunks
