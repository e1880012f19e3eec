"""What the log engine's parts share: the ports, the settings and clock, the frame cache,
the heads this process knows, the change notifier and the I/O pools.

The parts (topics.py, append.py, scan.py, reads.py, ranges.py, deletes.py, upkeep.py) each
hold this one object; LogEngine (log.py) is their façade, and the only one of them that
code outside them uses. The composition root (engines.Core) builds this core first and the
façade on first use: the sealer's upkeep (tiering.py) works on the core and a FrameScan, and
never loads the other parts."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from headwater.engine.cache import FrameCache
from headwater.engine.heads import DEFAULT_HEAD_CACHE_BYTES, HeadHub, HeadMap, KnownHeads
from headwater.engine.notifier import Notifier
from headwater.engine.ports import BlobStore, Head, HeadStore, LogTailStore, SegmentStore
from headwater.engine.quotas import Quotas
from headwater.engine.sealed import SealedReader
from headwater.engine.slots import SlotResolver
from headwater.settings import Settings

if TYPE_CHECKING:
    import asyncio

T = TypeVar("T")

MAX_ATTEMPTS = 200  # conditional-write retries of one operation before it answers 503
STALE_READ_RETRIES = 4  # re-reads of a head that moved (trimmed, evicted) under a read


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


HEAD_CACHE_MAX_AGE_S = 10.0


class HeadCache:
    """The head this process last committed or saw per topic, for this long at most: an
    append judges its guards and caps on it without a read (its reservation is conditional
    on what they were judged on, so a stale head costs a refusal and a re-judgement, never a
    wrong verdict). Ages count on both clocks (a frozen Lambda environment may stop the
    monotonic one). Within a byte budget (HeadMap): a topic it no longer holds is read."""

    def __init__(self, max_age_s: float, max_bytes: int = DEFAULT_HEAD_CACHE_BYTES) -> None:
        self.max_age_s = max_age_s
        self._heads: HeadMap[tuple[Head, float, float]] = HeadMap(max_bytes, lambda v: v[0])

    @property
    def bytes(self) -> int:
        return self._heads.bytes

    @property
    def max_bytes(self) -> int:
        return self._heads.max_bytes

    def get(self, topic: str) -> Head | None:
        got = self._heads.get(topic)
        if got is None:
            return None
        head, mono, wall = got
        if max(time.monotonic() - mono, time.time() - wall) > self.max_age_s:
            self._heads.pop(topic)
            return None
        return head

    def __setitem__(self, topic: str, head: Head) -> None:
        self._heads.put(topic, (head, time.monotonic(), time.time()))

    def pop(self, topic: str, default: None = None) -> Head | None:
        got = self._heads.pop(topic)
        return got[0] if got is not None else default


class LogCore:
    def __init__(
        self,
        heads: HeadStore,
        tail: LogTailStore,
        blobs: BlobStore,
        settings: Settings,
        clock: Callable[[], int],
        quotas: Quotas | None,
        segments: SegmentStore | None,
    ) -> None:
        self.heads = heads
        self.tail = tail
        self.blobs = blobs
        self.segments = segments
        self.settings = settings
        self.clock = clock
        self.quotas = quotas
        self.cache = FrameCache(settings.frame_cache_bytes)
        self.sealed = SealedReader(segments, blobs, self.cache) if segments else None
        # Reserved slots a read stops at: waited for, and filled once overdue.
        self.slots = SlotResolver(heads, tail, self.cache, settings, clock)
        self.notifier = Notifier()
        self.known = KnownHeads(settings.head_cache_bytes)
        self.hub = HeadHub(
            heads, self.known, self.notifier, lambda: settings.poll_interval_ms / 1000
        )
        # The head this process last committed or saw per topic: an append's starting point
        # (its conditional write proves it current) and the upkeep trigger's input.
        self.head_cache = HeadCache(HEAD_CACHE_MAX_AGE_S, settings.head_cache_bytes)
        # topic -> when an append of this process began its commit (engine/append.py)
        self.committing: dict[str, float] = {}
        self.pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="headwater-io")
        # Background writes (watch cursor saves, upkeep, purges) run apart, so they never
        # queue reads.
        self.bg_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="headwater-bg")
        # Segments built at once in this process (engine/tiering.py, Upkeep._seal)
        self.seal_gate = threading.BoundedSemaphore(settings.tiering.seal_concurrency)

    def close(self) -> None:
        self.hub.stop()
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.bg_pool.shutdown(wait=False, cancel_futures=False)

    async def io(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking storage call on the I/O pool."""
        import asyncio  # not at the top: see engine/__init__.py

        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    def submit_io(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """Start a background storage write (off the read pool) without waiting for it."""
        import asyncio  # not at the top: see engine/__init__.py

        return asyncio.get_running_loop().run_in_executor(self.bg_pool, fn, *args)

    def quota_reserve(self, name: str, amount: int) -> None:
        if self.quotas is not None:
            self.quotas.reserve(name, amount)

    def quota_release(self, name: str, amount: int) -> None:
        if self.quotas is not None:
            self.quotas.release(name, amount)

    def forget_head(self, topic: str) -> None:
        """The head moved in a way reads must see: the next ones take it from storage."""
        self.known.forget(topic)
        self.head_cache.pop(topic, None)
