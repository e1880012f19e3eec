"""Retention rules (engine/retention.py, the eviction of engine/tiering.py's Upkeep) on the
in-memory fakes, driven by an injected clock: max age (ttl_ms and the durability classes'
windows), max count and max bytes with discard "old" (lazy, whole frames or segments off the
front) and discard "reject" (the append is refused). Readers see expiry at once; upkeep
moves the floor and says why in the tombstone."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from headwater.engine.records import NewRecord
from headwater.engine.values import AppendRequest, DiffRequest, DiffResult, Tombstone
from headwater.errors import TopicFull
from headwater.settings import Settings, Tiering
from tests.fakes.processes import T0, ManualClock, Process, processes

pytestmark = pytest.mark.unit

TOPIC = "metrics"


def batch(n: int, start: int = 0) -> AppendRequest:
    return AppendRequest(records=[NewRecord(data={"i": start + k}, size=10) for k in range(n)])


async def diff(p: Process, from_seq: int = 0) -> DiffResult:
    return await p.engine.diff(TOPIC, DiffRequest(from_seq=from_seq))


def seqs_of(result: DiffResult) -> list[int]:
    return [json.loads(r)["$seq"] for r in result.records]


async def head_fields(p: Process, *names: str) -> tuple[Any, ...]:
    head = await p.engine.head_of(TOPIC)
    assert head is not None
    return tuple(getattr(head, n) for n in names)


# --- max age --------------------------------------------------------------------------------


def test_records_past_the_ttl_vanish_for_readers_and_upkeep_evicts_them() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        async with processes(1, clock) as (p,):
            # GIVEN a topic keeping records 1000 ms: seqs 1-3 written at T0, 4-5 at T0+600
            await p.engine.put_topic(TOPIC, {"ttl_ms": 1000})
            await p.engine.append(TOPIC, batch(3))
            clock.advance(600)
            await p.engine.append(TOPIC, batch(2, start=3))
            # WHEN the clock passes T0+1000 (seqs 1-3 expire; 4-5 are 900 ms old)
            clock.advance(900)
            # THEN a reader from the start skips them at once, told why, before any upkeep
            got = await diff(p)
            assert seqs_of(got) == [4, 5]
            assert got.tombstone == Tombstone(1, 3, "ttl", 3, 4, 5)
            # WHEN upkeep runs THEN it evicts the expired frame and records the reason
            await p.run_upkeep(TOPIC)
            assert await head_fields(p, "earliest_seq", "evict_floor", "count", "bytes") == (
                4,
                4,
                2,
                20,
            )
            assert await head_fields(p, "evictions") == (((3, "ttl"),),)
            assert [r.seq for r in await p.history(TOPIC)] == [4, 5]
            # WHEN the rest expires too THEN a caught-up reader is told, and upkeep empties it
            clock.advance(200)
            later = await diff(p, from_seq=3)
            assert seqs_of(later) == [] and later.tombstone is not None
            assert later.tombstone.reason == "ttl"
            await p.run_upkeep(TOPIC)
            assert await head_fields(p, "earliest_seq", "count", "head_seq") == (6, 0, 5)
            # AND what is appended now is kept
            await p.engine.append(TOPIC, batch(1, start=5))
            assert seqs_of(await diff(p, from_seq=5)) == [6]

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("durability", "window_ms"), [("ephemeral", 300_000), ("memory", 86_400_000)]
)
def test_a_lossy_durability_class_keeps_records_for_its_window(
    durability: str, window_ms: int
) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        async with processes(1, clock) as (p,):
            # GIVEN a topic of a lossy class (no ttl_ms of its own) holding one record
            await p.engine.put_topic(TOPIC, {"durability": durability})
            await p.engine.append(TOPIC, batch(1))
            # WHEN its class window has just not passed THEN the record is still there
            clock.advance(window_ms)
            assert seqs_of(await diff(p)) == [1]
            # WHEN it passes THEN it expires, and upkeep evicts it
            clock.advance(1)
            assert seqs_of(await diff(p)) == []
            await p.run_upkeep(TOPIC)
            assert await head_fields(p, "count", "earliest_seq") == (0, 2)

    asyncio.run(scenario())


def test_expiry_evicts_sealed_segments_too() -> None:
    settings = Settings(tiering=Tiering(inline=False, interval_ms=0, seal_records=4, grace_ms=0))

    async def scenario() -> None:
        clock = ManualClock()
        async with processes(1, clock, settings=settings) as (p,):
            # GIVEN seqs 1-4 written at T0 and sealed into a segment (their tail frames
            # trimmed), and seqs 5-6 written at T0+600, in the tail
            await p.engine.put_topic(TOPIC, {"ttl_ms": 1000})
            await p.engine.append(TOPIC, batch(2))
            await p.engine.append(TOPIC, batch(2, start=2))
            await p.run_upkeep(TOPIC)
            assert await head_fields(p, "sealed_through", "trimmed_through") == (4, 4)
            clock.advance(600)
            await p.engine.append(TOPIC, batch(2, start=4))
            # THEN the history reads across the segment and the tail
            assert [r.data for r in await p.history(TOPIC)] == [{"i": i} for i in range(6)]
            # WHEN the segment's records expire and upkeep runs
            clock.advance(900)
            assert seqs_of(await diff(p)) == [5, 6]
            await p.run_upkeep(TOPIC)
            # THEN the whole segment is evicted, its item and its objects removed
            assert await head_fields(p, "earliest_seq", "count") == (5, 2)
            assert await head_fields(p, "evictions") == (((4, "ttl"),),)
            assert p.stores.blobs.list_keys("segments/") == []
            assert [r.seq for r in await p.history(TOPIC)] == [5, 6]

    asyncio.run(scenario())


# --- max count and max bytes ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "kept"),
    [({"cap_records": 5}, (6, 60)), ({"cap_bytes": 50}, (6, 60))],
    ids=["cap_records", "cap_bytes"],
)
def test_a_capped_topic_drops_whole_frames_off_the_front(
    config: dict[str, int], kept: tuple[int, int]
) -> None:
    async def scenario() -> None:
        async with processes(1, ManualClock()) as (p,):
            # GIVEN a topic capped at 5 records (or 50 bytes) that discards old records,
            # holding three frames of three 10-byte records
            await p.engine.put_topic(TOPIC, {**config, "discard": "old"})
            for k in range(3):
                appended = await p.engine.append(TOPIC, batch(3, start=3 * k))
                assert not appended.deduped  # never refused for being over the cap
            assert await head_fields(p, "count") == (9,)
            # WHEN upkeep runs
            await p.run_upkeep(TOPIC)
            # THEN whole frames go from the front while the rest still meets the cap: the
            # topic may stay over it by less than one frame
            assert await head_fields(p, "count", "bytes") == kept
            assert await head_fields(p, "earliest_seq", "evictions") == (4, ((3, "cap"),))
            # AND a reader from the start is told the gap was the cap's
            got = await diff(p)
            assert seqs_of(got) == list(range(4, 10))
            assert got.tombstone == Tombstone(1, 3, "cap", 3, 4, 9)

    asyncio.run(scenario())


def test_a_topic_that_rejects_over_its_cap_refuses_only_what_does_not_fit() -> None:
    async def scenario() -> None:
        async with processes(1, ManualClock()) as (p,):
            # GIVEN a topic that holds at most 5 records and rejects appends past that
            await p.engine.put_topic(TOPIC, {"cap_records": 5, "discard": "reject"})
            # WHEN three appends of 3, 3 and 2 records arrive together (one group commit)
            first, second, third = await asyncio.gather(
                p.engine.append(TOPIC, batch(3)),
                p.engine.append(TOPIC, batch(3, start=3)),
                p.engine.append(TOPIC, batch(2, start=6)),
                return_exceptions=True,
            )
            # THEN they are admitted in order while they fit: the second is refused, the
            # third still fits after the first
            assert isinstance(second, TopicFull) and second.status == 422
            assert not isinstance(first, BaseException) and not isinstance(third, BaseException)
            assert (first.first_seq, first.last_seq) == (1, 3)
            assert (third.first_seq, third.last_seq) == (4, 5)
            # AND once full, any further append is refused and nothing is evicted
            with pytest.raises(TopicFull):
                await p.engine.append(TOPIC, batch(1, start=8))
            await p.run_upkeep(TOPIC)
            assert await head_fields(p, "count", "earliest_seq", "head_seq") == (5, 1, 5)
            assert [r.data for r in await p.history(TOPIC)] == [
                {"i": 0},
                {"i": 1},
                {"i": 2},
                {"i": 6},
                {"i": 7},
            ]

    asyncio.run(scenario())


def test_upkeep_of_a_topic_not_over_any_rule_changes_nothing() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        async with processes(1, clock) as (p,):
            # GIVEN a topic under its cap and inside its TTL
            await p.engine.put_topic(TOPIC, {"cap_records": 10, "ttl_ms": 60_000})
            await p.engine.append(TOPIC, batch(4))
            before = await p.engine.head_of(TOPIC)
            # WHEN time passes (within the TTL) and upkeep runs
            clock.advance(59_999)
            await p.run_upkeep(TOPIC)
            # THEN the head and the history are as they were
            assert await p.engine.head_of(TOPIC) == before
            assert [r.seq for r in await p.history(TOPIC)] == [1, 2, 3, 4]
            assert seqs_of(await diff(p)) == [1, 2, 3, 4]
            assert clock() == T0 + 59_999

    asyncio.run(scenario())


def test_a_cap_passed_while_an_upkeep_run_forgets_the_head_still_requests_upkeep() -> None:
    # GIVEN a capped topic with inline upkeep, whose upkeep runs are recorded
    async def scenario() -> list[str]:
        clock = ManualClock()
        settings = Settings(tiering=Tiering(inline=True, interval_ms=0))
        async with processes(1, clock, settings=settings) as (p,):
            await p.engine.put_topic(TOPIC, {"cap_records": 3})
            for i in range(3):
                await p.engine.append(TOPIC, batch(1, i))
            runs: list[str] = []
            p.engine.upkeep = runs.append
            # WHEN the append that passes the cap commits, and an upkeep run on another
            # thread forgets the topic's head (it evicted) before the event loop looks at it
            appender = p.engine.appender
            commit = appender.commit_group

            def commit_then_forgotten(topic: str, reqs: Any) -> Any:
                out = commit(topic, reqs)
                p.engine.core.forget_head(topic)
                return out

            appender.commit_group = commit_then_forgotten  # type: ignore[method-assign]
            await p.engine.append(TOPIC, batch(1, 3))
            await asyncio.sleep(0.05)  # the requested run goes to the background pool
            return runs

    # THEN upkeep was still requested for it (it was lost before: the cap waited for the
    # next append or the sweep)
    assert asyncio.run(scenario()) == [TOPIC]
