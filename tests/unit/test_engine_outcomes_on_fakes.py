"""What the engine answers when storage loses the answer to a write (errors.OutcomeUnknown,
storage/ddb.py's re-sends), on the in-memory fakes' fault hook: storage applied the commit and
the answer never came, or nothing reached storage, or the adapter re-sent it (with its token,
or without, after other processes moved on). An append's seqs are reserved for it alone, so
the engine learns what happened by putting a hole at them (a frame there is its own): only
when storage will not answer that either is the outcome reported unknown. Afterwards the
history holds the write exactly once, or not at all, as reported."""

from __future__ import annotations

import asyncio

import pytest

from headwater.errors import OutcomeUnknown, Throttled
from headwater.settings import Caps, Settings, Tiering
from tests.fakes import Fault
from tests.fakes.processes import ManualClock, datas, processes, rec, req

pytestmark = pytest.mark.unit

TOPIC = "orders"


# --- indeterminate outcomes -----------------------------------------------------------------


def test_a_commit_applied_whose_answer_is_lost_is_learned_from_its_seqs() -> None:
    async def scenario() -> None:
        async with processes(1, ManualClock()) as (p,):
            await p.engine.append(TOPIC, req(rec(x=0)))
            # GIVEN storage applies the next commit and its answer never arrives
            p.stores.tail.fail_next("commit_append", Fault.LOSE_AFTER_APPLY)
            # WHEN a keyed append is sent
            got = await p.engine.append(TOPIC, req(rec(x=1), key="k"))
            assert not p.stores.account.faults.pending()
            # THEN the hole the engine tried at its seqs found its frame: applied, at seq 2
            assert (got.first_seq, got.deduped) == (2, False)
            assert datas(await p.history(TOPIC)) == [{"x": 0}, {"x": 1}]
            # AND a retry with its key learns the same, and the next append follows
            retry = await p.engine.append(TOPIC, req(rec(x=1), key="k"))
            assert (retry.first_seq, retry.deduped) == (2, True)
            nxt = await p.engine.append(TOPIC, req(rec(x=2)))
            assert nxt.first_seq == 3
            assert datas(await p.history(TOPIC)) == [{"x": 0}, {"x": 1}, {"x": 2}]

    asyncio.run(scenario())


def test_a_commit_that_never_reached_storage_is_learned_and_applied_once() -> None:
    async def scenario() -> None:
        async with processes(1, ManualClock()) as (p,):
            await p.engine.append(TOPIC, req(rec(x=0)))
            # GIVEN storage is unreachable for the next commit (nothing applies)
            p.stores.tail.fail_next("commit_append", Fault.FAIL_BEFORE_APPLY)
            got = await p.engine.append(TOPIC, req(rec(x=1), key="k"))
            assert not p.stores.account.faults.pending()
            # THEN the engine's hole took seq 2 (its frame can never land there), and it
            # reserved again: applied once, at seq 3
            assert (got.first_seq, got.deduped) == (3, False)
            assert datas(await p.history(TOPIC)) == [{"x": 0}, {"x": 1}]
            head = await p.engine.head_of(TOPIC)
            assert head is not None and (head.head_seq, head.count) == (3, 3)
            # the hole counts until a seal or an eviction passes it (docs/storage.md)

    asyncio.run(scenario())


@pytest.mark.parametrize("applied", [True, False], ids=["applied", "never-arrived"])
def test_a_commit_storage_will_not_confirm_at_all_is_reported_unknown(applied: bool) -> None:
    async def scenario() -> None:
        async with processes(1, ManualClock()) as (p,):
            await p.engine.append(TOPIC, req(rec(x=0)))
            # GIVEN the next commit's answer is lost (applied or not) and the hole that would
            # tell goes unanswered too
            fault = Fault.LOSE_AFTER_APPLY if applied else Fault.FAIL_BEFORE_APPLY
            p.stores.tail.fail_next("commit_append", fault)
            p.stores.tail.fail_next("fill_hole", Fault.FAIL_BEFORE_APPLY)
            # THEN the engine says the outcome is unknown (503, retry), not success or failure
            with pytest.raises(OutcomeUnknown) as err:
                await p.engine.append(TOPIC, req(rec(x=1), key="k"))
            assert err.value.status == 503 and err.value.detail == {"outcome": "unknown"}
            assert not p.stores.account.faults.pending()
            # WHEN the client retries with its key THEN it learns which, and the history holds
            # the record once (a reader filled the slot that never got its frame)
            retry = await p.engine.append(TOPIC, req(rec(x=1), key="k"))
            assert (retry.first_seq, retry.deduped) == ((2, True) if applied else (3, False))
            assert datas(await p.history(TOPIC)) == [{"x": 0}, {"x": 1}]

    asyncio.run(scenario())


