"""Notification storage on the engine and the watch/replay SSE lifecycle (headwater.notify
store + stream), driven directly against moto: frame order, start points, the replay→live
handover, the replay cap, heartbeats, maximum duration, shutdown and storage failures."""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest
from api_helpers import counting_engine

from headwater.engine.log import LogEngine
from headwater.errors import StorageUnavailable
from headwater.notify.store import NotificationStore, Stored
from headwater.notify.stream import NotificationStream, StartAt, StreamSettings, stamp
from headwater.settings import Settings

STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
ET = "mars"


def render(n: Stored) -> bytes:
    return orjson.dumps({"id": f"{n.event_type}@{n.seq}", "payload": orjson.loads(n.payload_raw)})


def everything(n: Stored) -> bool:
    return True


def parse(chunks: list[bytes]) -> list[tuple[str, dict[str, Any]]]:
    """The SSE frames of a stream's items (an item holds one frame or several joined)."""
    out = []
    for chunk in chunks:
        assert chunk.endswith(b"\n\n"), chunk
        for f in chunk[:-2].split(b"\n\n"):
            lines = f.split(b"\n")
            assert len(lines) == 2, f
            assert lines[0].startswith(b"event: ") and lines[1].startswith(b"data: "), f
            out.append((lines[0][7:].decode(), orjson.loads(lines[1][6:])))
    return out


@pytest.fixture
def engine(settings: Settings) -> LogEngine:
    built: LogEngine = counting_engine(settings, Counter())
    return built


def make(
    store: NotificationStore,
    start: StartAt,
    *,
    replay_only: bool,
    match: Callable[[Stored], bool] = everything,
    shutdown: asyncio.Event | None = None,
    **cfg: Any,
) -> NotificationStream:
    s = StreamSettings(**{"replay_batch_delay_ms": 0, **cfg})
    return NotificationStream(
        store,
        ET,
        "mars.od.*",
        start,
        match,
        render,
        s,
        shutdown or asyncio.Event(),
        "req-1",
        replay_only=replay_only,
    )


async def collect(it: AsyncIterator[bytes], until: Callable[[list[bytes]], bool]) -> list[bytes]:
    out: list[bytes] = []
    async for f in it:
        out.append(f)
        if until(out):
            break
    return out


async def publish(store: NotificationStore, n: int, k: str = "a") -> list[Stored]:
    return [
        await store.publish(ET, f"mars.od.{i}", {"k": k, "i": str(i)}, orjson.dumps({"n": i}))
        for i in range(n)
    ]


def test_publish_keeps_identifier_and_payload_bytes_and_orders_seqs(engine: LogEngine) -> None:
    async def run() -> None:
        store = NotificationStore(engine)
        raw = b'{"b": 1,  "a": [1.50, "x"]}'  # not canonical JSON: must come back as sent
        first = await store.publish(ET, "mars.od.1", {"k": "a"}, raw)
        second = await store.publish(ET, "mars.od.2", {"k": "b"}, None)
        assert (first.seq, second.seq) == (1, 2)
        assert second.ts_ms >= first.ts_ms > 0
        head = await store.head(ET)
        assert head is not None
        batch = await store.batch(ET, 0, 10, head)
        got = [(n.seq, n.topic, n.identifier, n.payload_raw) for n in batch.notifications]
        assert got == [(1, "mars.od.1", {"k": "a"}, raw), (2, "mars.od.2", {"k": "b"}, b"null")]
        assert batch.next_after == 2 and batch.head_seq == 2
        assert await store.head("other") is None
        assert await store.event_types() == [ET]

    asyncio.run(run())


def test_publish_many_appends_one_batch_readable_like_single_publishes(engine: LogEngine) -> None:
    async def run() -> None:
        store = NotificationStore(engine)
        await store.publish(ET, "mars.od.0", {"k": "a"}, None)
        items = [(f"mars.od.{i}", {"k": "b", "i": str(i)}, b'{"n": %d}' % i) for i in range(5)]
        items[2] = ("mars.od.2", {"k": "b", "i": "2"}, None)
        assert await store.publish_many(ET, items) == (2, 6)
        head = await store.head(ET)
        assert head is not None
        batch = await store.batch(ET, 1, 10, head)
        got = [(n.seq, n.topic, n.identifier, n.payload_raw) for n in batch.notifications]
        want = [
            (2 + i, t, ident, b"null" if raw is None else raw)
            for i, (t, ident, raw) in enumerate(items)
        ]
        assert got == want
        assert len({n.ts_ms for n in batch.notifications}) == 1  # one append, one time
        with pytest.raises(ValueError):
            await store.publish_many(ET, [])

    asyncio.run(run())


