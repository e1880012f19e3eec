"""Router forwarding in the engine against in-process moto: preserved $node/$tag, the
filter, a durable cursor (a new engine resumes without duplicates), exactly_once replays,
backpressure from a rejecting dest, the loop-breaker on allow_cycle routers, the per-router
lease (one forwarder at a time, takeover after expiry, a conditional cursor under a lease
race) and the stream-driven StreamBatch."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from headwater.engine.log import LogEngine, wall_ms
from headwater.engine.ports.routers import RouterItem
from headwater.engine.records import NewRecord
from headwater.engine.router_stream import ForwardIncomplete, StreamBatch
from headwater.engine.routers import BATCH, RouterEngine
from headwater.engine.values import AppendRequest, DiffRequest
from headwater.settings import Settings
from headwater.storage.blobs import S3BlobStore
from headwater.storage.bootstrap import ensure_resources
from headwater.storage.clients import AwsClients
from headwater.storage.heads import DynamoHeadStore
from headwater.storage.log_tail import DynamoLogTailStore
from headwater.storage.routers import DynamoRouterStore

pytestmark = pytest.mark.api


class SkewedClock:
    """Wall-clock ms plus an offset a test moves: a lease "lapses" without sleeping, however
    slow the machine is."""

    def __init__(self) -> None:
        self.skew_ms = 0

    def __call__(self) -> int:
        return wall_ms() + self.skew_ms


def _routers(settings: Settings, clock: Callable[[], int] = wall_ms, **kwargs: Any) -> RouterEngine:
    clients = AwsClients.create(settings)
    ensure_resources(settings, clients)
    blobs = S3BlobStore(clients.s3, settings.bucket_name)
    engine = LogEngine(
        DynamoHeadStore(clients.dynamodb, settings),
        DynamoLogTailStore(clients.dynamodb, settings, blobs),
        blobs,
        settings,
        clock=clock,
    )
    return RouterEngine(engine, DynamoRouterStore(clients.dynamodb, settings), **kwargs)


def _rec(i: int, node: str | None = None, tag: str | None = None) -> NewRecord:
    return NewRecord({"i": i}, node=node, tag=tag, size=32)


async def _read(r: RouterEngine, topic: str) -> list[dict[str, Any]]:
    res = await r.log.diff(topic, DiffRequest(limit=1000, include_tags=True))
    return [json.loads(b) for b in res.records]


async def _drain(r: RouterEngine) -> None:
    for _ in range(50):
        if not await r.run_pass():
            return
    raise AssertionError("forwarding did not settle")


def test_forwarding_preserves_node_and_tag_filters_and_resumes(
    moto: None, resource_prefix: str
) -> None:
    settings = Settings(resource_prefix=resource_prefix)

    async def scenario() -> None:
        # GIVEN a router src -> dst forwarding tags "pub:*"
        r1 = _routers(settings)
        await r1.log.put_topic("src", {})
        await r1.put(RouterItem("src->dst", "src", "dst", filter=("tag", "Glob", "pub:*")))
        await r1.log.append(
            "src",
            AppendRequest([_rec(1, "n1", "pub:a"), _rec(2, "n1", "priv"), _rec(3, None, "pub:b")]),
        )
        # WHEN the forwarder runs
        await _drain(r1)
        # THEN matching records arrive with their $node/$tag, unstamped (at_least_once)
        got = await _read(r1, "dst")
        assert [(g["data"], g.get("$node"), g.get("$tag"), g.get("meta")) for g in got] == [
            ({"i": 1}, "n1", "pub:a", None),
            ({"i": 3}, None, "pub:b", None),
        ]
        assert (await r1.get("src->dst")).forwarded_total == 2
        assert (await r1.get("src->dst")).cursor == 3
        r1.log.close()
        # AND a new engine over the same tables resumes from the durable cursor
        r2 = _routers(settings)
        await _drain(r2)
        assert len(await _read(r2, "dst")) == 2
        await r2.log.append("src", AppendRequest([_rec(4, "n2", "pub:c")]))
        await _drain(r2)
        got = await _read(r2, "dst")
        assert [g["data"]["i"] for g in got] == [1, 3, 4]
        assert got[-1]["$node"] == "n2"
        r2.log.close()

    asyncio.run(scenario())


def test_preserve_false_clears_node_and_tag(moto: None, resource_prefix: str) -> None:
    async def scenario() -> None:
        r = _routers(Settings(resource_prefix=resource_prefix))
        await r.log.put_topic("s", {})
        await r.put(RouterItem("s->d", "s", "d", preserve_node=False, preserve_tag=False))
        await r.log.append("s", AppendRequest([_rec(1, "n", "t")]))
        await _drain(r)
        [got] = await _read(r, "d")
        assert "$node" not in got and "$tag" not in got
        r.log.close()

    asyncio.run(scenario())


def test_exactly_once_replay_does_not_duplicate(moto: None, resource_prefix: str) -> None:
    async def scenario() -> None:
        r = _routers(Settings(resource_prefix=resource_prefix))
        await r.log.put_topic("s", {})
        await r.put(RouterItem("s->d", "s", "d", guarantee="exactly_once"))
        await r.log.append("s", AppendRequest([_rec(i) for i in range(1, 4)]))
        await _drain(r)
        got = await _read(r, "d")
        assert [g["meta"]["_topics_router"]["src_seq"] for g in got] == [1, 2, 3]
        assert got[0]["meta"]["_topics_router"]["router"] == "s->d"
        # WHEN the cursor is lost (a crash between the dest append and the cursor write)
        assert r.store.advance("s->d", 3, 1, 0)
        await r.log.append("s", AppendRequest([_rec(4)]))
        await _drain(r)
        # THEN the replay only adds the new record
        got = await _read(r, "d")
        assert [g["data"]["i"] for g in got] == [1, 2, 3, 4]
        assert (await r.get("s->d")).cursor == 4
        r.log.close()

    asyncio.run(scenario())


def test_exactly_once_forwarders_racing_from_one_cursor_copy_each_record_once(
    moto: None, resource_prefix: str
) -> None:
    """A lease that lapsed mid-batch (a slow storage write) lets a second forwarder start
    from the same cursor as the first, reading a longer batch; both dest appends race, and
    neither has yet seen the other's copies in the dest tail."""

    async def scenario() -> None:
        r = _routers(Settings(resource_prefix=resource_prefix))
        await r.log.put_topic("s", {})
        await r.put(RouterItem("s->d", "s", "d", guarantee="exactly_once"))
        await r.log.append("s", AppendRequest([_rec(i) for i in range(1, 3)]))
        item = await r.get("s->d")
        short = await r._read_source(item)  # the first forwarder's batch: seqs 1..2
        await r.log.append("s", AppendRequest([_rec(i) for i in range(3, 6)]))
        long = await r._read_source(item)  # the second one's, read later: seqs 1..5
        # WHEN the first appends its copies, then its cursor write is lost, and the second
        # (which checked the dest before the first appended) forwards its longer batch
        original = r._already_forwarded

        async def nothing_yet(router: RouterItem) -> int:
            return 0

        assert await r._forward_batch(item, short, False) == (2, 2)
        assert r.store.advance("s->d", 2, 0, 0)  # (the cursor as the second one saw it)
        r._already_forwarded = nothing_yet  # type: ignore[method-assign]
        step = await r._forward_batch(await r.get("s->d"), long, False)
        r._already_forwarded = original  # type: ignore[method-assign]
        await _drain(r)
        # THEN every source record is in the dest exactly once, in order
        assert step == (2, 2)  # it advanced past the other's copies only
        got = await _read(r, "d")
        assert [g["meta"]["_topics_router"]["src_seq"] for g in got] == [1, 2, 3, 4, 5]
        assert (await r.get("s->d")).cursor == 5
        r.log.close()

    asyncio.run(scenario())


