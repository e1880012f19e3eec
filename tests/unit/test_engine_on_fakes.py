"""The log engine's commit path on the in-memory fakes (tests/fakes), with an injected clock:
group commit, two processes appending to one topic through its counter, idempotent retries,
append time across skewed clocks. Milliseconds per test: no sockets, no emulator; the fakes
keep the adapters' contract (tests/adapters runs it on them too). Lost answers:
test_engine_outcomes_on_fakes."""

from __future__ import annotations

import asyncio
import json

import pytest

from headwater.engine.records import StoredRecord
from headwater.engine.values import AppendResult, DiffRequest
from tests.fakes import MemoryAccount
from tests.fakes.processes import T0, ManualClock, Process, datas, processes, rec, req

pytestmark = pytest.mark.unit

TOPIC = "orders"


def seqs(history: list[StoredRecord]) -> list[int]:
    return [r.seq for r in history]


def commits(account: MemoryAccount) -> int:
    """Commit attempts the engine sent (conflicts and re-sends included)."""
    return account.calls["tail.commit_append"]


def reservations(account: MemoryAccount) -> int:
    """Counter steps the engine sent (refusals and re-sends included)."""
    return account.calls["heads.reserve"]


async def frames(p: Process, topic: str) -> int:
    head = await p.engine.head_of(topic)
    assert head is not None
    return len(p.stores.tail.frame_summaries(head, 0, head.head_seq, 1 << 20))


# --- group commit ---------------------------------------------------------------------------


def test_concurrent_appends_to_one_topic_share_commits() -> None:
    async def scenario() -> None:
        async with processes(1, ManualClock()) as (p,):
            # GIVEN a topic
            await p.engine.put_topic(TOPIC, {})
            # WHEN 100 tasks append one record each, all at once
            results = await asyncio.gather(
                *(p.engine.append(TOPIC, req(rec(i=i))) for i in range(100))
            )
            # THEN every append is acknowledged with its own seq, dense from 1, in the order
            # the tasks asked, and far fewer commits (frames) were written than appends
            assert [(r.first_seq, r.last_seq) for r in results] == [(s, s) for s in range(1, 101)]
            assert not any(r.deduped for r in results)
            assert 1 <= commits(p.stores.account) == await frames(p, TOPIC) <= 4
            # AND the history holds each record once, at the seq it was acknowledged with
            history = await p.history(TOPIC)
            assert seqs(history) == list(range(1, 101))
            assert datas(history) == [{"i": i} for i in range(100)]

    asyncio.run(scenario())


def test_a_batch_gets_contiguous_seqs_inside_a_group() -> None:
    async def scenario() -> None:
        async with processes(1, ManualClock()) as (p,):
            await p.engine.put_topic(TOPIC, {})
            # WHEN batches of 1, 3 and 2 records are appended concurrently
            sizes = [1, 3, 2, 3, 1]
            results = await asyncio.gather(
                *(
                    p.engine.append(TOPIC, req(*(rec(b=b, k=k) for k in range(n))))
                    for b, n in enumerate(sizes)
                )
            )
            # THEN each batch has contiguous seqs, the batches tile 1..10 without a gap
            spans = [(r.first_seq, r.last_seq) for r in results]
            assert spans == [(1, 1), (2, 4), (5, 6), (7, 9), (10, 10)]
            assert all(r.head_seq == 10 for r in results)  # one commit carried them all
            history = await p.history(TOPIC)
            assert datas(history) == [
                {"b": b, "k": k} for b, n in enumerate(sizes) for k in range(n)
            ]

    asyncio.run(scenario())


# --- two processes, one topic: the counter, never a race ------------------------------------


def test_a_process_on_a_stale_head_appends_without_a_race() -> None:
    async def scenario() -> None:
        async with processes(2, ManualClock()) as (a, b):
            # GIVEN both processes appended once (each caches the head it committed)
            await a.engine.append(TOPIC, req(rec(p="a", i=0)))
            await b.engine.append(TOPIC, req(rec(p="b", i=0)))
            sent, stepped = commits(a.stores.account), reservations(a.stores.account)
            # WHEN process A appends again on its cached head, which B has moved past
            got = await a.engine.append(TOPIC, req(rec(p="a", i=1)))
            # THEN one counter step gave it the seq after B's, and one write put the frame
            # there: nothing lost a race, nothing was read first
            assert (reservations(a.stores.account), commits(a.stores.account)) == (
                stepped + 1,
                sent + 1,
            )
            assert (got.first_seq, got.deduped) == (3, False)
            history = await a.history(TOPIC)
            assert datas(history) == [{"p": "a", "i": 0}, {"p": "b", "i": 0}, {"p": "a", "i": 1}]

    asyncio.run(scenario())


