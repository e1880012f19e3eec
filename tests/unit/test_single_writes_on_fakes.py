"""The engine's one-write appends (docs/storage.md "One write per append") over the in-memory
ports, several processes sharing one account: which appends are a frame alone and which stay
a transaction, what the stored head item says meanwhile, and that a delete, a seal and a
stale process all keep the log exact."""

from __future__ import annotations

import asyncio
import dataclasses

from headwater.engine.ports import Checkpoint
from tests.fakes.processes import SETTINGS, ManualClock, datas, processes, rec, req

TOPIC = "t"


def test_plain_appends_write_their_frame_alone_and_keyed_ones_a_transaction() -> None:
    async def scenario() -> None:
        async with processes(2, ManualClock()) as (a, b):
            acct = a.stores.account
            await a.engine.append(TOPIC, req(rec(x=0)))  # creates: a transaction
            stored = acct.heads[TOPIC].head
            assert stored.head_seq == 1
            # WHEN both processes append without keys
            await a.engine.append(TOPIC, req(rec(x=1)))
            await b.engine.append(TOPIC, req(rec(x=2), rec(x=3)))
            # THEN the stored head item has not moved; reads see the newest frame
            assert acct.heads[TOPIC].head.head_seq == 1
            head = await b.engine.head_of(TOPIC)
            assert head is not None
            assert (head.head_seq, head.count, head.appended) == (4, 4, 4)
            assert head.stored == Checkpoint(1, 1, 10)
            frames = acct.frames[f"{TOPIC}#1"]
            assert all(f.expires_s is not None for f in frames.values())  # the tail TTL
            # WHEN a keyed append commits THEN it is a transaction that stores the head
            got = await a.engine.append(TOPIC, req(rec(x=4), key="k"))
            assert (got.first_seq, got.last_seq) == (5, 5)
            assert acct.heads[TOPIC].head.head_seq == 5
            assert acct.heads[TOPIC].head.count == 5
            assert datas(await b.history(TOPIC)) == [{"x": i} for i in range(5)]

    asyncio.run(scenario())


def test_with_single_writes_off_every_append_moves_the_stored_head() -> None:
    settings = dataclasses.replace(SETTINGS, single_write_appends=False)

    async def scenario() -> None:
        async with processes(1, ManualClock(), settings=settings) as (a,):
            for i in range(3):
                await a.engine.append(TOPIC, req(rec(x=i)))
            assert a.stores.account.heads[TOPIC].head.head_seq == 3

    asyncio.run(scenario())


def test_a_process_that_missed_a_delete_recreates_instead_of_writing_into_the_old_log() -> None:
    async def scenario() -> None:
        async with processes(2, ManualClock()) as (a, b):
            await a.engine.append(TOPIC, req(rec(x=0)))
            await a.engine.append(TOPIC, req(rec(x=1)))  # a caches the head (seq 2)
            # GIVEN b deletes the topic (a's cached head does not know)
            assert await b.engine.delete_topic(TOPIC, if_empty=False) is not None
            # WHEN a appends from its cached head THEN its frame meets the delete's fence,
            # and the append recreates the topic (a new epoch) instead of landing in the
            # deleted log
            got = await a.engine.append(TOPIC, req(rec(x=2)))
            assert got.created and got.first_seq == 1  # a new incarnation: seqs from 1
            head = await b.engine.head_of(TOPIC)
            assert head is not None and head.epoch == 2
            assert datas(await b.history(TOPIC)) == [{"x": 2}]

    asyncio.run(scenario())


