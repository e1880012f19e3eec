"""What this process knows about topic heads, and the one loop that keeps it fresh.

Live readers (SSE watch streams, WebSockets) need to learn of appends made by other
processes. Rather than every connection polling DynamoDB, each process runs one HeadHub:
it polls the heads of every topic any live reader watches with eventually consistent
BatchGetItem calls (100 topics per call), backing off from 25 ms after news to the
configured poll interval, records what it saw, and wakes the topic's readers through the
Notifier. Local commits record their new head too. An eventually consistent reader then
reads from the head the process already knows instead of a strongly consistent GetItem
per wake-up, so 1,000 subscribers of one topic cost one poll per interval and no head
read per record."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from headwater.engine.notifier import Notifier
from headwater.engine.ports import Head, HeadStore

if TYPE_CHECKING:
    import asyncio

log = logging.getLogger(__name__)

POLL_MIN_S = 0.025
IDLE_EXIT_S = 5.0  # the hub's task ends after this long with nothing watched
MAX_KEYS = 100  # BatchGetItem
DEFAULT_HEAD_CACHE_BYTES = 8 << 20  # each of the two per-topic head maps (settings.py)

V = TypeVar("V")


def _order(h: Head) -> tuple[int, int, int, int, int, int]:
    # Every field here only grows within an epoch: sealing moves sealed_through, eviction
    # earliest_seq, and a newer head must replace what readers start from.
    return (h.epoch, int(h.deleted), h.head_seq, h.del_ver, h.sealed_through, h.earliest_seq)


@dataclass(slots=True)
class _Seen:
    """A head this process saw, and when it was last confirmed."""

    head: Head
    at: float  # time.monotonic() when last confirmed


# What one remembered head holds, as tracemalloc measures it (tests/unit/test_memory_budgets.py):
# the Head and its config, the map's entry, plus its topic and ext strings.
HEAD_COST = 820
CONFIG_ENTRY_COST = 64


def head_cost(head: Head) -> int:
    return HEAD_COST + len(head.topic) + len(head.ext) + CONFIG_ENTRY_COST * len(head.config)


class HeadMap(Generic[V]):
    """Per-topic values by head, the least recently stored dropped first once what their
    heads hold passes `max_bytes` (HEADWATER_HEAD_CACHE_BYTES): a process that has seen a
    million topics over a month does not remember them all. Thread-safe (commits note heads
    from the I/O threads)."""

    def __init__(self, max_bytes: int, head_of: Callable[[V], Head]) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._head_of = head_of
        self._items: dict[str, tuple[V, int]] = {}
        self._lock = threading.Lock()

    def get(self, topic: str) -> V | None:
        got = self._items.get(topic)
        return None if got is None else got[0]

    def put(self, topic: str, value: V) -> None:
        cost = head_cost(self._head_of(value))
        with self._lock:
            old = self._items.pop(topic, None)
            if old is not None:
                self.bytes -= old[1]
            if cost > self.max_bytes:
                return
            self._items[topic] = (value, cost)
            self.bytes += cost
            while self.bytes > self.max_bytes:
                first = next(iter(self._items))
                self.bytes -= self._items.pop(first)[1]

    def pop(self, topic: str) -> V | None:
        with self._lock:
            got = self._items.pop(topic, None)
            if got is None:
                return None
            self.bytes -= got[1]
            return got[0]

    def __len__(self) -> int:
        return len(self._items)


class KnownHeads:
    """The newest head this process has seen per topic (from commits, reads and polls), within
    a byte budget: a topic it no longer remembers is read from storage."""

    def __init__(self, max_bytes: int = DEFAULT_HEAD_CACHE_BYTES) -> None:
        self._seen: HeadMap[_Seen] = HeadMap(max_bytes, lambda s: s.head)

    @property
    def bytes(self) -> int:
        return self._seen.bytes

    @property
    def max_bytes(self) -> int:
        return self._seen.max_bytes

    def note(self, head: Head, now: float | None = None) -> bool:
        """Record `head` unless we know a newer one. True if it changed what we know."""
        now = time.monotonic() if now is None else now
        cur = self._seen.get(head.topic)
        if cur is None or _order(head) > _order(cur.head):
            self._seen.put(head.topic, _Seen(head, now))
            return True
        if _order(head) == _order(cur.head):
            cur.at = now  # confirmed again: still fresh
        return False

    def forget(self, topic: str) -> bool:
        return self._seen.pop(topic) is not None

    def fresh(self, topic: str, max_age_s: float) -> Head | None:
        cur = self._seen.get(topic)
        if cur is None or time.monotonic() - cur.at > max_age_s:
            return None
        return cur.head


class HeadHub:
    """One polling loop per process for every topic that live readers watch."""

    def __init__(
        self,
        heads: HeadStore,
        known: KnownHeads,
        notifier: Notifier,
        poll_max_s: Callable[[], float],
    ) -> None:
        self.heads = heads
        self.known = known
        self.notifier = notifier
        self.poll_max_s = poll_max_s
        self.watched: Counter[str] = Counter()
        self._task: asyncio.Task[None] | None = None
        self._changed: asyncio.Event | None = None  # made with the task
        self.polls = 0  # BatchGetItem calls made (for tests and benchmarks)

    def watch(self, topic: str) -> None:
        self.watched[topic] += 1
        if self._changed is not None:
            self._changed.set()
        self._ensure_running()

    def unwatch(self, topic: str) -> None:
        if self.watched[topic] <= 1:
            self.watched.pop(topic, None)
        else:
            self.watched[topic] -= 1

    def _ensure_running(self) -> None:
        import asyncio  # not at the top: see engine/__init__.py

        loop = asyncio.get_running_loop()
        task = self._task
        if task is not None and not task.done() and task.get_loop() is loop:
            return
        self._changed = asyncio.Event()
        self._changed.set()
        self._task = loop.create_task(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        import asyncio  # not at the top: see engine/__init__.py

        changed = self._changed
        assert changed is not None
        poll = POLL_MIN_S
        idle_since: float | None = None
        while True:
            topics = list(self.watched)
            if not topics:
                idle_since = idle_since or time.monotonic()
                if time.monotonic() - idle_since > IDLE_EXIT_S:
                    return
                changed.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(IDLE_EXIT_S):
                        await changed.wait()
                continue
            idle_since = None
            news = False
            try:
                news = await self._poll(topics)
            except Exception:  # storage trouble: keep going, readers still have their timers
                log.warning("head poll failed", exc_info=True)
            poll = POLL_MIN_S if news else min(poll * 2, self.poll_max_s())
            changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(poll):
                    await changed.wait()

    async def _poll(self, topics: list[str]) -> bool:
        import asyncio  # not at the top: see engine/__init__.py

        news = False
        for i in range(0, len(topics), MAX_KEYS):
            chunk = topics[i : i + MAX_KEYS]
            self.polls += 1
            heads = await asyncio.to_thread(self.heads.get_many, chunk, consistent=False)
            now = time.monotonic()
            for topic in chunk:
                h = heads.get(topic)
                if h is None:
                    # Gone entirely (its marker was removed): readers re-read and learn it
                    # from a strong read.
                    if self.known.forget(topic):
                        self.notifier.notify(topic)
                        news = True
                elif self.known.note(h, now):
                    self.notifier.notify(topic)
                    news = True
        return news