def test_two_processes_appending_at_once_lose_and_duplicate_nothing() -> None:
    async def scenario() -> None:
        async with processes(2, ManualClock()) as (a, b):
            await a.engine.put_topic(TOPIC, {})
            # both start from the same head (as two processes that read it at once)
            start = await a.engine.head_of(TOPIC)
            assert start is not None
            a.engine.core.head_cache[TOPIC] = b.engine.core.head_cache[TOPIC] = start

            async def writer(p: Process, name: str, n: int) -> list[AppendResult]:
                out = []
                for i in range(n):  # bursts of concurrent appends, then the next burst
                    burst = [p.engine.append(TOPIC, req(rec(p=name, i=i, k=k))) for k in range(5)]
                    out += await asyncio.gather(*burst)
                return out

            # WHEN both processes append bursts concurrently
            acked_a, acked_b = await asyncio.gather(writer(a, "a", 8), writer(b, "b", 8))
            # THEN every acknowledged record is in the history exactly once, at its seq,
            # the seqs are dense, and nothing acknowledged is missing
            history = await b.history(TOPIC)
            by_seq = {r.seq: r.data for r in history}
            assert seqs(history) == list(range(1, 81))
            for name, acked in (("a", acked_a), ("b", acked_b)):
                assert len(acked) == 40 and not any(r.deduped for r in acked)
                sent = [{"p": name, "i": i, "k": k} for i in range(8) for k in range(5)]
                assert [by_seq[r.first_seq] for r in acked] == sent
            # AND each process's records kept their order, and no commit was refused: one
            # reservation and one write per frame
            order_a = [r.first_seq for r in acked_a]
            assert order_a == sorted(order_a)
            n = await frames(a, TOPIC)
            assert commits(a.stores.account) == reservations(a.stores.account) == n

    asyncio.run(scenario())


# --- idempotency ----------------------------------------------------------------------------


def test_a_retried_idempotency_key_applies_once() -> None:
    async def scenario() -> None:
        async with processes(2, ManualClock()) as (a, b):
            # GIVEN an append with an idempotency key
            first = await a.engine.append(TOPIC, req(rec(x=1), rec(x=2), key="k1"))
            assert (first.first_seq, first.last_seq, first.deduped) == (1, 2, False)
            await a.engine.append(TOPIC, req(rec(x=3)))
            # WHEN the client retries it, on the same process and on another one
            again = await a.engine.append(TOPIC, req(rec(x=1), rec(x=2), key="k1"))
            elsewhere = await b.engine.append(TOPIC, req(rec(x=1), rec(x=2), key="k1"))
            # THEN both answers are duplicates carrying the original seqs, and nothing was
            # written again
            for dup in (again, elsewhere):
                assert (dup.first_seq, dup.last_seq, dup.deduped, dup.created) == (
                    1,
                    2,
                    True,
                    False,
                )
                assert dup.head_seq == 3
            assert datas(await b.history(TOPIC)) == [{"x": 1}, {"x": 2}, {"x": 3}]

    asyncio.run(scenario())


def test_the_same_key_twice_in_one_group_applies_once() -> None:
    async def scenario() -> None:
        async with processes(1, ManualClock()) as (p,):
            await p.engine.put_topic(TOPIC, {})
            # WHEN one key is sent by two concurrent appends (one group commit), beside a
            # request without a key
            one, two, other = await asyncio.gather(
                p.engine.append(TOPIC, req(rec(x=1), key="k")),
                p.engine.append(TOPIC, req(rec(x=1), key="k")),
                p.engine.append(TOPIC, req(rec(y=1))),
            )
            # THEN the first applies, the second is its duplicate, the third applies
            assert (one.first_seq, one.deduped) == (1, False)
            assert (two.first_seq, two.last_seq, two.deduped) == (1, 1, True)
            assert (other.first_seq, other.deduped) == (2, False)
            assert datas(await p.history(TOPIC)) == [{"x": 1}, {"y": 1}]

    asyncio.run(scenario())


def test_an_idempotency_key_holds_for_its_window_of_the_injected_clock() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        async with processes(1, clock) as (p,):
            # GIVEN a topic whose keys are kept 1000 ms, and a key written at T0
            await p.engine.put_topic(TOPIC, {"idempotency_window_ms": 1000})
            first = await p.engine.append(TOPIC, req(rec(x=1), key="k"))
            # WHEN the key comes back at the last moment of its window
            clock.advance(1000)
            held = await p.engine.append(TOPIC, req(rec(x=1), key="k"))
            # THEN it is still a duplicate
            assert (held.first_seq, held.deduped) == (first.first_seq, True)
            # WHEN it comes back 1 ms later
            clock.advance(1)
            later = await p.engine.append(TOPIC, req(rec(x=1), key="k"))
            # THEN the window has passed: it is a new append
            assert (later.first_seq, later.deduped, later.ts) == (2, False, T0 + 1001)
            assert datas(await p.history(TOPIC)) == [{"x": 1}, {"x": 1}]

    asyncio.run(scenario())


# --- time never goes back on a topic --------------------------------------------------------


def test_a_process_with_a_slow_clock_never_moves_append_time_back() -> None:
    async def scenario() -> None:
        ahead, behind = ManualClock(T0 + 5_000), ManualClock(T0)
        account = MemoryAccount()
        async with (
            processes(1, ahead, account=account) as (a,),
            processes(1, behind, account=account) as (b,),
        ):
            # GIVEN process A, whose clock is 5 s ahead, appended
            first = await a.engine.append(TOPIC, req(rec(x=1)))
            # WHEN process B, whose clock is behind, appends after it
            second = await b.engine.append(TOPIC, req(rec(x=2)))
            # THEN B's record is stamped no earlier than A's
            assert first.ts == T0 + 5_000 and second.ts == T0 + 5_000
            diff = await b.engine.diff(TOPIC, DiffRequest())
            stamps = [json.loads(r)["$ts"] for r in diff.records]
            assert stamps == [T0 + 5_000, T0 + 5_000]

    asyncio.run(scenario())
