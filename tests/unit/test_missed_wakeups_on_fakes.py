"""A long-poll that is reading the head (its poll for other processes' appends) when this
process commits is not waiting on the notifier, so the commit's wake-up finds no one. It must
still answer with that commit now, not after one more poll interval: the reader checks the
head this process last committed after each poll (engine/reads.py `_ours_past`). Over the
in-memory ports; the poll's read is where the commit lands, so the count of head reads says
whether the waiter saw it."""

from __future__ import annotations

import asyncio
from typing import Any

from headwater.engine.values import DiffRequest
from tests.fakes.processes import ManualClock, Process, processes, rec, req

TOPIC = "t"


def _commit_during_the_first_poll(p: Process, loop: asyncio.AbstractEventLoop) -> list[bool]:
    """Patch the head store: the first eventually consistent read (a waiter's poll) returns
    the head as it was, and this process commits an append before that read answers."""
    reads: list[bool] = []
    real = p.engine.core.heads.get

    def get(topic: str, **kw: Any) -> Any:
        consistent = bool(kw.get("consistent", True))
        reads.append(consistent)
        before = real(topic, **kw)
        if not consistent and reads.count(False) == 1:
            done = asyncio.run_coroutine_threadsafe(p.engine.append(TOPIC, req(rec(x=1))), loop)
            done.result(10)
        return before

    p.engine.core.heads.get = get  # type: ignore[method-assign]
    return reads


def test_a_wait_for_change_sees_a_commit_that_landed_during_its_poll() -> None:
    async def scenario() -> None:
        async with processes(1, ManualClock()) as (a,):
            await a.engine.append(TOPIC, req(rec(x=0)))
            seen = await a.engine.head_of(TOPIC)
            assert seen is not None and seen.head_seq == 1
            a.engine.core.head_cache.pop(TOPIC, None)  # the waiter starts with no cache
            reads = _commit_during_the_first_poll(a, asyncio.get_running_loop())
            # WHEN a waiter polls and the commit lands during that poll's read
            moved = await a.engine.wait_change(TOPIC, seen, 5.0)
            # THEN it answers with the commit right after that one poll (no second one; the
            # strong read is the appender's own, its cache emptied above)
            assert moved is not None and moved.head_seq == 2
            assert reads.count(False) == 1

    asyncio.run(scenario())


def test_a_diff_long_poll_sees_a_commit_that_landed_during_its_poll() -> None:
    async def scenario() -> None:
        async with processes(1, ManualClock()) as (a,):
            await a.engine.append(TOPIC, req(rec(x=0)))
            a.engine.core.head_cache.pop(TOPIC, None)
            reads = _commit_during_the_first_poll(a, asyncio.get_running_loop())
            # WHEN a long-poll from the tail polls and the commit lands during that read
            got = await a.engine.diff(TOPIC, DiffRequest(from_seq=1, wait_ms=5000))
            # THEN it returns the record after that one poll: its strong reads (the diff
            # itself) but no second eventually consistent poll
            assert len(got.records) == 1 and b'"x":1' in bytes(got.records[0]).replace(b" ", b"")
            assert reads.count(False) == 1

    asyncio.run(scenario())