def test_a_seal_stores_the_head_past_the_single_writes() -> None:
    settings = dataclasses.replace(
        SETTINGS, tiering=dataclasses.replace(SETTINGS.tiering, seal_records=4, grace_ms=0)
    )

    async def scenario() -> None:
        async with processes(2, ManualClock(), settings=settings) as (a, b):
            await a.engine.append(TOPIC, req(rec(x=0)))
            for i in range(1, 6):
                await a.engine.append(TOPIC, req(rec(x=i)))
            assert a.stores.account.heads[TOPIC].head.head_seq == 1
            await b.run_upkeep(TOPIC)  # seals every 4 records
            stored = a.stores.account.heads[TOPIC].head
            assert stored.sealed_through >= 4 and stored.head_seq == 6 and stored.count == 6
            assert datas(await b.history(TOPIC)) == [{"x": i} for i in range(6)]
            await a.engine.append(TOPIC, req(rec(x=6)))
            assert datas(await b.history(TOPIC))[-1] == {"x": 6}

    asyncio.run(scenario())


def test_a_lost_race_steps_past_one_missed_frame_and_reads_past_more() -> None:
    async def scenario() -> None:
        async with processes(2, ManualClock()) as (a, b):
            acct = a.stores.account
            await a.engine.append(TOPIC, req(rec(x=0)))  # a caches the head (seq 1)
            await b.engine.append(TOPIC, req(rec(x=1)))  # one frame past a's view
            reads: list[str] = []
            real_get = a.engine.core.heads.get

            def counted(topic: str, **kw: object) -> object:
                reads.append(topic)
                return real_get(topic, **kw)  # type: ignore[arg-type]

            a.engine.core.heads.get = counted  # type: ignore[method-assign]
            before = acct.calls["tail.commit_append"]
            # WHEN a appends from its stale cache, one frame behind
            got = await a.engine.append(TOPIC, req(rec(x=2)))
            # THEN the lost race stepped past the winner's frame: no head read, two writes
            assert (got.first_seq, got.last_seq) == (3, 3)
            assert acct.calls["tail.commit_append"] - before == 2
            assert reads == []
            # WHEN b writes three frames past a's view and a appends (keyed: a transaction)
            for i in range(3, 6):
                await b.engine.append(TOPIC, req(rec(x=i)))
            before = acct.calls["tail.commit_append"]
            keyed = await a.engine.append(TOPIC, req(rec(x=6), key="k"))
            # THEN one step, a second loss, then one read that skips to the tail
            assert (keyed.first_seq, keyed.last_seq) == (7, 7) and not keyed.deduped
            assert acct.calls["tail.commit_append"] - before == 3
            assert reads == [TOPIC]
            # AND the transaction moved the stored item past every frame
            stored = acct.heads[TOPIC].head
            assert (stored.head_seq, stored.count, stored.appended) == (7, 7, 7)
            assert datas(await b.history(TOPIC)) == [{"x": i} for i in range(7)]

    asyncio.run(scenario())


def test_a_group_of_concurrent_requests_spills_at_the_group_threshold() -> None:
    settings = dataclasses.replace(SETTINGS, group_spill_threshold_bytes=1024)
    pad = "x" * 300  # the threshold compares the frame's encoded (uncompressed) size

    async def scenario() -> None:
        async with processes(1, ManualClock(), settings=settings) as (a,):
            acct = a.stores.account
            await a.engine.append(TOPIC, req(rec(x=0)))
            # WHEN one request of 8 records (~2.4 KB) is appended alone THEN it stays inline
            one = await a.engine.append(TOPIC, req(*(rec(x=i, pad=pad) for i in range(8))))
            frames = acct.frames[f"{TOPIC}#1"]
            assert frames[one.first_seq].spill_key is None
            # WHEN 8 requests of one record each arrive together (one group commit)
            got = await asyncio.gather(
                *(a.engine.append(TOPIC, req(rec(x=i, pad=pad))) for i in range(8))
            )
            firsts = {g.first_seq for g in got}
            group_frames = [f for k, f in frames.items() if k in firsts]
            # THEN they share one frame, spilled to S3 past the group threshold
            assert len(group_frames) == 1 and group_frames[0].spill_key is not None
            history = datas(await a.history(TOPIC))
            assert len(history) == 17 and history[-8:] == [{"x": i, "pad": pad} for i in range(8)]

    asyncio.run(scenario())
