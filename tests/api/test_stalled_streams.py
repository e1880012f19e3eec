"""The shared SSE response (http/sse.py) against a client that stops reading, at the ASGI
level: the frames held for the socket are bounded in bytes, no write is larger than the
buffer, and past the write deadline the stream ends, its producer is closed and its
stream slot comes back. /v1 live=sse counts as a stream, not an in-flight request."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from headwater.access.limits import ConnectionLimits
from headwater.http.limits import is_stream_request
from headwater.http.sse import EventStreamResponse
from headwater.settings import Caps

pytestmark = pytest.mark.api

FRAME = b"data: " + b"x" * 10_000 + b"\n\n"
BUFFER = 16_384


def test_a_client_that_stops_reading_is_bounded_then_cut_off_and_its_slot_freed() -> None:
    limits = ConnectionLimits(Caps())
    slot = limits.acquire_stream(None)
    produced = 0
    closed = asyncio.Event()

    async def frames() -> AsyncGenerator[bytes, None]:
        nonlocal produced
        try:
            while True:
                produced += 1
                yield FRAME
        finally:
            closed.set()

    bodies: list[int] = []

    async def send(message: Any) -> None:
        if message["type"] == "http.response.body":
            bodies.append(len(message["body"]))
            if len(bodies) >= 3:
                await asyncio.Event().wait()  # the socket takes nothing more, ever

    async def receive() -> Any:
        await asyncio.Event().wait()  # no disconnect is ever reported

    response = EventStreamResponse(
        frames(), slot, topics=["t"], grace_ms=100, timeout_ms=200, buffer_bytes=BUFFER
    )

    async def scenario() -> float:
        start = time.monotonic()
        # GIVEN a client that reads two writes and then nothing
        await asyncio.wait_for(response({"type": "http"}, receive, send), 30)
        return time.monotonic() - start

    took = asyncio.run(scenario())
    # THEN the stream ended after the deadline (plus the final frame's wait) by itself
    assert response.outcome == "slow_consumer"
    assert took < 15
    # AND its producer was closed and its slot released
    assert closed.is_set()
    assert not slot.held and limits.streams == 0
    # AND what it held for the socket stayed within the byte budget: writes join frames up
    # to 16 KiB (two 10 KB frames), so four frames went out in two writes, two were in the
    # blocked write, two in the buffer (16 KiB: full at the second), one the producer held
    assert produced <= 9, produced
    # AND no write was bigger than the buffer plus one frame (frames are never split)
    assert max(bodies) <= BUFFER + len(FRAME), bodies


def test_v1_live_sse_is_a_stream_and_long_poll_is_not() -> None:
    assert is_stream_request("GET", "/v1/stream/s", b"offset=-1&live=sse")
    assert not is_stream_request("GET", "/v1/stream/s", b"offset=-1&live=long-poll")
    assert not is_stream_request("GET", "/v1/stream/s", b"offset=-1&xlive=sse")
    assert not is_stream_request("POST", "/v1/stream/s", b"live=sse")