def test_rejecting_dest_backs_off_without_advancing(moto: None, resource_prefix: str) -> None:
    async def scenario() -> None:
        r = _routers(Settings(resource_prefix=resource_prefix))
        await r.log.put_topic("s", {})
        await r.log.put_topic("d", {"cap_records": 1, "discard": "reject"})
        await r.put(RouterItem("s->d", "s", "d"))
        await r.log.append("s", AppendRequest([_rec(1)]))
        await _drain(r)
        await r.log.append("s", AppendRequest([_rec(2)]))
        await _drain(r)
        # dest full: the first record went, the second waits; the cursor did not pass it
        assert [g["data"]["i"] for g in await _read(r, "d")] == [1]
        item = await r.get("s->d")
        assert (item.cursor, item.forwarded_total) == (1, 1)
        assert "s->d" in r._backoff
        # WHEN room is made, the retry forwards it
        await r.log.delete_records("d", 2, None)
        r._backoff.clear()
        await _drain(r)
        assert [g["data"]["i"] for g in await _read(r, "d")] == [2]
        assert (await r.get("s->d")).cursor == 2
        r.log.close()

    asyncio.run(scenario())


def test_allow_cycle_pair_does_not_loop(moto: None, resource_prefix: str) -> None:
    async def scenario() -> None:
        r = _routers(Settings(resource_prefix=resource_prefix))
        await r.log.put_topic("A", {})
        await r.log.put_topic("B", {})
        await r.put(RouterItem("A->B", "A", "B", allow_cycle=True))
        await r.put(RouterItem("B->A", "B", "A", allow_cycle=True))
        await r.log.append("A", AppendRequest([_rec(1, "a")]))
        await r.log.append("B", AppendRequest([_rec(2, "b")]))
        await _drain(r)
        a = await _read(r, "A")
        b = await _read(r, "B")
        assert sorted(g["data"]["i"] for g in a) == [1, 2]
        assert sorted(g["data"]["i"] for g in b) == [1, 2]
        # a reader on A as node "a" sees only b's record: no echo
        res = await r.log.diff("A", DiffRequest(nodes=frozenset({"a"})))
        assert [json.loads(x)["$node"] for x in res.records] == ["b"]
        [from_a] = [g for g in b if g["data"]["i"] == 1]
        assert from_a["meta"]["_topics_router"]["path"] == ["A", "B"]
        # AND the hop cap: a record that has already hopped MAX_HOPS times stops here
        trail = {"router": "x", "src_seq": 1, "key": "x:1", "path": [f"t{i}" for i in range(8)]}
        await r.log.append("A", AppendRequest([NewRecord(3, meta={"_topics_router": trail})]))
        await _drain(r)
        assert 3 not in [g["data"] for g in await _read(r, "B")]
        assert (await r.get("A->B")).cursor == 3
        r.log.close()

    asyncio.run(scenario())


