"""GET /v0/ws: the JSON-over-WebSocket data plane (spec "/v0/ws"), served by uvicorn.

The bearer is checked before the upgrade is accepted (header, or `?token=` for browsers,
which cannot set headers on a WebSocket); a refusal is an HTTP 401 with the /v0 error
envelope where the server supports the denial-response extension (uvicorn, the test
client), else a close with 1008 before accept. Commands are handled by ws/commands.py;
this module is the socket: one task reads commands, one pumps the connection's TopicFeed
into a bounded frame queue, one writes the queue to the socket."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from fastapi import APIRouter
from starlette.responses import Response
from starlette.websockets import WebSocket, WebSocketDisconnect

from headwater import jsoncodec
from headwater.access.keys import Principal
from headwater.engine import TopicFeed
from headwater.errors import HeadwaterError, Throttled, Unauthorized, error_body
from headwater.http.lean_route import LeanRoute
from headwater.http.responses import elapsed_ms
from headwater.http.sse import Outbox
from headwater.services import LazyServices, Services
from headwater.ws.commands import Commands
from headwater.ws.frames import error_frame, event_frame

router = APIRouter(route_class=LeanRoute)
log = logging.getLogger(__name__)

# Frames waiting for the socket: at most this many, and at most the stream buffer's bytes
# (HEADWATER_STREAM_BUFFER_BYTES) plus one frame. While the client does not read, the
# writer blocks, the queue fills, the feed waits before reading more, and records coalesce
# into larger batches (up to each subscription's limit / max_batch_bytes). A write the
# client does not take within slow_consumer_timeout ends the connection.
QUEUE_FRAMES = 32
CLOSE_WRITE_S = 5.0  # how long a closing frame may wait for the client to read
MAX_INFLIGHT_PUBLISHES = 64
DENIAL_EXTENSION = "websocket.http.response"

_Item = tuple[bytes, str | None, object | None]  # frame, topic, subscription token


@router.websocket("/v0/ws")
async def websocket_endpoint(websocket: WebSocket) -> None:
    lazy: LazyServices = websocket.app.state.services
    svc = lazy.get()
    principal = await _authenticate(websocket, svc)
    if principal is None:
        return
    # A WebSocket counts against the same stream caps as SSE (spec §11).
    try:
        slot = svc.limits.acquire_stream(principal.key_id if svc.keys.enabled else None)
    except Throttled as exc:
        await _refuse(websocket, exc, close_code=1013)
        return
    # The connection's lifecycle: accepted here, and over when serve() returns (the client
    # closed, the socket broke, it stopped reading, or the server is stopping). The slot
    # is released on every one of those paths.
    with slot:
        await websocket.accept()
        try:
            await Connection(websocket, svc, principal).serve()
        finally:
            # The close frame waits for the socket like any frame: a client that stopped
            # reading never takes it (the server aborts the socket; headwater.http.serving).
            with contextlib.suppress(Exception):
                async with asyncio.timeout(CLOSE_WRITE_S):
                    await websocket.close()


async def _authenticate(websocket: WebSocket, svc: Services) -> Principal | None:
    """The key's principal, or None after refusing the upgrade. No scope is needed here:
    each command checks its own (spec)."""
    tokens = websocket.query_params.getlist("token")
    try:
        return svc.keys.authenticate(
            websocket.headers.get("authorization"), tokens[0] if tokens else None
        )
    except Unauthorized as exc:
        await _refuse(websocket, exc, close_code=1008)
        return None


async def _refuse(websocket: WebSocket, exc: HeadwaterError, close_code: int) -> None:
    """Refuse the upgrade: an HTTP response with the /v0 envelope where the server supports
    the denial-response extension, else a close before accept."""
    if DENIAL_EXTENSION in websocket.scope.get("extensions", {}):
        body = {**error_body(exc), "performance": {"server_total_ms": elapsed_ms(websocket)}}
        await websocket.send_denial_response(
            Response(
                jsoncodec.dumps(body),
                exc.status,
                headers=exc.headers,
                media_type="application/json",
            )
        )
    else:
        await websocket.close(code=close_code, reason=exc.message)


class Connection:
    def __init__(self, websocket: WebSocket, svc: Services, principal: Principal) -> None:
        self.websocket = websocket
        caps = svc.settings.caps
        self.write_timeout_s = caps.slow_consumer_timeout_ms / 1000
        self.feed = TopicFeed(svc.engine)
        self.queue: Outbox[_Item] = Outbox(QUEUE_FRAMES, caps.stream_buffer_bytes)
        self.commands = Commands(svc, principal, self.feed, self._send_reply)
        self.inflight: set[asyncio.Task[None]] = set()

    async def _send_reply(self, frame: bytes) -> None:
        await self.queue.put((frame, None, None), len(frame))

    async def serve(self) -> None:
        tasks = {
            asyncio.create_task(self._receive()),
            asyncio.create_task(self._pump()),
            asyncio.create_task(self._write()),
        }
        done: set[asyncio.Task[None]] = set()
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks | self.inflight:
                task.cancel()
            await asyncio.gather(*tasks, *self.inflight, return_exceptions=True)
            self.feed.close()
        for task in done:
            exc = task.exception()
            if exc is not None and not isinstance(exc, WebSocketDisconnect | OSError):
                log.error("websocket connection failed", exc_info=exc)
                await self._fail(exc)
                return

    async def _fail(self, exc: BaseException) -> None:
        """Delivery stopped (storage trouble in the read loop): say so, and close (1011)."""
        err = exc if isinstance(exc, HeadwaterError) else HeadwaterError("internal error")
        with contextlib.suppress(Exception):
            async with asyncio.timeout(CLOSE_WRITE_S):
                await self.websocket.send_text(error_frame(None, err).decode())
                await self.websocket.close(code=1011)

    async def _receive(self) -> None:
        while True:
            message = await self.websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            text = message.get("text")
            raw: str | bytes = text if text is not None else message.get("bytes") or b""
            step = self.commands.prepare(raw)
            if step.pipelined:
                # A publish starts now and its append is queued at once, so publishes
                # commit in command order; its ack follows when it has committed.
                while len(self.inflight) >= MAX_INFLIGHT_PUBLISHES:
                    await asyncio.wait(self.inflight, return_when=asyncio.FIRST_COMPLETED)
                task = asyncio.create_task(step.run())
                self.inflight.add(task)
                task.add_done_callback(self.inflight.discard)
            else:
                # Every other command takes effect after the publishes sent before it.
                if self.inflight:
                    await asyncio.wait(self.inflight)
                await step.run()

    async def _pump(self) -> None:
        async for event in self.feed.run():
            frame = event_frame(event)
            if frame is None:
                continue
            token = self.feed.subscription(event.topic) if event.topic is not None else None
            await self.queue.put((frame, event.topic, token), len(frame))

    async def _write(self) -> None:
        while True:
            frame, topic, token = await self.queue.get()
            if topic is not None and self.feed.subscription(topic) is not token:
                continue  # queued before an unsubscribe (or a new subscribe) of its topic
            try:
                async with asyncio.timeout(self.write_timeout_s):
                    await self.websocket.send_text(frame.decode())
            except TimeoutError:
                # A client that stops reading (spec §7.5's slow_consumer_timeout): give up
                # on it; it reconnects and resubscribes from the last to_seq it processed.
                log.warning("closing a websocket not drained for %.1f s", self.write_timeout_s)
                return
