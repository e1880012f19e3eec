"""The sequencer on the in-memory fakes (docs/storage.md "The sequencer"): slots reserved and
not written, what readers do about them, holes, and the counters. A writer that "dies"
between its reservation and its frame write is played by a reservation made directly on the
head store and never followed by a write. The fakes' hole timeout is 50 ms (processes.py)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from headwater.engine.ports import AppendCommit, AppendRejected, Head
from headwater.engine.records import NewRecord, encode_records
from headwater.engine.values import AppendRequest, ClaimRefused, DiffRequest, ProducerClaim
from tests.fakes.processes import ManualClock, Process, datas, processes, rec, req

pytestmark = pytest.mark.unit

TOPIC = "orders"


def _frame(head: Head, first: int, record: NewRecord) -> AppendCommit:
    """The frame put a writer sends at its reserved seq (what Appender builds)."""
    return AppendCommit(
        topic=head.topic,
        expected=head,
        new_head=None,
        first_seq=first,
        last_seq=first,
        ts=0,
        blob=encode_records([record]),
        spill_key=None,
        payload_bytes=record.size,
        tag_entries=[],
        tag_pending=False,
        idem=[],
        single=True,
    )


def _reserve(p: Process, n: int = 1, nbytes: int = 10) -> tuple[int, int]:
    head = p.engine.core.heads.get(TOPIC)
    assert head is not None
    rsv = p.engine.core.heads.reserve(head, n, nbytes, p.engine.core.clock())
    return rsv.first_seq, rsv.last_seq


def test_a_reader_fills_the_slot_of_a_writer_that_died_and_reads_on() -> None:
    async def scenario() -> None:
        async with processes(2, ManualClock()) as (a, b):
            await a.engine.append(TOPIC, req(rec(x=1)))
            # GIVEN process A reserved seq 2 and died before writing its frame
            assert _reserve(a) == (2, 2)
            # AND process B appended after it
            got = await b.engine.append(TOPIC, req(rec(x=3)))
            assert got.first_seq == 3
            # WHEN B reads the topic
            res = await b.engine.diff(TOPIC, DiffRequest(from_seq=0, limit=100))
            # THEN it waited for the slot, filled it, and read on: every record, in order
            assert datas([r for r in await b.history(TOPIC)]) == [{"x": 1}, {"x": 3}]
            assert len(res.records) == 2 and res.next_from_seq == 3
            assert b.engine.core.slots.filled == 1
            frame = b.stores.tail.get_frames(res.head, [2])[2]
            assert (frame.hole, frame.first_seq, frame.last_seq) == (True, 2, 2)

    asyncio.run(scenario())


def test_a_reader_never_skips_a_slot_that_can_still_commit() -> None:
    async def scenario() -> None:
        async with processes(2, ManualClock()) as (a, b):
            await a.engine.append(TOPIC, req(rec(x=1)))
            head = a.engine.core.heads.get(TOPIC)
            assert head is not None
            # GIVEN A reserved seq 2 (its frame is on its way) and B appended seq 3
            first, _ = _reserve(a)
            await b.engine.append(TOPIC, req(rec(x=3)))

            # WHEN a reader reads while A's frame lands 20 ms later (within the timeout)
            def land() -> None:
                time.sleep(0.02)
                a.stores.tail.commit_append(_frame(head, first, rec(x=2)))

            writer = threading.Thread(target=land)
            writer.start()
            res = await b.engine.diff(TOPIC, DiffRequest(from_seq=0, limit=100))
            writer.join()
            # THEN it read all three in order, filling nothing
            assert [r.seq for r in await b.history(TOPIC)] == [1, 2, 3]
            assert len(res.records) == 3
            assert b.engine.core.slots.filled == 0

    asyncio.run(scenario())


def test_a_late_writer_whose_slot_was_filled_reserves_again() -> None:
    async def scenario() -> None:
        async with processes(2, ManualClock()) as (a, b):
            await a.engine.append(TOPIC, req(rec(x=1)))
            head = a.engine.core.heads.get(TOPIC)
            assert head is not None
            first, _ = _reserve(a)
            # GIVEN a reader filled A's slot (A was past the timeout)
            b.stores.tail.fill_hole(head, first)
            # WHEN A's frame put arrives THEN its slot is lost, nothing written there
            with pytest.raises(AppendRejected) as rej:
                a.stores.tail.commit_append(_frame(head, first, rec(x=2)))
            assert rej.value.slot_lost
            # AND through the engine, such an append reserves again and lands once
            got = await a.engine.append(TOPIC, req(rec(x=2)))
            assert got.first_seq == 3
            assert [(r.seq, r.data) for r in await a.history(TOPIC)] == [
                (1, {"x": 1}),
                (3, {"x": 2}),
            ]

    asyncio.run(scenario())


def test_an_abandoned_reservation_of_several_seqs_waits_once_and_fills_each() -> None:
    async def scenario() -> None:
        async with processes(2, ManualClock()) as (a, b):
            await a.engine.append(TOPIC, req(rec(x=1)))
            # GIVEN a dead reservation of 3 seqs (a batch) and a record after it
            assert _reserve(a, 3, 30) == (2, 4)
            await b.engine.append(TOPIC, req(rec(x=5)))
            # WHEN B reads THEN the 3 seqs are holes (one each: a reader cannot know the
            # span) and the record after them is read
            started = time.monotonic()
            res = await b.engine.diff(TOPIC, DiffRequest(from_seq=0, limit=100))
            waited = time.monotonic() - started
            assert [r.seq for r in await b.history(TOPIC)] == [1, 5]
            assert len(res.records) == 2 and b.engine.core.slots.filled == 3
            # the three seqs were reserved together: the reader waited for the first only
            # (50 ms), not three times (generous bound for a loaded machine)
            assert waited < 3.0

    asyncio.run(scenario())


def test_a_seal_passes_holes_and_takes_them_out_of_the_counters() -> None:
    async def scenario() -> None:
        async with processes(2, ManualClock()) as (a, b):
            await a.engine.put_topic(TOPIC, {})
            await a.engine.append(TOPIC, req(rec(x=1), rec(x=2)))
            _reserve(a, 2, 20)  # 3-4: dead
            await b.engine.append(TOPIC, req(rec(x=5)))
            head = await b.engine.head_of(TOPIC)
            assert head is not None and (head.count, head.bytes) == (5, 50)
            # WHEN upkeep seals (the age rule, forced: seal_age 0 via a clock far ahead)
            b.engine.core.clock.advance(3_600_000)  # type: ignore[attr-defined]
            b.upkeep.run(TOPIC)
            after = await b.engine.head_of(TOPIC)
            assert after is not None
            # THEN the segment holds the three records, and the counters no longer count the
            # hole's seqs (its bytes are unknown to a reader's fill: they stay counted)
            assert after.sealed_through == 5
            assert after.count == 3
            assert [r.seq for r in await b.history(TOPIC)] == [1, 2, 5]

    asyncio.run(scenario())


def test_a_prefix_delete_past_a_hole_leaves_the_topic_empty() -> None:
    async def scenario() -> None:
        async with processes(2, ManualClock()) as (a, b):
            await a.engine.put_topic(TOPIC, {"durability": "memory"})
            await a.engine.append(TOPIC, req(rec(x=1)))
            _reserve(a)  # 2: dead
            await b.engine.append(TOPIC, req(rec(x=3)))
            await b.engine.diff(TOPIC, DiffRequest(from_seq=0, limit=100))  # fills 2
            # WHEN every record is deleted
            out = await b.engine.delete_records(TOPIC, None, None)
            # THEN two records were deleted, and the topic counts none (the hole too)
            assert out.deleted == 2
            head = await b.engine.head_of(TOPIC)
            assert head is not None and (head.count, head.earliest_seq) == (0, 4)

    asyncio.run(scenario())


@pytest.mark.parametrize("hole_at", ["first seq", "middle"])
def test_a_queue_drained_past_a_hole_counts_nothing(hole_at: str) -> None:
    """The fault run's flake (issue 42): a producer's first reservation never committed, so
    the queue's floor stood on a hole no job would ever ack, and the topic counted it for
    good; and a floor moved past a hole by acks kept counting its seqs."""

    async def scenario() -> None:
        async with processes(2, ManualClock()) as (a, b):
            await a.engine.put_topic("jobs", {"type": "queue"})
            if hole_at == "middle":
                await a.engine.append("jobs", req(rec(j=0)))
            # GIVEN a producer reserved a seq and never wrote it, then two jobs came
            head = a.engine.core.heads.get("jobs")
            assert head is not None
            a.engine.core.heads.reserve(head, 1, 10, a.engine.core.clock())
            await b.engine.append("jobs", req(rec(j=1), rec(j=2)))
            # WHEN a worker claims (passing the hole once it is overdue) and acks every job
            claimed = await b.queues.claim("jobs", "w1", 10, 30_000)
            assert len(claimed.jobs) == (3 if hole_at == "middle" else 2)
            for job in claimed.jobs:
                await b.queues.ack("jobs", "w1", [job.seq], [job.lease_id])
            # THEN (within the floor's once-a-second pace) the queue counts nothing, and its
            # floor is past the hole
            deadline = time.monotonic() + 10
            while True:
                head = await b.engine.head_of("jobs")
                assert head is not None
                drained = (head.count, head.bytes, head.earliest_seq) == (0, 0, head.head_seq + 1)
                if drained or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.05)
            assert (head.count, head.bytes, head.earliest_seq) == (0, 0, head.head_seq + 1)

    asyncio.run(scenario())


def test_a_writers_own_failed_seqs_are_filled_at_once_with_their_bytes() -> None:
    async def scenario() -> None:
        async with processes(2, ManualClock()) as (a, b):
            await a.engine.append(TOPIC, req(rec(x=1), key="k"))
            # GIVEN B's cached head does not know the key is taken (its read of the key is
            # skipped by a stale process cache), so it reserves and its commit is refused
            real = b.stores.tail.get_idempotency
            b.stores.tail.get_idempotency = lambda *a_, **k_: None  # type: ignore[method-assign]
            got = await b.engine.append(TOPIC, req(rec(x=1), key="k"))
            b.stores.tail.get_idempotency = real  # type: ignore[method-assign]
            # THEN it answers the original seqs, and the seq it reserved is a hole it filled
            # itself, carrying the bytes it had reserved (no reader waits for it)
            assert (got.first_seq, got.deduped) == (1, True)
            head = await b.engine.head_of(TOPIC)
            assert head is not None and head.head_seq == 2
            hole = b.stores.tail.get_frames(head, [2])[2]
            assert (hole.hole, hole.void_bytes) == (True, 10)
            assert b.engine.core.slots.filled == 0

    asyncio.run(scenario())


def test_idempotent_producers_in_two_processes_never_race_each_other() -> None:
    async def scenario() -> None:
        async with processes(2, ManualClock()) as (a, b):
            await a.engine.put_topic(TOPIC, {})

            async def producer(p: Process, name: str) -> list[int]:
                seqs = []
                for seq in range(15):
                    claim = ProducerClaim(name, 0, seq)
                    got = await p.engine.append(
                        TOPIC, AppendRequest([rec(p=name, s=seq)], claim=claim)
                    )
                    seqs.append(got.first_seq)
                return seqs

            # WHEN four producers (two per process) write at once
            runs = await asyncio.gather(
                producer(a, "pa"), producer(a, "pb"), producer(b, "pc"), producer(b, "pd")
            )
            # THEN every write committed at its first attempt: one reservation and one
            # transaction each, no claim refused, no ext written
            acct = a.stores.account
            assert acct.calls["tail.commit_append"] == acct.calls["heads.reserve"]
            head = await a.engine.head_of(TOPIC)
            assert head is not None and head.ext == ""
            # AND each producer's writes are in the log once, in order
            history = await a.history(TOPIC)
            for name, seqs in zip(("pa", "pb", "pc", "pd"), runs, strict=True):
                assert seqs == sorted(seqs)
                mine = [r.data["s"] for r in history if r.data["p"] == name]
                assert mine == list(range(15))
            # AND a retry of an accepted write is refused with the state that says so
            with pytest.raises(ClaimRefused) as refused:
                await b.engine.append(
                    TOPIC, AppendRequest([rec(p="pa", s=3)], claim=ProducerClaim("pa", 0, 3))
                )
            assert refused.value.stored == (0, 14)
            assert len(await a.history(TOPIC)) == 60

    asyncio.run(scenario())


def test_a_saturated_topic_answers_429_to_requests_that_take_backpressure() -> None:
    from headwater.errors import Throttled

    async def scenario() -> None:
        async with processes(1, ManualClock()) as (p,):
            await p.engine.put_topic(TOPIC, {})
            # GIVEN the topic's head key throttles the next reservation
            p.stores.heads.throttle_next = 1
            # WHEN an append that takes backpressure (/v0's default, /v1) is sent
            # THEN it is told at once: 429 with Retry-After, nothing reserved or written
            with pytest.raises(Throttled):
                await p.engine.append(TOPIC, AppendRequest([rec(x=1)], backpressure=True))
            head = await p.engine.head_of(TOPIC)
            assert head is not None and head.head_seq == 0
            # AND one that opted out (`disable_backpressure`) waits it out and is written
            p.stores.heads.throttle_next = 1
            got = await p.engine.append(TOPIC, AppendRequest([rec(x=2)], backpressure=False))
            assert got.first_seq == 1
            assert datas(await p.history(TOPIC)) == [{"x": 2}]

    asyncio.run(scenario())


@pytest.mark.parametrize("reader", ["diff long-poll", "wait_change"])
def test_a_live_reader_leaves_storage_alone_while_its_process_commits(reader: str) -> None:
    """A long-poll parked on a topic and an append from the same process: the append's
    commit (a reservation, then its frame) wakes the reader, so the reader does not poll the
    head meanwhile, only to find the reserved seqs and wait on them (bench_durable's round
    trip made a head read more per append once an append was two calls)."""

    import dataclasses

    from tests.fakes.processes import SETTINGS

    # a hole timeout longer than the commit (the fakes' 50 ms would let readers poll)
    settings = dataclasses.replace(SETTINGS, hole_timeout_ms=2_000)

    async def scenario() -> None:
        async with processes(1, ManualClock(), settings=settings) as (p,):
            await p.engine.append(TOPIC, req(rec(x=1)))
            head = await p.engine.head_of(TOPIC)
            assert head is not None
            heads = p.engine.core.heads
            real_reserve, real_get = heads.reserve, heads.get
            polls: list[bool] = []

            def slow_reserve(*a: object, **k: object) -> object:
                time.sleep(0.2)  # a commit that spans several of the reader's polls
                return real_reserve(*a, **k)

            def counted_get(topic: str, consistent: bool = True) -> object:
                if not consistent:
                    polls.append(True)
                return real_get(topic, consistent=consistent)

            heads.reserve = slow_reserve  # type: ignore[method-assign]
            heads.get = counted_get  # type: ignore[method-assign]
            if reader == "wait_change":
                waiting = asyncio.ensure_future(p.engine.wait_change(TOPIC, head, 5.0))
            else:
                waiting = asyncio.ensure_future(
                    p.engine.diff(TOPIC, DiffRequest(from_seq=1, limit=10, wait_ms=5000))
                )
            await asyncio.sleep(0.01)
            await p.engine.append(TOPIC, req(rec(x=2)))
            got = await asyncio.wait_for(waiting, 5)
            # THEN the reader got the record (or the moved head) and never polled storage
            if reader == "wait_change":
                assert got is not None and got.head_seq == 2
            else:
                assert [r.seq for r in await p.history(TOPIC)][-1] == 2 and got.records
            assert polls == []

    asyncio.run(scenario())
