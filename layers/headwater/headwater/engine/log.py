"""The log engine's façade: append (group commit), diff (with long-poll), raw reads, record
delete and topic lifecycle, over the heads / log-tail / segment / blob ports.

Each capability lives in its own module and shares one LogCore (core.py):
- topics.py   create, configure, list, touch, ext changes, delete, purge
- append.py   group commit, guards, idempotency, caps (upkeep.py starts tiering after it)
- scan.py     the one frame scan every read goes through
- reads.py    /v0 diffs and long-polls, waiting for a head to move
- ranges.py   raw ranges, records at seqs, time seeks (the protocol layers' reads)
- deletes.py  record deletes and the floor

Sibling engines (queue, routers, tiering, watch) and the surfaces use only this class's
public methods. Blocking storage calls run on the core's thread pool so the event loop
keeps serving while DynamoDB answers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from headwater.engine.append import Appender
from headwater.engine.cache import FrameCache
from headwater.engine.core import LogCore, wall_ms
from headwater.engine.deletes import RecordDeletes, after_delete
from headwater.engine.heads import HeadHub, KnownHeads
from headwater.engine.notifier import Notifier
from headwater.engine.ports import (
    BlobStore,
    Head,
    HeadStore,
    LogTailStore,
    ProducerClaim,
    SegmentStore,
)
from headwater.engine.quotas import Quotas
from headwater.engine.ranges import RangeReader
from headwater.engine.reads import DiffReader
from headwater.engine.records import Frame, StoredRecord
from headwater.engine.scan import FrameScan
from headwater.engine.sealed import SealedReader
from headwater.engine.sweeps import ChangedTopics
from headwater.engine.topics import PROTOCOL_TOPIC_MARK, Topics
from headwater.engine.upkeep import UpkeepTrigger
from headwater.engine.values import (
    AppendRequest,
    AppendResult,
    DeleteResult,
    DiffRequest,
    DiffResult,
    RangeRead,
    TagMatch,
    TopicPage,
)
from headwater.settings import Settings

if TYPE_CHECKING:
    import asyncio

__all__ = ["PROTOCOL_TOPIC_MARK", "LogEngine", "wall_ms"]

T = TypeVar("T")


class LogEngine:
    def __init__(
        self,
        heads: HeadStore,
        tail: LogTailStore,
        blobs: BlobStore,
        settings: Settings,
        clock: Callable[[], int] = wall_ms,
        quotas: Quotas | None = None,
        segments: SegmentStore | None = None,
    ) -> None:
        self._assemble(LogCore(heads, tail, blobs, settings, clock, quotas, segments))

    @classmethod
    def over(cls, core: LogCore) -> LogEngine:
        """The engine's parts over a core built already (engines.Core builds the core first:
        the sealer's upkeep needs it and not the engine)."""
        engine = cls.__new__(cls)
        engine._assemble(core)
        return engine

    def _assemble(self, core: LogCore) -> None:
        self.core = core
        self.topics = Topics(core)
        self.scan = FrameScan(core)
        self.upkeep_trigger = UpkeepTrigger(core)
        self.appender = Appender(core, self.topics, self.upkeep_trigger)
        self.reader = DiffReader(core, self.scan, self.topics)
        self.ranges = RangeReader(core, self.scan)
        self.deletes = RecordDeletes(core, self.scan)

    def close(self) -> None:
        self.core.close()

    # --- what the parts share, for the siblings and the composition root ---------------
    @property
    def heads(self) -> HeadStore:
        return self.core.heads

    @property
    def tail(self) -> LogTailStore:
        return self.core.tail

    @property
    def blobs(self) -> BlobStore:
        return self.core.blobs

    @property
    def segments(self) -> SegmentStore | None:
        return self.core.segments

    @property
    def settings(self) -> Settings:
        return self.core.settings

    @property
    def quotas(self) -> Quotas | None:
        return self.core.quotas

    @property
    def cache(self) -> FrameCache:
        return self.core.cache

    def memory(self) -> dict[str, tuple[int, int]]:
        """What each of the engine's budgeted caches holds, and its budget (bytes)."""
        c = self.core
        return {
            "frame_cache": (c.cache.bytes, c.cache.max_bytes),
            "head_cache": (c.head_cache.bytes, c.head_cache.max_bytes),
            "known_heads": (c.known.bytes, c.known.max_bytes),
        }

    @property
    def sealed(self) -> SealedReader | None:
        return self.core.sealed

    @property
    def notifier(self) -> Notifier:
        return self.core.notifier

    @property
    def known(self) -> KnownHeads:
        return self.core.known

    @property
    def hub(self) -> HeadHub:
        return self.core.hub

    @property
    def clock(self) -> Callable[[], int]:
        return self.core.clock

    @clock.setter
    def clock(self, clock: Callable[[], int]) -> None:
        self.core.clock = clock

    @property
    def upkeep(self) -> Callable[[str], object] | None:
        """Seals, trims and evicts a topic (engine/tiering.py; set by the service container),
        started in the background by appends that take a topic past a threshold."""
        return self.upkeep_trigger.run

    @upkeep.setter
    def upkeep(self, run: Callable[[str], object] | None) -> None:
        self.upkeep_trigger.run = run

    @property
    def changes(self) -> ChangedTopics:
        """The topics this process writes, for the background sweeps (engine/sweeps.py)."""
        return self.upkeep_trigger.changes

    @property
    def upkeep_interval_s(self) -> float:
        return self.upkeep_trigger.interval_s

    @upkeep_interval_s.setter
    def upkeep_interval_s(self, interval_s: float) -> None:
        self.upkeep_trigger.interval_s = interval_s

    @property
    def on_purged(self) -> list[Callable[[Head], None]]:
        """Called with a deleted incarnation's head once its sealed history is purged."""
        return self.topics.on_purged

    async def run_io(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking storage call of a protocol layer on the engine's I/O pool."""
        return await self.core.io(fn, *args)

    def submit_io(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """Start a background storage write (off the read pool) without waiting for it."""
        return self.core.submit_io(fn, *args)

    def quota_reserve(self, name: str, amount: int) -> None:
        self.core.quota_reserve(name, amount)

    def quota_release(self, name: str, amount: int) -> None:
        self.core.quota_release(name, amount)

    # --- blobs of protocol layers (immutable objects: a Durable Streams schema registry) --
    async def put_blob(self, key: str, body: bytes) -> None:
        await self.core.io(self.core.blobs.put, key, body)

    async def get_blob(self, key: str) -> bytes:
        return await self.core.io(self.core.blobs.get, key)

    async def find_blob(self, key: str) -> bytes | None:
        """The object's bytes, or None when there is no such object."""
        return await self.core.io(self.core.blobs.find, key)

    async def delete_blobs(self, keys: list[str]) -> None:
        await self.core.io(self.core.blobs.delete_many, keys)

    # --- topics -------------------------------------------------------------------------
    async def put_topic(self, topic: str, patch: dict[str, Any]) -> tuple[Head, bool]:
        return await self.core.io(self.put_topic_sync, topic, patch)

    def put_topic_sync(self, topic: str, patch: dict[str, Any]) -> tuple[Head, bool]:
        """Create the topic with `patch` or merge `patch` into its config, on the calling
        thread (a router creates its destination from the forwarder's worker): (head, created)."""
        out = self.topics.put_sync(topic, patch)
        self.changes.note(topic)  # a new cap or TTL may want upkeep
        return out

    async def get_topic(self, topic: str, *, touch: bool) -> Head:
        return await self.topics.get(topic, touch=touch)

    async def touch_all(self, heads: list[Head]) -> list[Head]:
        """Bump the read-recency clocks of listed topics (GET /v0/topics?touch=true)."""
        return [await self.topics.touch(h) for h in heads]

    async def touch_read(self, head: Head, now: int) -> None:
        await self.core.io(self.core.heads.touch_read, head, now)

    async def list_topics(self, prefixes: list[str], after: str | None, limit: int) -> TopicPage:
        return await self.topics.page(prefixes, after, limit)

    async def count_topics(self, *, internal: bool = False) -> int:
        """Live topics: those /v0 shows, or with `internal` every log (the surfaces' own)."""
        return await self.core.io(self.core.heads.count_live, internal)

    async def all_topics(self, max_topics: int) -> tuple[list[Head], bool]:
        """Every live topic (up to max_topics), and whether more exist."""
        return await self.topics.every(max_topics)

    async def delete_topic(
        self, topic: str, *, if_empty: bool, if_ext: str | None = None
    ) -> Head | None:
        """Delete a topic: the head as it was when deleted, or None if there was none (or,
        with `if_ext`, if its ext no longer holds that: the caller's decision is stale)."""
        return await self.topics.delete(topic, if_empty=if_empty, if_ext=if_ext)

    async def head_of(self, topic: str, *, consistent: bool = True) -> Head | None:
        return await self.topics.head_of(topic, consistent=consistent)

    def head_hint(self, topic: str) -> Head | None:
        """The head this process last committed or saw for `topic`, without I/O: possibly
        stale (another process may have moved it), so only for decisions a conditional
        commit re-checks (an append's guard)."""
        return self.core.head_cache.get(topic)

    def forget_head(self, topic: str) -> None:
        """Records were deleted: the next reads of this topic take its head from storage."""
        self.core.forget_head(topic)

    async def create_with_ext(
        self, topic: str, ext: str, replacing: Head | None, base_seq: int = 0
    ) -> Head | None:
        """Create a record-less topic holding `ext` whose log starts after `base_seq`
        (conditional: None when it lost a race)."""
        head = await self.topics.create_with_ext(topic, ext, replacing, base_seq)
        self.changes.note(topic)
        return head

    async def put_ext(
        self, head: Head, ext: str, claim: ProducerClaim | None = None
    ) -> Head | None:
        """Set a live head's ext iff its head_seq and ext are as read (None: it moved); with
        an idempotent producer's claim, both at once (ClaimRefused when it is not taken)."""
        out = await self.topics.put_ext(head, ext, claim)
        self.changes.note(head.topic)  # e.g. a schema registry the local indexer follows
        return out

    async def producer_state(self, head: Head, producer: str) -> tuple[int, int] | None:
        """An idempotent producer's stored (epoch, seq) in this incarnation, or None."""
        got = await self.core.io(self.core.tail.get_producer, head, producer)
        return None if got is None else (got[0], got[1])

    async def wait_change(self, topic: str, seen: Head, timeout_s: float) -> Head | None:
        """Wait until the topic's head moves past `seen` (an append, an ext change, a
        delete): the new head (deleted heads included), or None at the timeout."""
        return await self.reader.wait_change(topic, seen, timeout_s)

    # --- append -------------------------------------------------------------------------
    async def append(self, topic: str, req: AppendRequest) -> AppendResult:
        return await self.appender.append(topic, req)

    # --- reads --------------------------------------------------------------------------
    async def diff(self, topic: str, req: DiffRequest) -> DiffResult:
        return await self.reader.diff(topic, req)

    def frames_after(self, head: Head, start: int, want: int, max_bytes: int = 0) -> list[Frame]:
        """Frames (sealed blocks, then tail frames) holding the records after `start`: at
        least `want` records' worth, or `max_bytes` payload bytes (0: no byte budget),
        unless the log ends first."""
        return self.scan.frames_after(head, start, want, max_bytes)

    async def read_range(
        self,
        topic: str,
        after: int,
        limit: int,
        max_bytes: int,
        tag_json: bytes | None = None,
        head: Head | None = None,
        upto: int | None = None,
    ) -> RangeRead:
        """Stored records with seq > `after` (and <= `upto`, when given), up to `limit`
        records or `max_bytes` payload bytes (at least one record when any is left), only
        those tagged `tag_json` (a JSON string literal) when given. `head` (read strongly by
        the caller) saves a read, and when the frame cache holds the range it is answered
        here on the event loop, without the I/O thread's round trip."""
        if head is not None and tag_json is None:
            cached = self.ranges.read_range_cached(after, limit, max_bytes, head, upto)
            if cached is not None:
                return cached
        return await self.core.io(
            self.ranges.read_range_sync, topic, after, limit, max_bytes, tag_json, head, upto
        )

    async def read_seqs(self, head: Head, seqs: Sequence[int]) -> list[StoredRecord]:
        """The stored records at `seqs` (ascending) of the log as of `head`, in that order,
        leaving out deleted and trimmed ones: a reader that knows which entries it wants
        (the index families' candidates) fetches only the blocks holding them."""
        return await self.core.io(self.ranges.read_seqs_sync, head, list(seqs))

    async def seek_time(self, head: Head, ts: int) -> int:
        """The seq just before the first record appended at or after `ts` (append times
        never go back on a topic, so this is a search over segment, block and frame
        metadata; it decodes at most one block)."""
        return await self.core.io(self.ranges.seek_time_sync, head, ts)

    def live_between(self, head: Head, lo: int, hi: int) -> tuple[int, int]:
        """Count and bytes of the live records with lo <= seq < hi."""
        return self.scan.live_between(head, lo, hi)

    def first_live(self, head: Head, start: int) -> int:
        """First seq >= start that is not deleted (head_seq + 1 if none)."""
        return self.scan.first_live(head, start)

    # --- record delete ------------------------------------------------------------------
    async def delete_records(
        self, topic: str, before_seq: int | None, match: TagMatch | None
    ) -> DeleteResult:
        result = await self.core.io(self.deletes.delete_sync, topic, before_seq, match)
        self.core.notifier.notify(topic)
        self.changes.note(topic)  # dead units to collect
        return result

    async def delete_seqs(self, topic: str, seqs: Sequence[int]) -> DeleteResult:
        """Delete the records with these seqs (tail or sealed), by the same delete marks a
        tag delete writes; seqs that are absent or already deleted are skipped. `deleted`
        counts the records this call removed."""
        result = await self.core.io(self.deletes.delete_sync, topic, None, tuple(sorted(set(seqs))))
        self.core.notifier.notify(topic)
        self.changes.note(topic)
        return result

    def advance_floor(self, topic: str) -> None:
        """Move earliest_seq past a deleted prefix (records deleted one by one, e.g. queue
        acks) and the holes in it (RecordDeletes.advance_floor)."""
        self.deletes.advance_floor(topic)
        self.changes.note(topic)

    @staticmethod
    def after_delete(head: Head, count: int, nbytes: int, new_es: int | None) -> Head:
        """The head as a delete of `count` records (`nbytes`) leaves it (a queue's acks)."""
        return after_delete(head, count, nbytes, new_es)
