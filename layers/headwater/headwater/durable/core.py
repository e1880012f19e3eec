"""What the parts of Durable Streams share (durable/service.py is their façade): the log
engine, the clock, the live lookup of a stream, and how a raced state change is retried.

Each stream is a topic (`~ds/<name>`) whose head carries the stream's state
(durable/state.py) in its ext attribute; every part reads and writes streams through the
engine's public API only."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

from headwater.durable.errors import StreamGone, StreamNotFound
from headwater.durable.state import StreamState, state_of, topic_of
from headwater.engine import LogEngine, wall_ms
from headwater.engine.ports import Head

STATE_ATTEMPTS = 8
# A state change on the head (a fork's reference, a delete, a close, a schema) is
# conditional on the tail it read, so it races every append to the stream: these loops
# try more often and back off (jittered, capped) so a busy writer cannot starve them.
HOT_ATTEMPTS = 32
FORK_ATTEMPTS = HOT_ATTEMPTS
RETRY = {"Retry-After": "1"}


async def backoff(attempt: int) -> None:
    """Sleep a jittered, capped interval before trying a raced state change again."""
    await asyncio.sleep(random.uniform(0, min(0.05, 0.002 * 2**attempt)))


class StreamsCore:
    """The engine and the clock every part works with (the clock can be replaced: a test
    moves time for all parts at once through the façade)."""

    def __init__(self, engine: LogEngine, clock: Callable[[], int] = wall_ms) -> None:
        self.engine = engine
        self.clock = clock

    async def lookup(self, name: str, *, consistent: bool = True) -> tuple[Head, StreamState]:
        """The live stream, strongly read; StreamNotFound when missing or expired."""
        head = await self.engine.head_of(topic_of(name), consistent=consistent)
        state = state_of(head)
        if head is None or state is None:
            raise StreamNotFound(name)
        check_live(name, head, state, self.clock())
        return head, state

    async def touch(self, head: Head, state: StreamState) -> None:
        """A read renews a TTL stream's idle window (HEAD does not: protocol §3.2)."""
        if not state.ttl_ms:
            return
        now = self.clock()
        if now - state.last_access(head) >= min(1000, state.ttl_ms // 4):
            await self.engine.touch_read(head, now)


def check_live(name: str, head: Head, state: StreamState, now: int) -> None:
    """410 for a stream kept only for its forks, 404 for an expired one."""
    if state.held(head, now):
        raise StreamGone(name)
    if state.expired(head, now):
        raise StreamNotFound(name)
