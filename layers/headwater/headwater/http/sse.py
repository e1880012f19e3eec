"""The server-sent-events response every stream uses (spec §7.5, §11).

- It owns its connection slot and releases it on every exit path: clean end, client gone,
  cancellation, or an exception in the producer.
- Frames pass through a bounded outbound queue (at most `queue_frames` frames and
  `buffer_bytes` bytes, `HEADWATER_STREAM_BUFFER_BYTES`, plus the frame being produced).
  While the client does not drain, the producer blocks, so the engine's next read picks
  up everything that arrived meanwhile: records coalesce into larger, fewer batches, and
  queued frames go out together (writes of at most `buffer_bytes` plus one frame; a frame
  is never split). A client that never reads therefore costs at most that much memory
  here, and no reads: the engine stops at the blocked producer.
- Slow consumers: if the producer stays blocked past `buffer_grace_ms`, the next write
  starts with an advisory `error` frame (code 429: the named topics are paced; the stream
  stays open). If one write cannot complete within `slow_consumer_timeout` (the write
  deadline: an ASGI server's send waits while the socket's buffers are full), the server
  sends a final `error` frame (code 408), waits at most FINAL_WRITE_S for it, and ends the
  stream, releasing its slot, tasks and producer; the session survives, so the client
  resumes from its cursors with Last-Event-ID. (uvicorn cannot close a socket whose
  unsent bytes never drain; headwater.http.serving aborts it.)
- A storage failure mid-stream ends the stream with a final `error` frame (code 503)
  instead of a broken connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections import deque
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from typing import Any, ClassVar, Generic, TypeVar

from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from headwater import jsoncodec
from headwater.access.limits import Slot
from headwater.errors import HeadwaterError
from headwater.settings import Caps

log = logging.getLogger(__name__)
T = TypeVar("T")

QUEUE_FRAMES = 8  # outbound frames held per connection (and at most buffer_bytes of them)
WRITE_BYTES = 16 << 10  # small frames are joined into writes of up to this many bytes
FINAL_WRITE_S = 5.0  # how long the final frame may wait for the client to read (ASGI servers
# wait for the socket to drain before they write)
SSE_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no", "Connection": "keep-alive"}


async def _cancel_all(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel and reap every task. A cancellation that lands just as an inner timeout fires
    can be lost (asyncio.wait_for on 3.11), so cancel again until each task has ended."""
    pending = {t for t in tasks if not t.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=0.5)
    for task in tasks:
        if not task.cancelled() and task.exception() is not None:
            log.debug("stream task ended with %r", task.exception())


class Outbox(Generic[T]):
    """Frames waiting for a socket, bounded by count and bytes; one producer, one consumer.
    `put` waits until the item fits (an item larger than `max_bytes` goes into an empty
    box alone), so the box holds at most `max_bytes`, or one larger item. A producer that
    awaits `room()` before it builds its next item holds at most `max_bytes` with the box,
    its items being at most half of it (issue 42: a stalled stream held three events)."""

    # Every open outbox of this process, for the memory gauges (http/probes.py)
    _open: ClassVar[weakref.WeakSet[Outbox[Any]]] = weakref.WeakSet()

    def __init__(self, max_frames: int, max_bytes: int) -> None:
        self.max_frames = max(1, max_frames)
        self.max_bytes = max(1, max_bytes)
        self.items: deque[tuple[T, int]] = deque()
        self.bytes = 0
        self._room = asyncio.Event()
        self._ready = asyncio.Event()
        Outbox._open.add(self)

    @classmethod
    def total_bytes(cls) -> int:
        """What every open outbox of this process holds."""
        return sum(box.bytes for box in list(cls._open))

    def full(self) -> bool:
        return len(self.items) >= self.max_frames or self.bytes >= self.max_bytes

    def empty(self) -> bool:
        return not self.items

    def fits(self, size: int) -> bool:
        return not self.items or (
            len(self.items) < self.max_frames and self.bytes + size <= self.max_bytes
        )

    async def put(self, item: T, size: int) -> None:
        while not self.fits(size):
            self._room.clear()
            await self._room.wait()
        self.items.append((item, size))
        self.bytes += size
        self._ready.set()

    async def room(self) -> None:
        """Wait until the box is at most half full (by count and bytes): room for an item of
        up to half the budget."""
        while self.items and (
            len(self.items) > self.max_frames // 2 or self.bytes > self.max_bytes // 2
        ):
            self._room.clear()
            await self._room.wait()

    def get_nowait(self) -> T:
        item, size = self.items.popleft()
        self.bytes -= size
        self._room.set()
        return item

    async def get(self) -> T:
        while not self.items:
            self._ready.clear()
            await self._ready.wait()
        return self.get_nowait()