def test_worker_forwards_on_wakeup(moto: None, resource_prefix: str) -> None:
    async def scenario() -> None:
        r = _routers(Settings(resource_prefix=resource_prefix))
        await r.log.put_topic("s", {})
        await r.put(RouterItem("s->d", "s", "d"))
        r.ensure_running()
        try:
            await r.log.append("s", AppendRequest([_rec(1)]))
            for _ in range(200):
                if await _read(r, "d"):
                    break
                await asyncio.sleep(0.02)
            assert [g["data"]["i"] for g in await _read(r, "d")] == [1]
        finally:
            await r.stop()
            r.log.close()

    asyncio.run(scenario())


def test_only_the_lease_owner_forwards(moto: None, resource_prefix: str) -> None:
    settings = Settings(resource_prefix=resource_prefix)

    async def scenario() -> None:
        # GIVEN two forwarders over the same tables
        r1, r2 = _routers(settings), _routers(settings)
        await r1.log.put_topic("s", {})
        await r1.put(RouterItem("s->d", "s", "d"))
        await r1.log.append("s", AppendRequest([_rec(i) for i in (1, 2, 3)]))
        # WHEN the first one forwards, it takes the router's lease and keeps it
        assert await r1.run_pass()
        assert (await r1.get("s->d")).lease_owner == r1.owner
        # THEN the other stands aside while it is held, and the owner goes on
        await r1.log.append("s", AppendRequest([_rec(4), _rec(5)]))
        assert not await r2.run_pass()
        assert len(await _read(r2, "d")) == 3
        assert await r1.run_pass()
        assert [g["data"]["i"] for g in await _read(r1, "d")] == [1, 2, 3, 4, 5]
        # AND an idle pass gives the lease back (no write at all while there is no work)
        assert not await r1.run_pass()
        assert (await r1.get("s->d")).lease_owner is None
        await r1.log.append("s", AppendRequest([_rec(6)]))
        assert await r2.run_pass()
        assert (await r2.get("s->d")).lease_owner == r2.owner
        # AND stopping releases it, so nobody waits for it to lapse
        await r2.stop()
        item = await r2.get("s->d")
        assert (item.lease_owner, item.cursor, item.forwarded_total) == (None, 6, 6)
        assert [g["data"]["i"] for g in await _read(r1, "d")] == [1, 2, 3, 4, 5, 6]
        r1.log.close()
        r2.log.close()

    asyncio.run(scenario())


