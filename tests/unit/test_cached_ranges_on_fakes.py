"""A range read from a known head whose frames this process holds in its frame cache (the
frame its own commit just cached: a long-poll woken by that commit) is answered on the event
loop, without a round trip through the engine's I/O threads (engine/ranges.py
`read_range_cached`). It must answer exactly what the I/O path answers for every window, and
fall back to it whenever storage is needed. Over the in-memory ports."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

from headwater.engine.values import RangeRead
from tests.fakes.processes import ManualClock, Process, processes, rec, req

TOPIC = "t"


def _count_io(p: Process) -> list[str]:
    """Record every call the engine sends to its I/O threads (by function name)."""
    calls: list[str] = []
    real = p.engine.core.io

    async def io(fn: Callable[..., Any], *args: Any) -> Any:
        calls.append(getattr(fn, "__name__", repr(fn)))
        return await real(fn, *args)

    p.engine.core.io = io  # type: ignore[method-assign]
    return calls


def _shape(rr: RangeRead) -> tuple[int, int, list[int], int]:
    return rr.head.head_seq, rr.next_seq, [r.seq for r in rr.records], rr.scanned_bytes


def test_a_cached_range_is_answered_without_the_io_threads_and_as_the_io_path_would() -> None:
    async def scenario() -> None:
        async with processes(1, ManualClock()) as (a,):
            for i in range(6):  # six frames, one record each, all cached by their commits
                await a.engine.append(TOPIC, req(rec(i=i)))
            head = await a.engine.head_of(TOPIC)
            assert head is not None and head.head_seq == 6
            calls = _count_io(a)
            # WHEN the reader reads from that head, over every window of after/limit/bytes/upto
            for after in range(0, 8):
                for limit in (1, 2, 5, 100):
                    for max_bytes in (1, 25, 1 << 20):
                        for upto in (None, 3, 6, 9):
                            got = await a.engine.read_range(
                                TOPIC, after, limit, max_bytes, None, head, upto
                            )
                            want = a.engine.ranges.read_range_sync(
                                TOPIC, after, limit, max_bytes, None, head, upto
                            )
                            # THEN the answer is the I/O path's, field for field
                            assert _shape(got) == _shape(want), (after, limit, max_bytes, upto)
            # AND no read went to the I/O threads
            assert calls == []

    asyncio.run(scenario())


def test_a_range_that_needs_storage_goes_through_the_io_threads() -> None:
    async def scenario() -> None:
        async with processes(2, ManualClock()) as (a, b):
            for i in range(3):
                await a.engine.append(TOPIC, req(rec(i=i)))
            head = await b.engine.head_of(TOPIC)
            assert head is not None and head.head_seq == 3
            calls = _count_io(b)
            # WHEN another process (whose cache holds none of a's frames) reads the range
            got = await b.engine.read_range(TOPIC, 0, 10, 1 << 20, None, head)
            # THEN it reads them from storage through its I/O threads
            assert [r.seq for r in got.records] == [1, 2, 3]
            assert calls == ["read_range_sync"]
            # AND once they are cached a second read from that head needs no thread
            again = await b.engine.read_range(TOPIC, 0, 10, 1 << 20, None, head)
            assert _shape(again) == _shape(got) and calls == ["read_range_sync"]
            # a key-filtered read and a read without a known head still go through them
            await b.engine.read_range(TOPIC, 0, 10, 1 << 20, b'"k"', head)
            await b.engine.read_range(TOPIC, 0, 10, 1 << 20)
            assert calls == ["read_range_sync"] * 3

    asyncio.run(scenario())


def test_a_deleted_topics_head_is_not_answered_from_the_cache() -> None:
    async def scenario() -> None:
        async with processes(1, ManualClock()) as (a,):
            await a.engine.append(TOPIC, req(rec(i=0)))
            head = await a.engine.head_of(TOPIC)
            assert head is not None
            gone = dataclasses.replace(head, deleted=True)
            calls = _count_io(a)
            try:
                await a.engine.read_range(TOPIC, 0, 10, 1 << 20, None, gone)
            except Exception as exc:  # what the I/O path says of a deleted topic
                assert type(exc).__name__ == "TopicNotFound"
            else:
                raise AssertionError("a deleted topic's range was answered")
            assert calls == ["read_range_sync"]

    asyncio.run(scenario())