@pytest.mark.parametrize("fresh_token", [False, True], ids=["token-remembered", "token-lost"])
def test_a_lost_answer_the_adapter_re_sends_is_one_success(fresh_token: bool) -> None:
    async def scenario() -> None:
        async with processes(1, ManualClock()) as (p,):
            await p.engine.append(TOPIC, req(rec(x=0)))
            # GIVEN the next commit applies, its answer is lost and the adapter re-sends it
            # (answered by the token, or, without it, by finding its own commit id)
            p.stores.tail.fail_next(
                "commit_append", Fault.RESEND_AFTER_APPLY, fresh_token=fresh_token
            )
            got = await p.engine.append(TOPIC, req(rec(x=1)))
            assert p.stores.account.calls["tail.commit_append"] == 3  # 1, then 2 for this one
            # THEN the append succeeds once: not a conflict, not a duplicate
            assert (got.first_seq, got.deduped) == (2, False)
            nxt = await p.engine.append(TOPIC, req(rec(x=2)))
            assert nxt.first_seq == 3
            assert datas(await p.history(TOPIC)) == [{"x": 0}, {"x": 1}, {"x": 2}]

    asyncio.run(scenario())


@pytest.mark.parametrize("durability", ["memory", "disk"])
def test_a_re_sent_commit_whose_frame_left_the_tail_is_one_success(durability: str) -> None:
    """A lossy class deletes evicted frames; a sealed log leaves them to their TTL. Either
    way the re-send finds its own frame, or lands on a key below the floor where no reader
    looks: the append applied once, and is reported so."""

    async def scenario() -> None:
        clock = ManualClock()
        async with processes(2, clock) as (a, b):
            # GIVEN a topic keeping records 1000 ms, and a commit of process A that applies
            # but whose answer is lost; before the adapter's re-send (with a fresh token),
            # time passes and process B's upkeep evicts everything past the TTL, A's frame too
            await a.engine.put_topic(TOPIC, {"ttl_ms": 1000, "durability": durability})
            await a.engine.append(TOPIC, req(rec(x=0)))

            def meanwhile() -> None:
                clock.advance(2000)
                b.upkeep.run(TOPIC)

            a.stores.tail.fail_next(
                "commit_append", Fault.RESEND_AFTER_APPLY, fresh_token=True, between=meanwhile
            )
            # WHEN A appends (no idempotency key) THEN it applied once, at seq 2
            got = await a.engine.append(TOPIC, req(rec(x=1)))
            assert (got.first_seq, got.last_seq, got.deduped) == (2, 2, False)
            head = await a.engine.head_of(TOPIC)
            assert head is not None
            assert (head.head_seq, head.count, head.evict_floor) == (2, 0, 3)
            assert await a.history(TOPIC) == []
            nxt = await a.engine.append(TOPIC, req(rec(x=2)))
            assert nxt.first_seq == 3

    asyncio.run(scenario())


def test_a_re_sent_keyed_commit_is_recognised_by_its_key_after_its_frame_left() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        async with processes(2, clock) as (a, b):
            # GIVEN as above, but the append carries an idempotency key (its item, written by
            # the same commit, outlives the evicted frame)
            await a.engine.put_topic(TOPIC, {"ttl_ms": 1000})
            await a.engine.append(TOPIC, req(rec(x=0)))

            def meanwhile() -> None:
                clock.advance(2000)
                b.upkeep.run(TOPIC)

            a.stores.tail.fail_next(
                "commit_append", Fault.RESEND_AFTER_APPLY, fresh_token=True, between=meanwhile
            )
            # WHEN A appends THEN the re-send finds its own key: the append succeeded, once
            got = await a.engine.append(TOPIC, req(rec(x=1), key="k"))
            assert (got.first_seq, got.deduped) == (2, False)
            head = await b.engine.head_of(TOPIC)
            assert head is not None and head.head_seq == 2

    asyncio.run(scenario())