def test_a_lapsed_lease_is_taken_over_from_the_durable_cursor(
    moto: None, resource_prefix: str
) -> None:
    settings = Settings(resource_prefix=resource_prefix)

    async def scenario() -> None:
        # GIVEN a forwarder that took the lease and then died (never released it)
        crashed = _routers(settings)
        clock = SkewedClock()
        other = _routers(settings, clock=clock)
        await crashed.log.put_topic("s", {})
        await crashed.put(RouterItem("s->d", "s", "d", guarantee="exactly_once"))
        await crashed.log.append("s", AppendRequest([_rec(1), _rec(2)]))
        assert await crashed.run_pass()
        await other.log.append("s", AppendRequest([_rec(3)]))
        # WHEN another forwarder looks before the lease lapses, it skips the router
        assert not await other.run_pass()
        # THEN once it lapses, the other resumes from the cursor: nothing lost or repeated
        clock.skew_ms = other.lease_ms + 1_000
        assert await other.run_pass()
        got = await _read(other, "d")
        assert [g["meta"]["_topics_router"]["src_seq"] for g in got] == [1, 2, 3]
        assert (await other.get("s->d")).lease_owner == other.owner
        crashed.log.close()
        other.log.close()

    asyncio.run(scenario())


def test_a_lease_race_cannot_move_the_cursor_twice(moto: None, resource_prefix: str) -> None:
    settings = Settings(resource_prefix=resource_prefix)

    async def scenario() -> None:
        # GIVEN a stalled owner whose lease lapsed and was taken over by another forwarder
        stalled = _routers(settings, lease_ms=200)
        taker = _routers(settings, lease_ms=200)
        await stalled.log.put_topic("s", {})
        await stalled.put(RouterItem("s->d", "s", "d"))
        await stalled.log.append("s", AppendRequest([_rec(1)]))
        assert await stalled.run_pass()
        stale = await stalled.get("s->d")  # cursor 1, leased to `stalled`
        await asyncio.sleep(0.25)
        await taker.log.append("s", AppendRequest([_rec(2), _rec(3)]))
        assert await taker.run_pass()
        # WHEN the stalled one wakes up still believing it owns the lease (a clock jump)
        stalled._leases["s->d"] = stalled.log.clock() + 60_000
        done = await stalled.forward_to_head(stale, keep_lease=True)
        # THEN its cursor write fails: it stands aside, and the cursor moved exactly once
        assert done.leased_elsewhere
        item = await taker.get("s->d")
        assert (item.cursor, item.forwarded_total, item.lease_owner) == (3, 3, taker.owner)
        # (its dest append already happened: the duplicate the lease exists to prevent)
        assert [g["data"]["i"] for g in await _read(taker, "d")] == [1, 2, 3, 2, 3]
        stalled.log.close()
        taker.log.close()

    asyncio.run(scenario())