def error_frame(body: dict[str, object]) -> bytes:
    return b"event: error\ndata: " + jsoncodec.dumps(body) + b"\n\n"


def headwater_final_frame(code: int, message: str) -> bytes:
    """The last frame of a stream that fails (503) or whose client stopped draining (408)."""
    return error_frame({"code": code, "error": message, "terminal": True})


class EventStreamResponse(Response):
    """`headers`, `content_type`, `pacing_advice` and `final_frame` let a surface keep its
    own wire shape (aviso's /api/v1 streams have their own headers, no pacing advisory, and
    end with their own error and closing frames)."""

    def __init__(
        self,
        frames: AsyncGenerator[bytes, None],
        slot: Slot,
        *,
        topics: Sequence[str],
        grace_ms: int,
        timeout_ms: int,
        queue_frames: int = QUEUE_FRAMES,
        buffer_bytes: int = 64 << 10,
        headers: Mapping[str, str] = SSE_HEADERS,
        content_type: str = "text/event-stream; charset=utf-8",
        pacing_advice: bool = True,
        final_frame: Callable[[int, str], bytes] = headwater_final_frame,
    ) -> None:
        super().__init__(status_code=200, media_type="text/event-stream")
        self.frames = frames
        self.slot = slot
        self.topics = list(topics)
        self.grace_s = grace_ms / 1000
        self.timeout_s = timeout_ms / 1000
        self.sse_headers = [
            (b"content-type", content_type.encode()),
            *((k.lower().encode(), v.encode()) for k, v in headers.items()),
        ]
        self.pacing_advice = pacing_advice
        self.final_frame = final_frame
        self.queue: Outbox[bytes | None] = Outbox(queue_frames, buffer_bytes)
        self.blocked_since: float | None = None  # producer waiting for queue space
        self.advised = False
        self.outcome = "open"  # then: complete | disconnected | slow_consumer
        self.gone = asyncio.Event()  # the server reported the client gone

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        tasks: list[asyncio.Task[None]] = []
        try:
            start: Message = {
                "type": "http.response.start",
                "status": 200,
                "headers": self.sse_headers,
            }
            try:
                async with asyncio.timeout(self.timeout_s):
                    await send(start)
            except TimeoutError:
                self.outcome = "slow_consumer"
                return
            producer = asyncio.create_task(self._produce())
            watcher = asyncio.create_task(self._watch_disconnect(receive))
            sender = asyncio.create_task(self._send_loop(send))
            tasks = [producer, watcher, sender]
            await asyncio.wait({watcher, sender}, return_when=asyncio.FIRST_COMPLETED)
            if sender.done():
                sender.result()  # surface a bug in the sender
        finally:
            try:
                await _cancel_all(tasks)
                with contextlib.suppress(Exception):
                    await self.frames.aclose()
            finally:
                # Even when the request itself is being cancelled (an ASGI cancel scope makes
                # every await above raise again), the slot is freed.
                self.slot.release()

    async def _produce(self) -> None:
        frames = self.frames.__aiter__()
        try:
            while True:
                # The next frame is built (its page read) only once the box has room for it:
                # a stream that is not drained holds its buffer, not a page more.
                if self.queue.full():
                    self.blocked_since = time.monotonic()
                await self.queue.room()
                try:
                    chunk = await frames.__anext__()
                except StopAsyncIteration:
                    break
                if not self.queue.fits(len(chunk)) and self.blocked_since is None:
                    self.blocked_since = time.monotonic()
                await self.queue.put(chunk, len(chunk))
                self.blocked_since = None
        except HeadwaterError as exc:
            log.warning("stream ended by %s: %s", exc.code, exc.message)
            final = self.final_frame(exc.status, exc.message)
            await self.queue.put(final, len(final))
        except Exception:
            # A bug in a producer must end the stream, not leave it open and silent.
            log.exception("stream producer failed")
            final = self.final_frame(500, "internal error")
            await self.queue.put(final, len(final))
        await self.queue.put(None, 0)

    async def _watch_disconnect(self, receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                if self.outcome == "open":
                    self.outcome = "disconnected"
                self.gone.set()
                return

    def _advisory(self) -> bytes:
        return error_frame(
            {
                "code": 429,
                "error": "watch paced: the client is not draining; records are coalescing",
                "retry_after_ms": int(self.grace_s * 1000),
                "topics": self.topics,
            }
        )

    async def _send_loop(self, send: Send) -> None:
        ended = False
        while not ended:
            chunk = await self.queue.get()
            if chunk is None:
                break
            parts = [chunk]
            size = len(chunk)
            while size < WRITE_BYTES and not self.queue.empty():
                nxt = self.queue.get_nowait()
                if nxt is None:
                    ended = True
                    break
                parts.append(nxt)
                size += len(nxt)
            nxt = None
            blocked = self.blocked_since
            if blocked is not None and time.monotonic() - blocked >= self.grace_s:
                if not self.advised and self.pacing_advice:
                    self.advised = True
                    parts.insert(0, self._advisory())
            elif self.queue.empty():
                self.advised = False
            # One write of whole frames, at most WRITE_BYTES or one frame: a frame is never
            # split, so the final frame after a missed deadline follows a complete event; and
            # the transport (which takes a write whole before it pauses the sender) holds at
            # most its high-water mark plus one such write.
            body = b"".join(parts) if len(parts) > 1 else parts[0]
            del parts, chunk  # while the write waits for the socket, one copy is held
            if not await self._write(send, body, more=True):
                return
            del body
        if self.outcome == "open":
            self.outcome = "complete"
        await self._write(send, b"", more=False)

    async def _write(self, send: Send, body: bytes, *, more: bool) -> bool:
        """One write within the deadline. Past it, the final frame (if the client takes it
        within FINAL_WRITE_S) ends the stream, and False says the stream is over."""
        message: Message = {"type": "http.response.body", "body": body, "more_body": more}
        try:
            async with asyncio.timeout(self.timeout_s):
                await send(message)
            return True
        except TimeoutError:
            pass
        self.outcome = "slow_consumer"
        log.warning("closing a stream not drained for %.1f s", self.timeout_s)
        final = self.final_frame(
            408,
            "slow consumer: the stream could not drain in time; reconnect "
            "with Last-Event-ID to resume",
        )
        with contextlib.suppress(Exception):
            async with asyncio.timeout(FINAL_WRITE_S):
                await send({"type": "http.response.body", "body": final, "more_body": False})
                return False
        # The client took nothing more: a server that resets such sockets (headwater.http.
        # serving does, within FINAL_WRITE_S of this) reports it gone; the stream then ends
        # as a disconnect rather than as a response the server sees abandoned.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(FINAL_WRITE_S):
                await self.gone.wait()
        return False


def bare_event_stream(
    frames: AsyncGenerator[bytes, None],
    slot: Slot,
    *,
    topics: Sequence[str],
    caps: Caps,
    headers: Mapping[str, str],
) -> EventStreamResponse:
    """A stream of a surface with its own wire shape: exactly `text/event-stream`, its own
    headers, no pacing advisory and nothing appended when it fails or its client stops
    draining (the client reconnects and resumes by its own rules)."""
    return EventStreamResponse(
        frames,
        slot,
        topics=topics,
        grace_ms=caps.buffer_grace_ms,
        timeout_ms=caps.slow_consumer_timeout_ms,
        buffer_bytes=caps.stream_buffer_bytes,
        headers=headers,
        content_type="text/event-stream",
        pacing_advice=False,
        final_frame=lambda _status, _message: b"",
    )
