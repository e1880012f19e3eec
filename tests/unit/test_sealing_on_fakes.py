"""Sealing (engine/tiering.py, Upkeep._seal) on the in-memory fakes: a seal reads one
segment's worth of the tail, not the whole unsealed tail. With 1 MiB appends each frame is
an S3 object read back and decoded, so reading past the segment's byte budget cost a
GetObject and a decode per frame for every segment sealed (bench_durable's sustained 1 MiB
appends: 0.80 GetObject and 10.8 ms of server CPU per append, 0.16 and 5.7 after)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from headwater.engine import tiering
from headwater.engine.records import NewRecord
from headwater.engine.values import AppendRequest
from headwater.settings import Settings, Tiering
from tests.fakes.processes import ManualClock, processes

pytestmark = pytest.mark.unit

TOPIC = "uploads"
SIZE = 1000  # payload bytes per record (one record per frame)
PER_SEGMENT = 3


def test_a_seal_reads_one_segments_worth_of_frames(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tiering, "SEGMENT_MAX_BYTES", PER_SEGMENT * SIZE)
    settings = Settings(tiering=Tiering(inline=False, interval_ms=0, seal_records=1))

    async def scenario() -> None:
        async with processes(1, ManualClock(), settings=settings) as (p,):
            # GIVEN twelve frames of one record each, unsealed
            for i in range(12):
                await p.engine.append(
                    TOPIC, AppendRequest([NewRecord(data={"i": i, "pad": "x" * 990}, size=SIZE)])
                )
            fetched: list[int] = []
            read_frames = p.stores.tail.read_frames

            def counting(*args: Any, **kwargs: Any) -> Any:
                frames = read_frames(*args, **kwargs)
                fetched.append(len(frames))
                return frames

            monkeypatch.setattr(p.stores.tail, "read_frames", counting)
            # WHEN upkeep seals them
            await p.run_upkeep(TOPIC)
            # THEN four segments of three frames each hold them...
            head = await p.engine.head_of(TOPIC)
            assert head is not None and head.sealed_through == 12
            segments = p.stores.segments.after(head, 0, 100)
            assert [(s.first_seq, s.last_seq) for s in segments] == [
                (1, 3),
                (4, 6),
                (7, 9),
                (10, 12),
            ]
            # ...and each seal fetched its segment's frames, at most one more (the frame that
            # crosses the budget), never the rest of the tail
            assert len(fetched) == 4 and all(n <= PER_SEGMENT + 1 for n in fetched), fetched
            # the records read back are the ones appended
            got = await p.history(TOPIC)
            assert [r.data["i"] for r in got] == list(range(12))

    asyncio.run(scenario())


def test_a_seal_takes_this_process_s_spilled_frames_from_its_cache(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Spilled frames (one S3 object each) that this process appended are sealed from its
    frame cache, not fetched again; a process that never held them (the scheduled sealer)
    fetches each one."""
    settings = Settings(
        spill_threshold_bytes=512, tiering=Tiering(inline=False, interval_ms=0, seal_records=1)
    )

    async def scenario() -> None:
        async with processes(2, ManualClock(), settings=settings) as (writer, sealer):
            for topic in ("mine", "theirs"):
                for i in range(6):
                    record = NewRecord(data={"i": i, "pad": "x" * 990}, size=SIZE)
                    await writer.engine.append(topic, AppendRequest([record]))
            fetched: dict[str, list[str]] = {"writer": [], "sealer": []}
            for name, p in (("writer", writer), ("sealer", sealer)):
                get = p.stores.blobs.get

                def counting(key: str, _get: Any = get, _name: str = name) -> bytes:
                    fetched[_name].append(key)
                    return _get(key)

                monkeypatch.setattr(p.stores.blobs, "get", counting)
            # WHEN the writer seals one topic and another process the other
            await writer.run_upkeep("mine")
            await sealer.run_upkeep("theirs")
            spilled = {
                n: [k for k in keys if k.startswith("spill/")] for n, keys in fetched.items()
            }
            # THEN the writer fetched none of its spilled frames, the other process all six
            assert spilled["writer"] == []
            assert len(spilled["sealer"]) == 6, spilled
            # ...and both topics are sealed whole, with the records appended
            for p, topic in ((writer, "mine"), (sealer, "theirs")):
                head = await p.engine.head_of(topic)
                assert head is not None and head.sealed_through == 6
                got = await sealer.history(topic)
                assert [r.data["i"] for r in got] == list(range(6))

    asyncio.run(scenario())


@pytest.mark.parametrize("limit", [1, 2])
def test_a_process_builds_at_most_seal_concurrency_segments_at_once(
    monkeypatch: pytest.MonkeyPatch, limit: int
) -> None:
    """Under steady load every busy topic reaches its seal threshold at about the same time;
    each segment is a few MB of records and buffers on a pool thread, and the soak (issue 42)
    saw four built at once add ~100 MB of RSS for seconds. Topics sealed together take turns
    (Tiering.seal_concurrency), and each is still sealed."""
    settings = Settings(
        tiering=Tiering(inline=False, interval_ms=0, seal_records=1, seal_concurrency=limit)
    )
    topics = [f"busy-{i}" for i in range(4)]

    async def scenario() -> None:
        async with processes(1, ManualClock(), settings=settings) as (p,):
            # GIVEN four topics with unsealed records
            for t in topics:
                for i in range(3):
                    await p.engine.append(t, AppendRequest([NewRecord(data={"i": i}, size=8)]))
            in_flight = peak = 0
            gate = threading.Lock()
            put = p.stores.blobs.put

            def slow_put(*args: Any, **kwargs: Any) -> Any:
                nonlocal in_flight, peak
                with gate:
                    in_flight += 1
                    peak = max(peak, in_flight)
                try:
                    time.sleep(0.05)  # a segment's PUT takes a while: the others overlap it
                    return put(*args, **kwargs)
                finally:
                    with gate:
                        in_flight -= 1

            monkeypatch.setattr(p.stores.blobs, "put", slow_put)
            # WHEN their upkeep runs at once, each on its own thread
            await asyncio.gather(*(asyncio.to_thread(p.upkeep.run, t) for t in topics))
            # THEN at most `limit` segments were being written at any moment...
            assert 1 <= peak <= limit
            # ...and every topic was sealed in full
            for t in topics:
                head = await p.engine.head_of(t)
                assert head is not None and head.sealed_through == 3
                assert [r.data["i"] for r in await p.history(t)] == [0, 1, 2]

    asyncio.run(scenario())
