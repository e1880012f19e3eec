"""The background sweeps of a long-running process (engine/sweeps.py): the upkeep timer and
the local indexer visit every live topic only on a full sweep; between, the topics this
process changed and those whose time rule has come due, so idle topics cost no storage call
(issue 42: ~310 idle streams kept the emulator a quarter busy)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from headwater.engine.sweeps import ChangedTopics, SweepPlan
from headwater.settings import Settings, Tiering
from tests.fakes.processes import ManualClock, Process, processes, rec, req

pytestmark = pytest.mark.unit

SEAL_AGE_MS = 600_000


class Mono:
    """A monotonic clock in seconds that moves only when told."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_plan_sweeps_in_full_first_then_only_changed_and_due_topics() -> None:
    changes = ChangedTopics()
    mono = Mono()
    plan = SweepPlan(changes.subscribe(), full_every_s=300, monotonic=mono)
    # the first sweep is a full one
    assert plan.next(now_ms=1_000) is None
    plan.visited((), {"a": 5_000, "b": 9_000})
    # nothing changed and nothing due: no topic at all
    assert plan.next(now_ms=2_000) == []
    # a write is visited at the next sweep, once
    changes.note("c")
    assert plan.next(now_ms=2_000) == ["c"]
    plan.visited(["c"], {})
    assert plan.next(now_ms=2_000) == []
    # a due time is visited once it has come, and forgotten once visited
    assert plan.next(now_ms=5_000) == ["a"]
    plan.visited(["a"], {})
    assert plan.next(now_ms=6_000) == []
    assert plan.pending == 1  # b still waits
    # a failed sweep of some topics names them again; a failed full sweep is redone
    plan.failed(["d"])
    assert plan.next(now_ms=6_000) == ["d"]
    plan.failed(None)
    assert plan.next(now_ms=6_000) is None
    # ...and after full_every_s, a full sweep whatever changed
    plan.visited((), {})
    changes.note("e")
    mono.now += 301
    assert plan.next(now_ms=7_000) is None


def test_every_subscribed_sweep_sees_every_change() -> None:
    changes = ChangedTopics()
    first, second = changes.subscribe(), changes.subscribe()
    changes.note("x")
    changes.note("y")
    assert first() == {"x", "y"}
    assert first() == set()
    changes.note("z")
    assert second() == {"x", "y", "z"}


