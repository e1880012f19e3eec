"""The server-sent-events response every stream uses (spec §7.5, §11).

- It owns its connection slot and releases it on every exit path: clean end, client gone,
  cancellation, or an exception in the producer.
- Frames pass through a bounded outbound queue. While the client does not drain, the
  producer blocks, so the engine's next read picks up everything that arrived meanwhile:
  records coalesce into larger, fewer batches, and queued frames go out in one write.
- Slow consumers: if the producer stays blocked past `buffer_grace_ms`, the next write
  starts with an advisory `error` frame (code 429: the named topics are paced; the stream
  stays open). If one write cannot complete within `slow_consumer_timeout`, the server
  sends a final `error` frame (code 408) and closes; the session survives, so the client
  resumes from its cursors with Last-Event-ID.
- A storage failure mid-stream ends the stream with a final `error` frame (code 503)
  instead of a broken connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence

from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from headwater import jsoncodec
from headwater.errors import HeadwaterError
from headwater.http.limits import Slot
from headwater.settings import Caps

log = logging.getLogger(__name__)

QUEUE_FRAMES = 8  # outbound frames held per connection (each bounded by max_batch_bytes)
COALESCE_BYTES = 1 << 20  # queued frames joined into one write up to this size
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
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=queue_frames)
        self.blocked_since: float | None = None  # producer waiting for queue space
        self.advised = False
        self.outcome = "open"  # then: complete | disconnected | slow_consumer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        tasks: list[asyncio.Task[None]] = []
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": self.sse_headers,
                }
            )
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
        try:
            async for chunk in self.frames:
                if self.queue.full():
                    self.blocked_since = time.monotonic()
                await self.queue.put(chunk)
                self.blocked_since = None
        except HeadwaterError as exc:
            log.warning("stream ended by %s: %s", exc.code, exc.message)
            await self.queue.put(self.final_frame(exc.status, exc.message))
        except Exception:
            # A bug in a producer must end the stream, not leave it open and silent.
            log.exception("stream producer failed")
            await self.queue.put(self.final_frame(500, "internal error"))
        await self.queue.put(None)

    async def _watch_disconnect(self, receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                if self.outcome == "open":
                    self.outcome = "disconnected"
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
            while size < COALESCE_BYTES and not self.queue.empty():
                nxt = self.queue.get_nowait()
                if nxt is None:
                    ended = True
                    break
                parts.append(nxt)
                size += len(nxt)
            blocked = self.blocked_since
            if blocked is not None and time.monotonic() - blocked >= self.grace_s:
                if not self.advised and self.pacing_advice:
                    self.advised = True
                    parts.insert(0, self._advisory())
            elif self.queue.empty():
                self.advised = False
            message: Message = {
                "type": "http.response.body",
                "body": b"".join(parts),
                "more_body": True,
            }
            try:
                async with asyncio.timeout(self.timeout_s):
                    await send(message)
            except TimeoutError:
                self.outcome = "slow_consumer"
                log.warning("closing a stream not drained for %.1f s", self.timeout_s)
                final = self.final_frame(
                    408,
                    "slow consumer: the stream could not drain in time; reconnect "
                    "with Last-Event-ID to resume",
                )
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(FINAL_WRITE_S):
                        await send(
                            {"type": "http.response.body", "body": final, "more_body": False}
                        )
                return
        if self.outcome == "open":
            self.outcome = "complete"
        await send({"type": "http.response.body", "body": b"", "more_body": False})


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
        headers=headers,
        content_type="text/event-stream",
        pacing_advice=False,
        final_frame=lambda _status, _message: b"",
    )