def test_stream_batch_forwards_to_the_frame_and_retries_when_out_of_time(
    moto: None, resource_prefix: str
) -> None:
    async def scenario() -> None:
        r = _routers(Settings(resource_prefix=resource_prefix))
        await r.log.put_topic("s", {})
        await r.put(RouterItem("s->d", "s", "d"))
        n = BATCH + 44
        await r.log.append("s", AppendRequest([_rec(i) for i in range(1, n + 1)]))
        # WHEN a stream record for the frame arrives with no time left after one batch
        with pytest.raises(ForwardIncomplete):
            await StreamBatch(r, deadline=time.monotonic() - 1).frame_appended("s", 1, n)
        # THEN the batch it did is durable, the lease is given back, and a retry finishes
        item = await r.get("s->d")
        assert (item.cursor, item.lease_owner) == (BATCH, None)
        [done] = await StreamBatch(r).frame_appended("s", 1, n)
        assert (done.cursor, done.copied, done.leased_elsewhere) == (n, 44, False)
        # AND a redelivery, or a frame of an older epoch, touches nothing
        assert await StreamBatch(r).frame_appended("s", 1, n) == []
        assert await StreamBatch(r).frame_appended("other", 1, 1) == []
        assert len(await _read(r, "d")) == n
        r.log.close()

    asyncio.run(scenario())


def test_stream_batch_leaves_a_frame_to_a_live_owner_and_takes_over_a_lapsed_one(
    moto: None, resource_prefix: str
) -> None:
    settings = Settings(resource_prefix=resource_prefix)

    async def scenario() -> None:
        # GIVEN a loop that holds the router's lease
        clock = SkewedClock()
        loop, stream = _routers(settings), _routers(settings, clock=clock)
        await loop.log.put_topic("s", {})
        await loop.put(RouterItem("s->d", "s", "d"))
        await loop.log.append("s", AppendRequest([_rec(1)]))
        assert await loop.run_pass()
        await loop.log.append("s", AppendRequest([_rec(2), _rec(3)]))

        # WHEN a stream record for the new frame arrives while the owner is at work
        async def owner_works() -> None:
            await asyncio.sleep(0.2)
            assert await loop.run_pass()

        working = asyncio.ensure_future(owner_works())
        [done] = await StreamBatch(stream, lease_wait_s=30).frame_appended("s", 1, 3)
        await working
        # THEN the stream forwarder left it to the owner (seen renewing, or already past
        # the frame), which forwarded it once
        assert done.leased_elsewhere and done.copied == 0
        assert (await stream.get("s->d")).cursor == 3
        assert [g["data"]["i"] for g in await _read(stream, "d")] == [1, 2, 3]

        # WHEN the owner then freezes holding the lease (no idle pass gives it back), and the
        # lease lapses while the stream forwarder watches
        await loop.log.append("s", AppendRequest([_rec(4)]))
        assert (await stream.get("s->d")).lease_owner == loop.owner

        async def lease_lapses() -> None:
            await asyncio.sleep(0.3)
            clock.skew_ms = loop.lease_ms + 1_000

        lapsing = asyncio.ensure_future(lease_lapses())
        [done] = await StreamBatch(stream, lease_wait_s=30).frame_appended("s", 1, 4)
        await lapsing
        # THEN the stream forwarder takes over: the frame is not stuck
        assert (done.leased_elsewhere, done.cursor, done.copied) == (False, 4, 1)
        assert [g["data"]["i"] for g in await _read(stream, "d")] == [1, 2, 3, 4]
        loop.log.close()
        stream.log.close()

    asyncio.run(scenario())