def test_replay_frames_in_order_and_filtered(engine: LogEngine) -> None:
    async def run() -> None:
        store = NotificationStore(engine)
        await publish(store, 3, "a")
        await publish(store, 2, "b")
        stream = make(
            store,
            StartAt(seq=2),
            replay_only=True,
            match=lambda n: n.identifier["k"] == "a",
            replay_batch_size=2,  # several batches
        )
        frames = parse([f async for f in stream.frames()])
        names = [e for e, _ in frames]
        assert names == [
            "replay-control",
            "replay",
            "replay",
            "replay-control",
            "connection-closing",
        ]
        started, completed, closing = frames[0][1], frames[3][1], frames[4][1]
        assert started["type"] == "replay_started" and started["from_sequence"] == 2
        assert started["from_date"] is None and started["batch_size"] == 2
        assert started["request_id"] == "req-1" and STAMP.match(started["timestamp"])
        assert [d["id"] for _, d in frames[1:3]] == ["mars@2", "mars@3"]  # from_id inclusive
        assert completed["type"] == "replay_completed" and STAMP.match(completed["timestamp"])
        assert closing["reason"] == "end_of_stream" and closing["message"] == "Stream completed"
        # Control payloads carry sorted keys, as aviso's serde_json maps do.
        all_frames = [f async for f in make(store, StartAt(seq=1), replay_only=True).frames()]
        raw = all_frames[0]
        body = raw.split(b"data: ", 1)[1].strip()
        assert list(orjson.loads(body)) == sorted(orjson.loads(body))

    asyncio.run(run())


def test_replay_from_date_starts_at_the_first_notification_stored_at_or_after(
    engine: LogEngine,
) -> None:
    async def run() -> None:
        clock = iter(range(1_000_000, 2_000_000, 1000))
        engine.clock = lambda: next(clock)  # each append one second after the last
        store = NotificationStore(engine)
        stored = await publish(store, 4)
        at = stored[2].ts_ms
        frames = parse(
            [f async for f in make(store, StartAt(date_ms=at), replay_only=True).frames()]
        )
        assert frames[0][1]["from_date"] == stamp(at)
        assert [d["id"] for e, d in frames if e == "replay"] == ["mars@3", "mars@4"]
        later = StartAt(date_ms=stored[-1].ts_ms + 1)
        frames = parse([f async for f in make(store, later, replay_only=True).frames()])
        assert [e for e, _ in frames] == ["replay-control", "replay-control", "connection-closing"]

    asyncio.run(run())


def test_replay_of_an_event_type_with_no_history(engine: LogEngine) -> None:
    async def run() -> None:
        store = NotificationStore(engine)
        frames = parse([f async for f in make(store, StartAt(seq=1), replay_only=True).frames()])
        assert [d.get("type", d.get("reason")) for _, d in frames] == [
            "replay_started",
            "replay_completed",
            "end_of_stream",
        ]

    asyncio.run(run())


def test_replay_cap_sends_the_limit_frame_and_stops(engine: LogEngine) -> None:
    async def run() -> None:
        store = NotificationStore(engine)
        await publish(store, 5)
        stream = make(store, StartAt(seq=1), replay_only=True, max_historical_notifications=3)
        frames = parse([f async for f in stream.frames()])
        assert [e for e, _ in frames] == ["replay-control"] + ["replay"] * 3 + [
            "replay-control",
            "replay-control",
            "connection-closing",
        ]
        limit = frames[4][1]
        assert limit["type"] == "notification_replay_limit_reached" and limit["max_allowed"] == 3
        assert "limited to 3 messages" in limit["message"]

    asyncio.run(run())


def test_live_watch_lifecycle_heartbeats_and_max_duration(engine: LogEngine) -> None:
    async def run() -> None:
        store = NotificationStore(engine)
        await publish(store, 2)  # history: a live-only watch must not send it
        stream = make(
            store,
            StartAt(),
            replay_only=False,
            sse_heartbeat_interval_sec=0.2,
            connection_max_duration_sec=1.0,
        )
        frames: list[bytes] = []

        async def read() -> None:
            async for f in stream.frames():
                frames.append(f)

        reader = asyncio.create_task(read())
        await asyncio.sleep(0.3)
        await store.publish(ET, "mars.od.new", {"k": "a"}, b'{"live":true}')
        await asyncio.wait_for(reader, 5)
        parsed = parse(frames)
        names = [e for e, _ in parsed]
        assert names[0] == "live-notification" and parsed[0][1]["type"] == "connection_established"
        assert parsed[0][1]["connection_will_close_in_seconds"] == 1
        assert names[1] == "heartbeat"  # the first heartbeat goes out at once
        assert names.count("heartbeat") >= 4  # every 0.2 s over ~1 s
        live = [d for e, d in parsed if e == "live-notification" and "id" in d]
        assert [d["id"] for d in live] == ["mars@3"]
        assert names[-1] == "connection-closing"
        assert parsed[-1][1]["reason"] == "max_duration_reached"
        assert all(STAMP.match(d["timestamp"]) for e, d in parsed if e == "heartbeat")

    asyncio.run(run())