@pytest.mark.parametrize("durability", ["memory", "disk"])
def test_a_re_sent_commit_whose_frame_was_deleted_and_collected_is_one_success(
    durability: str,
) -> None:
    async def scenario() -> None:
        async with processes(3, ManualClock()) as (a, b, c):
            await a.engine.put_topic(TOPIC, {"durability": durability})
            # GIVEN a commit of process A that applies but whose answer is lost; before the
            # adapter's re-send (with a fresh token), process B deletes every record (seq 2,
            # A's, included) and process C's upkeep drops the frames below the new floor
            await a.engine.append(TOPIC, req(rec(x=0)))

            def meanwhile() -> None:
                asyncio.run(b.engine.delete_records(TOPIC, None, None))
                c.upkeep.run(TOPIC)

            a.stores.tail.fail_next(
                "commit_append", Fault.RESEND_AFTER_APPLY, fresh_token=True, between=meanwhile
            )
            # WHEN A appends (no key) THEN it applied once: seq 2 (since deleted)
            got = await a.engine.append(TOPIC, req(rec(x=1)))
            assert (got.first_seq, got.deduped) == (2, False)
            # AND it wrote its record once: not again at seq 3
            head = await a.engine.head_of(TOPIC)
            assert head is not None and head.head_seq == 2
            assert await a.history(TOPIC) == []

    asyncio.run(scenario())


def test_a_topic_created_by_a_commit_whose_answer_was_lost_keeps_its_quota_slot() -> None:
    settings = Settings(tiering=Tiering(inline=False, interval_ms=0), caps=Caps(max_topics=1))

    async def scenario() -> None:
        async with processes(1, ManualClock(), settings=settings) as (p,):
            # GIVEN a deployment allowed one topic, and the first creating append applies but
            # its answer is lost
            p.stores.tail.fail_next("commit_append", Fault.LOSE_AFTER_APPLY)
            with pytest.raises(OutcomeUnknown):
                await p.engine.append("first", req(rec(x=1)))
            assert await p.engine.head_of("first") is not None  # it did apply
            # WHEN a second topic is created THEN the cap refuses it
            with pytest.raises(Throttled):
                await p.engine.append("second", req(rec(x=1)))
            assert await p.engine.count_topics() == 1

    asyncio.run(scenario())


# --- the same faults on the work-queue leases -----------------------------------------------


@pytest.mark.parametrize("fault", [Fault.RESEND_AFTER_APPLY, Fault.LOSE_AFTER_APPLY])
def test_an_ack_whose_answer_is_lost_finishes_the_job_once(fault: Fault) -> None:
    async def scenario() -> None:
        async with processes(1, ManualClock()) as (p,):
            # GIVEN a queue with two jobs, both claimed by w1
            await p.engine.put_topic("jobs", {"type": "queue"})
            await p.engine.append("jobs", req(rec(j=1), rec(j=2)))
            claimed = await p.queues.claim("jobs", "w1", 2, 30_000)
            assert [j.seq for j in claimed.jobs] == [1, 2]
            # WHEN the ack of job 1 applies and its answer is lost (re-sent without its
            # token, or never answered at all)
            p.stores.leases.fail_next("complete", fault, fresh_token=True)
            ack = p.queues.ack("jobs", "w1", [1], [claimed.jobs[0].lease_id])
            if fault is Fault.RESEND_AFTER_APPLY:
                # THEN the re-send is recognised as our own finish: done, not skipped
                assert (await ack).done == [1]
            else:
                # THEN the worker is told the outcome is unknown
                with pytest.raises(OutcomeUnknown):
                    await ack
            # AND either way job 1 was finished exactly once: its record is gone, job 2 stays
            assert [r.data for r in await p.history("jobs")] == [{"j": 2}]
            head = await p.engine.head_of("jobs")
            assert head is not None and head.count == 1
            again = await p.queues.ack("jobs", "w1", [1], [claimed.jobs[0].lease_id])
            assert (again.done, again.skipped) == ([], [1])

    asyncio.run(scenario())