def _count_head_reads(p: Process, calls: Counter[str]) -> None:
    heads: Any = p.stores.heads

    def counted(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return fn(*args, **kwargs)

        return call

    for name in ("get", "list_live", "get_many"):
        if hasattr(heads, name):
            setattr(heads, name, counted(name, getattr(heads, name)))


def test_the_timer_leaves_idle_topics_alone_until_written_or_due() -> None:
    """GIVEN 40 topics, one record each (none old enough to seal), and the upkeep timer's
    plan: the first sweep reads them all; then sweeps read nothing until a topic is written
    (only that one is read) or the seal age of the records passes (then each is sealed)."""
    clock = ManualClock()
    settings = Settings(
        tiering=Tiering(inline=False, interval_ms=0, seal_age_ms=SEAL_AGE_MS),
        hole_timeout_ms=50,
    )

    async def scenario() -> None:
        async with processes(1, clock, settings=settings) as (p,):
            topics = [f"idle-{i:02d}" for i in range(40)]
            for t in topics:
                await p.engine.append(t, req(rec(t=t)))
            mono = Mono()
            plan = SweepPlan(p.engine.changes.subscribe(), full_every_s=300, monotonic=mono)
            calls: Counter[str] = Counter()
            _count_head_reads(p, calls)

            def tick() -> list[Any]:
                return p.upkeep.tick(plan)

            # WHEN the first (full) sweep runs
            reports = await asyncio.to_thread(tick)
            # THEN it listed and visited every topic and sealed nothing yet
            assert calls["list_live"] >= 1
            assert sorted(r.topic for r in reports) == topics
            assert all(r.sealed == 0 for r in reports)
            # ...and each topic asked for a visit when its record is old enough to seal
            assert plan.pending == 40
            # WHEN ten more sweeps run on idle topics
            calls.clear()
            for _ in range(10):
                clock.advance(10_000)
                assert await asyncio.to_thread(tick) == []
            # THEN not one head was read
            assert sum(calls.values()) == 0, calls
            # WHEN one topic is written
            await p.engine.append("idle-07", req(rec(again=True)))
            calls.clear()
            reports = await asyncio.to_thread(tick)
            # THEN the next sweep reads that topic only, and the one after nothing
            assert [r.topic for r in reports] == ["idle-07"]
            assert calls["get"] == 1 and calls["list_live"] == 0, calls
            calls.clear()
            assert await asyncio.to_thread(tick) == []
            assert sum(calls.values()) == 0, calls
            # WHEN the seal age passes
            clock.advance(SEAL_AGE_MS)
            reports = await asyncio.to_thread(tick)
            # THEN every topic is visited without a listing, and sealed
            assert sorted(r.topic for r in reports) == topics
            assert all(r.sealed == 1 for r in reports), [r for r in reports if r.sealed != 1]
            assert calls["list_live"] == 0
            for t in topics:
                head = await p.engine.head_of(t)
                assert head is not None and head.sealed_through == head.head_seq
            # ...and then nothing is due until the grace period ends (the sealed frames'
            # trim), after which the topics want nothing more
            calls.clear()
            assert await asyncio.to_thread(tick) == []
            clock.advance(settings.tiering.grace_ms + 1)
            reports = await asyncio.to_thread(tick)
            assert sorted(r.topic for r in reports) == topics
            assert plan.pending == 0
            clock.advance(60_000)
            calls.clear()
            assert await asyncio.to_thread(tick) == []
            assert sum(calls.values()) == 0, calls
            # WHEN the full-sweep period passes, every topic is listed again
            mono.now += 301
            await asyncio.to_thread(tick)
            assert calls["list_live"] >= 1

    asyncio.run(scenario())


def test_a_sweep_that_fails_is_retried_in_full() -> None:
    clock = ManualClock()

    async def scenario() -> None:
        async with processes(1, clock) as (p,):
            await p.engine.append("t", req(rec(a=1)))
            plan = SweepPlan(p.engine.changes.subscribe(), full_every_s=300, monotonic=Mono())
            heads: Any = p.stores.heads
            real = heads.list_live

            def broken(*args: Any, **kwargs: Any) -> Any:
                raise RuntimeError("storage trouble")

            heads.list_live = broken
            with pytest.raises(RuntimeError):
                await asyncio.to_thread(p.upkeep.tick, plan)
            heads.list_live = real
            calls: Counter[str] = Counter()
            _count_head_reads(p, calls)
            reports = await asyncio.to_thread(p.upkeep.tick, plan)
            assert calls["list_live"] >= 1
            assert [r.topic for r in reports] == ["t"]

    asyncio.run(scenario())


def test_a_topic_whose_upkeep_failed_is_visited_again_next_tick() -> None:
    from headwater.errors import StorageUnavailable

    clock = ManualClock()

    async def scenario() -> None:
        async with processes(1, clock) as (p,):
            await p.engine.append("t", req(rec(a=1)))
            plan = SweepPlan(p.engine.changes.subscribe(), full_every_s=300, monotonic=Mono())
            await asyncio.to_thread(p.upkeep.tick, plan)  # the first, full sweep
            await p.engine.append("t", req(rec(a=2)))
            real = p.upkeep.run

            def failing(topic: str, head: Any = None) -> Any:
                raise StorageUnavailable("throttled")

            p.upkeep.run = failing  # type: ignore[method-assign]
            assert await asyncio.to_thread(p.upkeep.tick, plan) == []  # t failed
            p.upkeep.run = real  # type: ignore[method-assign]
            reports = await asyncio.to_thread(p.upkeep.tick, plan)
            assert [r.topic for r in reports] == ["t"]  # ...and is visited at once

    asyncio.run(scenario())


def test_an_idle_queue_whose_floor_stands_inside_a_frame_wants_no_visits() -> None:
    """A queue's acked prefix leaves the floor inside a frame that still holds a live job:
    nothing for upkeep to do, yet the frame is listed below the floor on every visit (review
    of issue 42: the timer visited such a queue every tick, forever)."""
    clock = ManualClock()

    async def scenario() -> None:
        async with processes(1, clock) as (p,):
            await p.engine.put_topic("jobs", {"type": "queue"})
            await p.engine.append("jobs", req(rec(j=1), rec(j=2)))  # one frame, seqs 1-2
            claimed = await p.queues.claim("jobs", "w1", 1, 30_000)
            await p.queues.ack("jobs", "w1", [1], [claimed.jobs[0].lease_id])
            for _ in range(200):  # the floor moves in the background
                head = await p.engine.head_of("jobs")
                if head is not None and head.earliest_seq == 2:
                    break
                await asyncio.sleep(0.01)
            assert head is not None and head.earliest_seq == 2
            plan = SweepPlan(p.engine.changes.subscribe(), full_every_s=300, monotonic=Mono())
            await asyncio.to_thread(p.upkeep.tick, plan)  # the first, full sweep visits it
            await asyncio.to_thread(p.upkeep.tick, plan)  # ...and the ack's change
            calls: Counter[str] = Counter()
            _count_head_reads(p, calls)
            # WHEN the timer ticks on, nobody touching the queue
            for _ in range(5):
                clock.advance(10_000)
                assert await asyncio.to_thread(p.upkeep.tick, plan) == []
            # THEN it reads nothing
            assert sum(calls.values()) == 0, calls
            assert plan.pending == 0

    asyncio.run(scenario())


def test_the_local_indexer_forgets_what_a_failed_pass_named_once_it_is_visited() -> None:
    from headwater.index.local import LocalIndexer

    reads: list[str] = []
    fail = [True]

    class Heads:
        def get(self, topic: str) -> None:
            if fail[0]:
                fail[0] = False
                raise RuntimeError("storage trouble")
            reads.append(topic)

        def list_live(self, *args: Any) -> list[Any]:
            return []

    class Engine:
        heads = Heads()

        @staticmethod
        def clock() -> int:
            return 0

    indexer = LocalIndexer(Engine(), None, None)  # type: ignore[arg-type]
    changes = ChangedTopics()
    plan = SweepPlan(changes.subscribe(), full_every_s=300, monotonic=Mono())
    indexer.tick(plan)  # the first, full sweep
    changes.note("~ds/a")
    # WHEN a pass over a changed stream fails
    with pytest.raises(RuntimeError):
        indexer.tick(plan)
    # THEN the next pass reads it again, and the one after reads nothing
    indexer.tick(plan)
    assert reads == ["~ds/a"]
    indexer.tick(plan)
    indexer.tick(plan)
    assert reads == ["~ds/a"]
