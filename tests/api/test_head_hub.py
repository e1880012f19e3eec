"""The per-process HeadHub and KnownHeads (engine/heads.py): live readers learn of another
process's appends from one shared poll, and read from the head the process knows instead
of a strongly consistent GetItem per wake-up. Two LogEngines over one moto stand in for two
processes."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections import Counter
from typing import Any

import pytest
from api_helpers import counting_engine

from headwater.engine.log import LogEngine
from headwater.engine.records import NewRecord
from headwater.engine.values import AppendRequest, DiffRequest
from headwater.engine.watch import TopicFeed
from headwater.engine.watch_values import WatchEvent, WatchSpec
from headwater.settings import Settings
from headwater.storage.schema import HEADS

pytestmark = pytest.mark.api


def _append(engine: LogEngine, topic: str, *values: int) -> Any:
    return engine.append(topic, AppendRequest([NewRecord(v, size=8) for v in values]))


async def _next_record(events: Any, timeout: float = 10.0) -> WatchEvent:
    while True:
        event: WatchEvent = await asyncio.wait_for(events.__anext__(), timeout)
        if event.name == "record":
            return event


def test_many_readers_of_one_topic_share_one_poll_and_read_no_heads(
    moto: None, resource_prefix: str
) -> None:
    settings = Settings(resource_prefix=resource_prefix, poll_interval_ms=50)
    writer_calls: Counter[str] = Counter()
    reader_calls: Counter[str] = Counter()
    writer = counting_engine(settings, writer_calls)  # "process A"
    reader = counting_engine(settings, reader_calls)  # "process B"
    spec = WatchSpec(topics=())

    async def scenario() -> tuple[list[list[int]], int]:
        await _append(writer, "hub", 1)
        feeds = [TopicFeed(reader) for _ in range(20)]
        for f in feeds:
            f.subscribe("hub", 0, 1, spec)
        streams = [f.run() for f in feeds]
        firsts = await asyncio.gather(*(_next_record(s) for s in streams))
        # Every reader has caught up; from here on only the shared poll runs.
        await asyncio.sleep(0.3)
        reader_calls.clear()
        polls_before = reader.hub.polls
        await _append(writer, "hub", 2)
        seconds = await asyncio.gather(*(_next_record(s) for s in streams))
        polls = reader.hub.polls - polls_before
        for s in streams:
            await s.aclose()
        for f in feeds:
            f.close()
        seqs = [
            [r["$seq"] for r in _records(a)] + [r["$seq"] for r in _records(b)]
            for a, b in zip(firsts, seconds, strict=True)
        ]
        return seqs, polls

    seqs, polls = asyncio.run(scenario())
    assert seqs == [[1, 2]] * 20
    # 20 readers, one topic: the hub's polls (one BatchGetItem of the heads table each) are
    # the only head reads; none of the 20 wake-ups did a GetItem of the head. (Reading the new
    # record may be a BatchGetItem too, of the log table: a short span is read by key.)
    heads = settings.table_name(HEADS.logical)
    assert reader_calls[f"GetItem@{heads}"] == 0, reader_calls
    # (A poll counts itself before its call returns: one may straddle either end of the
    # measured window.)
    assert abs(reader_calls[f"BatchGetItem@{heads}"] - polls) <= 1, (reader_calls, polls)
    assert polls <= 20  # bounded by time (50 ms polls), not by the number of readers
    writer.close()
    reader.close()


def _records(event: WatchEvent) -> list[dict[str, Any]]:
    body: dict[str, Any] = json.loads(event.data)
    records: list[dict[str, Any]] = body["records"]
    return records


def test_eventual_diff_uses_the_known_head_only_for_watched_topics(
    moto: None, resource_prefix: str
) -> None:
    settings = Settings(resource_prefix=resource_prefix)
    calls: Counter[str] = Counter()
    engine = counting_engine(settings, calls)
    head_reads = f"GetItem@{settings.table_name(HEADS.logical)}"

    async def scenario() -> None:
        await _append(engine, "k", 1, 2, 3)  # the commit records the new head
        engine.hub.watch("k")  # a live reader in this process: the hub confirms the head
        calls.clear()
        res = await engine.diff("k", DiffRequest(consistency="eventual"))
        assert len(res.records) == 3 and calls[head_reads] == 0, calls
        res = await engine.diff("k", DiffRequest())  # strong (the HTTP diff's default)
        assert len(res.records) == 3 and calls[head_reads] == 1, calls
        # A one-shot reader of an unwatched topic (the stream-triggered Lambda) reads the
        # head strongly even when it asks for eventual: it was woken because data is new.
        engine.hub.unwatch("k")
        res = await engine.diff("k", DiffRequest(consistency="eventual"))
        assert len(res.records) == 3 and calls[head_reads] == 2, calls
        engine.hub.stop()

    asyncio.run(scenario())
    engine.close()


def test_a_deletion_elsewhere_reaches_an_eventual_reader_through_the_hub(
    moto: None, resource_prefix: str
) -> None:
    settings = Settings(resource_prefix=resource_prefix, poll_interval_ms=50)
    a = counting_engine(settings, Counter())
    b = counting_engine(settings, Counter())
    spec = dataclasses.replace(WatchSpec(topics=()), consistency="eventual")

    async def scenario() -> list[str]:
        await _append(a, "gone", 1)
        feed = TopicFeed(b)
        feed.subscribe("gone", 0, 1, spec)
        events = feed.run()
        names: list[str] = []
        while "caught-up" not in names:
            names.append((await asyncio.wait_for(events.__anext__(), 10)).name)
        await a.delete_topic("gone", if_empty=False)
        while names[-1] != "topic-deleted":
            names.append((await asyncio.wait_for(events.__anext__(), 10)).name)
        await events.aclose()
        feed.close()
        return names

    assert asyncio.run(scenario()) == ["record", "caught-up", "topic-deleted"]
    a.close()
    b.close()