def test_watch_from_id_hands_over_to_live_without_gap_or_duplicate(engine: LogEngine) -> None:
    async def run() -> None:
        store = NotificationStore(engine)
        await publish(store, 30)
        stream = make(
            store,
            StartAt(seq=1),
            replay_only=False,
            replay_batch_size=7,
            replay_batch_delay_ms=20,  # leave room for writes during the replay
            sse_heartbeat_interval_sec=60,
        )
        frames: list[bytes] = []
        completed = asyncio.Event()
        done = asyncio.Event()

        async def read() -> None:
            async for f in stream.frames():
                frames.append(f)
                if b"replay_completed" in f:
                    completed.set()
                if sum(x.count(b'"id"') for x in frames) >= 55:
                    done.set()
                    return

        reader = asyncio.create_task(read())
        for i in range(20):  # while the replay runs
            await store.publish(ET, f"mars.od.x{i}", {"k": "a"}, b"{}")
            await asyncio.sleep(0.01)
        await asyncio.wait_for(completed.wait(), 10)
        for i in range(5):  # after it: live
            await store.publish(ET, f"mars.od.y{i}", {"k": "a"}, b"{}")
        await asyncio.wait_for(done.wait(), 10)
        await reader
        parsed = parse(frames)
        ids = [int(d["id"].split("@")[1]) for e, d in parsed if "id" in d]
        assert ids == list(range(1, 56))
        kinds = [e for e, d in parsed if "id" in d or d.get("type") == "replay_completed"]
        cut = kinds.index("replay-control")
        assert set(kinds[:cut]) == {"replay"}
        assert kinds[cut + 1 :] == ["live-notification"] * (55 - cut)
        assert cut >= 30  # the whole history was replayed, not delivered live

    asyncio.run(run())


def test_shutdown_closes_with_server_shutdown(engine: LogEngine) -> None:
    async def run() -> None:
        store = NotificationStore(engine)
        stop = asyncio.Event()
        stream = make(store, StartAt(), replay_only=False, shutdown=stop)
        frames: list[bytes] = []

        async def read() -> None:
            async for f in stream.frames():
                frames.append(f)

        reader = asyncio.create_task(read())
        await asyncio.sleep(0.2)
        stop.set()
        await asyncio.wait_for(reader, 5)
        parsed = parse(frames)
        assert parsed[-1][0] == "connection-closing"
        assert parsed[-1][1]["reason"] == "server_shutdown"
        assert parsed[-1][1]["message"] == "Server is shutting down gracefully"

    asyncio.run(run())


def test_storage_failure_sends_an_error_frame_then_closes(
    engine: LogEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def run() -> None:
        store = NotificationStore(engine)
        await publish(store, 3)

        async def broken(*a: Any, **k: Any) -> Any:
            raise StorageUnavailable("the log is unreachable")

        monkeypatch.setattr(store, "batch", broken)
        frames = parse([f async for f in make(store, StartAt(seq=1), replay_only=True).frames()])
        assert [e for e, _ in frames] == ["replay-control", "error", "connection-closing"]
        err = frames[1][1]
        assert err["error"] == "stream_processing_failed"
        assert err["message"] == "the log is unreachable" and err["request_id"] == "req-1"
        assert frames[-1][1]["reason"] == "end_of_stream"

    asyncio.run(run())


def test_wipe_removes_the_history_and_keeps_the_numbering(engine: LogEngine) -> None:
    async def run() -> None:
        store = NotificationStore(engine)
        await publish(store, 3)
        assert await store.wipe(ET) == 3
        head = await store.head(ET)
        assert head is not None and head.count == 0
        assert (await store.batch(ET, 0, 10, head)).notifications == []
        # seqs are never reused: a client's saved cursor still means the same notification
        again = await store.publish(ET, "t", {}, None)
        assert again.seq == 4
        assert await store.wipe(ET) == 1
        assert await store.wipe("never-written") == 0
        # one notification deleted by seq; the rest stay
        await publish(store, 3)
        assert await store.delete(ET, 6) and not await store.delete(ET, 6)
        assert not await store.delete(ET, 99) and not await store.delete("never-written", 1)
        head = await store.head(ET)
        left = await store.batch(ET, 0, 10, head)
        assert [n.seq for n in left.notifications] == [5, 7]

    asyncio.run(run())


def test_event_types_lists_every_log_across_pages(engine: LogEngine) -> None:
    async def run() -> None:
        store = NotificationStore(engine)
        for event_type in ("c", "a", "b", "d", "e"):
            await store.publish(event_type, "t", {}, None)
        assert await store.event_types(page_size=2) == ["a", "b", "c", "d", "e"]

    asyncio.run(run())
