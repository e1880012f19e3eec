"""The SSE lifecycle of /api/v1/watch and /api/v1/replay, frame for frame as aviso-server
sends it (event names, control payloads, close reasons, `YYYY-MM-DDTHH:MM:SSZ` stamps).

    watch, live only:      live-notification {type: connection_established}, heartbeat,
                           live-notification (CloudEvents)…, heartbeats…,
                           connection-closing {max_duration_reached | server_shutdown}
    watch from id/date:    replay-control {type: replay_started}, heartbeat, replay…,
                           replay-control {type: replay_completed}, live-notification…,
                           connection-closing
    replay:                replay-control {replay_started}, replay…, replay-control
                           {replay_completed}, connection-closing {end_of_stream}

Control objects carry their keys in sorted order, as aviso's serde_json maps do. The first
heartbeat follows the opening frame at once (aviso's interval ticks immediately), then one
per interval. A watch ends at its maximum duration; any stream ends with `server_shutdown`
when the server stops. Unlike aviso, a watch that replays first hands over to live delivery
at the exact seq where the replay ended: no notification is both replayed and delivered
live, and none falls between. `max_historical_notifications` caps the notifications one
replay delivers in total; at the cap the stream says `notification_replay_limit_reached`
and a watch continues live from the newest notification stored at that moment.

A storage failure mid-stream sends an `error` frame (`stream_processing_failed`) and then
closes with `end_of_stream`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from headwater.engine.ports import Head
from headwater.errors import HeadwaterError
from headwater.notify.store import NotificationStore, Stored
from headwater.settings import StreamSettings as StreamSettings  # aviso's names; re-exported

log = logging.getLogger(__name__)

LIVE = "live-notification"
REPLAY = "replay"
CONTROL = "replay-control"
HEARTBEAT = "heartbeat"
CLOSING = "connection-closing"
ERROR = "error"

CLOSE_MESSAGES = {
    "server_shutdown": "Server is shutting down gracefully",
    "max_duration_reached": "Connection reached maximum duration",
    "end_of_stream": "Stream completed",
}
LIVE_WAIT_S = 20.0  # one engine wait; the loop re-checks shutdown and deadlines between
QUEUE_FRAMES = 64


@dataclass(frozen=True, slots=True)
class StartAt:
    """Where delivery starts: a seq (inclusive), an instant (ms), or neither (live only)."""

    seq: int | None = None
    date_ms: int | None = None

    @property
    def live_only(self) -> bool:
        return self.seq is None and self.date_ms is None


def stamp(ms: int | float | None = None) -> str:
    """`YYYY-MM-DDTHH:MM:SSZ`, UTC, whole seconds."""
    at = datetime.now(UTC) if ms is None else datetime.fromtimestamp(ms / 1000, UTC)
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def sse(event: str, data: bytes) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + data + b"\n\n"


def _obj(event: str, body: dict[str, Any]) -> bytes:
    return sse(event, orjson.dumps(body, option=orjson.OPT_SORT_KEYS))


def connection_established(topic: str, will_close_s: int, request_id: str) -> bytes:
    return _obj(
        LIVE,
        {
            "type": "connection_established",
            "topic": topic,
            "timestamp": stamp(),
            "connection_will_close_in_seconds": will_close_s,
            "request_id": request_id,
        },
    )


def replay_started(topic: str, start: StartAt, batch_size: int, request_id: str) -> bytes:
    return _obj(
        CONTROL,
        {
            "type": "replay_started",
            "topic": topic,
            "from_sequence": start.seq,
            "from_date": stamp(start.date_ms) if start.date_ms is not None else None,
            "batch_size": batch_size,
            "timestamp": stamp(),
            "request_id": request_id,
        },
    )


def replay_completed(topic: str) -> bytes:
    return _obj(CONTROL, {"type": "replay_completed", "topic": topic, "timestamp": stamp()})


def replay_limit_reached(topic: str, max_allowed: int) -> bytes:
    return _obj(
        CONTROL,
        {
            "type": "notification_replay_limit_reached",
            "topic": topic,
            "max_allowed": max_allowed,
            "message": (
                f"Historical replay limited to {max_allowed} messages. Additional historical"
                " messages may be available but were not retrieved."
            ),
            "timestamp": stamp(),
        },
    )


def heartbeat(topic: str) -> bytes:
    return _obj(HEARTBEAT, {"timestamp": stamp(), "topic": topic})


def stream_error(topic: str, message: str, request_id: str) -> bytes:
    return _obj(
        ERROR,
        {
            "error": "stream_processing_failed",
            "message": message,
            "topic": topic,
            "request_id": request_id,
        },
    )


def closing(topic: str, reason: str, request_id: str) -> bytes:
    return _obj(
        CLOSING,
        {
            "reason": reason,
            "timestamp": stamp(),
            "message": CLOSE_MESSAGES[reason],
            "topic": topic,
            "request_id": request_id,
        },
    )


Render = Callable[[Stored], bytes]  # a notification's CloudEvent JSON
Match = Callable[[Stored], bool]


class _EndOfStream(Exception):
    pass


class NotificationStream:
    """One watch or replay connection: `frames()` yields its SSE frames in order."""

    def __init__(
        self,
        store: NotificationStore,
        event_type: str,
        topic: str,
        start: StartAt,
        match: Match,
        render: Render,
        settings: StreamSettings,
        shutdown: asyncio.Event,
        request_id: str,
        *,
        replay_only: bool,
    ) -> None:
        self.store = store
        self.event_type = event_type
        self.topic = topic
        self.start = start
        self.match = match
        self.render = render
        self.settings = settings
        self.shutdown = shutdown
        self.request_id = request_id
        self.replay_only = replay_only

    async def frames(self) -> AsyncGenerator[bytes, None]:
        s = self.settings
        loop = asyncio.get_running_loop()
        start: Head | HeadwaterError | None = None
        if self.start.live_only:
            # "Live from now" starts at the head read before the client is told the stream is
            # established: a notification it sends once told is delivered, however long the
            # read takes
            try:
                start = await self.store.head(self.event_type)
            except HeadwaterError as exc:
                start = exc  # reported as the stream's first event, as below
            yield connection_established(
                self.topic, int(s.connection_max_duration_sec), self.request_id
            )
        else:
            yield replay_started(self.topic, self.start, s.replay_batch_size, self.request_id)
        if self.shutdown.is_set():
            yield closing(self.topic, "server_shutdown", self.request_id)
            return
        deadline = None if self.replay_only else loop.time() + s.connection_max_duration_sec
        beat = None if self.replay_only else s.sse_heartbeat_interval_sec
        queue: asyncio.Queue[bytes | None] = asyncio.Queue(QUEUE_FRAMES)
        producer = asyncio.create_task(self._produce(queue, start))
        stop = asyncio.create_task(self.shutdown.wait())
        next_beat = loop.time() if beat is not None else None
        reason = "end_of_stream"
        get: asyncio.Future[bytes | None] | None = None
        try:
            while True:
                now = loop.time()
                if deadline is not None and now >= deadline:
                    reason = "max_duration_reached"
                    break
                if next_beat is not None and now >= next_beat:
                    yield heartbeat(self.topic)
                    assert beat is not None
                    next_beat = now + beat
                    continue
                until = [t for t in (deadline, next_beat) if t is not None]
                timeout = max(0.0, min(until) - now) if until else None
                if get is None:
                    get = asyncio.ensure_future(queue.get())
                waiting: set[asyncio.Future[Any]] = {get, stop}
                done, _ = await asyncio.wait(
                    waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                if get in done:
                    frame, get = get.result(), None
                    if frame is None:
                        break
                    yield frame
                if stop.done():
                    reason = "server_shutdown"
                    break
        finally:
            for task in (producer, stop, get):
                if task is not None:
                    task.cancel()
            for task in (producer, stop, get):
                if task is not None:
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
        yield closing(self.topic, reason, self.request_id)

    async def _produce(
        self, queue: asyncio.Queue[bytes | None], start: Head | HeadwaterError | None
    ) -> None:
        try:
            if self.start.live_only:
                if isinstance(start, HeadwaterError):
                    raise start
                head = start
                after = head.head_seq if head is not None else 0
            else:
                head = await self.store.head(self.event_type)
                after, head = await self._replay(queue, head)
                await queue.put(replay_completed(self.topic))
                if self.replay_only:
                    return
            await self._live(queue, head, after)
        except HeadwaterError as exc:
            log.warning("notification stream of %s failed", self.event_type, exc_info=True)
            await queue.put(stream_error(self.topic, exc.message, self.request_id))
        finally:
            with contextlib.suppress(asyncio.CancelledError):
                await queue.put(None)

    async def _replay(
        self, queue: asyncio.Queue[bytes | None], head: Head | None
    ) -> tuple[int, Head | None]:
        """Deliver history from the start point to the newest notification: (the seq live
        delivery continues after, the head it read last)."""
        s = self.settings
        if self.start.seq is not None:
            after = max(self.start.seq - 1, 0)
        elif head is not None and self.start.date_ms is not None:
            after = await self.store.seq_before(head, self.start.date_ms)
        else:
            after = 0
        sent = 0
        while head is not None and after < head.head_seq:
            batch = await self.store.batch(self.event_type, after, s.replay_batch_size, head)
            # One queue item per batch (the frames joined): per-frame queue hops would cost
            # more than rendering the frames.
            parts: list[bytes] = []
            for n in batch.notifications:
                if not self.match(n):
                    continue
                cap = s.max_historical_notifications
                if sent >= cap:
                    if parts:
                        await queue.put(b"".join(parts))
                    await queue.put(replay_limit_reached(self.topic, cap))
                    head = await self.store.head(self.event_type)
                    return (head.head_seq if head is not None else after), head
                parts.append(sse(REPLAY, self.render(n)))
                sent += 1
            if parts:
                await queue.put(b"".join(parts))
            if batch.next_after <= after:
                break
            after = batch.next_after
            if after >= head.head_seq:
                # caught up with the head read last: has more been stored since?
                head = await self.store.head(self.event_type)
            if head is not None and after < head.head_seq and s.replay_batch_delay_ms > 0:
                await asyncio.sleep(s.replay_batch_delay_ms / 1000)
        return after, head

    async def _live(
        self, queue: asyncio.Queue[bytes | None], head: Head | None, after: int
    ) -> None:
        limit = self.settings.replay_batch_size
        while True:
            if head is None:
                head = await self.store.wait_first(self.event_type, LIVE_WAIT_S)
                continue
            if after < head.head_seq:
                batch = await self.store.batch(self.event_type, after, limit, head)
                parts = [sse(LIVE, self.render(n)) for n in batch.notifications if self.match(n)]
                if parts:
                    await queue.put(b"".join(parts))
                after = max(after, batch.next_after)
                if after < head.head_seq:
                    continue
            moved = await self.store.wait(head, LIVE_WAIT_S)
            if moved is not None:
                head = moved
            elif (fresh := await self.store.head(self.event_type)) is None or (
                fresh.epoch != head.epoch
            ):
                # Wiped (and maybe written again): live delivery starts over at its start.
                head, after = fresh, 0
            else:
                head = fresh
