"""The log engine: append (group commit), diff (with long-poll), record delete, and topic
lifecycle, over the heads / log-tail / blob ports. Blocking storage calls run on a private
thread pool so the event loop keeps serving while DynamoDB answers."""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
import logging
import math
import random
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from headwater.engine import config as topic_config
from headwater.engine.cache import FrameCache
from headwater.engine.heads import HeadHub, KnownHeads
from headwater.engine.notifier import Notifier
from headwater.engine.ports import (
    MAX_TXN_ITEMS,
    SPILL_PREFIX,
    AppendCommit,
    AppendRejected,
    BlobStore,
    DeleteCommit,
    FrameDelete,
    Head,
    HeadStore,
    IdemEntry,
    LogTailStore,
    SegmentItem,
    SegmentStore,
    TagEntry,
)
from headwater.engine.quotas import TOPICS, TOTAL_BYTES, Quotas
from headwater.engine.records import (
    Frame,
    NewRecord,
    StoredRecord,
    compress_frame,
    encode_records,
    json_literal,
    stored,
)
from headwater.engine.retention import (
    class_window_ms,
    eviction_reason,
    retention_ms,
    tombstone_reason,
    upkeep_due,
)
from headwater.engine.sealed import SealedReader, StaleHead
from headwater.engine.segment import blocks_between, object_keys
from headwater.engine.values import (
    AppendRequest,
    AppendResult,
    DeleteResult,
    DiffRequest,
    DiffResult,
    RangeRead,
    Settle,
    TagMatch,
    Tombstone,
    TopicPage,
)
from headwater.errors import (
    HeadwaterError,
    InvalidRequest,
    OutcomeUnknown,
    StorageUnavailable,
    Throttled,
    TopicExistsIncompatible,
    TopicFull,
    TopicNotEmpty,
    TopicNotFound,
)
from headwater.names import object_key_component
from headwater.settings import Settings

T = TypeVar("T")

# Topics whose names start with this belong to a protocol layer (/v1 Durable Streams keep
# theirs under "~ds/"); no /v0 topic name can start with it.
PROTOCOL_TOPIC_MARK = "~"
log = logging.getLogger(__name__)
MAX_ATTEMPTS = 200
APPEND_BUDGET_S = 20.0
MIN_CONFLICTS_TO_GIVE_UP = 4
TOUCH_INTERVAL_MS = 1000
UPKEEP_INTERVAL_S = 1.0  # an append starts upkeep of its topic at most this often
TTL_BACKSTOP_S = 7 * 86_400  # DynamoDB TTL of lossy-class frames, past their retention


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class _Pending:
    req: AppendRequest
    future: asyncio.Future[AppendResult]
    n: int


@dataclass(slots=True)
class GuardState:
    """What the guards of one group commit decided: the ext to write, each admitted
    request's note."""

    ext: str
    notes: dict[int, Any]


@dataclass(slots=True)
class _Writer:
    queue: deque[_Pending] = field(default_factory=deque)
    task: asyncio.Task[None] | None = None


def _seq_of(rec: StoredRecord) -> int:
    return rec.seq


def _pick(frames: Sequence[Frame], seqs: Sequence[int]) -> list[StoredRecord]:
    """The live records at `seqs` (ascending) in `frames` (ascending by seq)."""
    out: list[StoredRecord] = []
    i = 0
    for frame in frames:
        recs = frame.records
        while i < len(seqs) and seqs[i] < frame.first_seq:
            i += 1  # in no frame: not stored
        while i < len(seqs) and seqs[i] <= frame.last_seq:
            q = seqs[i]
            i += 1
            if q in frame.deleted:
                continue
            j = bisect.bisect_left(recs, q, key=_seq_of)
            if j < len(recs) and recs[j].seq == q:
                out.append(recs[j])
    return out


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
        self.quotas = quotas
        self.heads = heads
        self.tail = tail
        self.blobs = blobs
        self.settings = settings
        self.clock = clock
        self.cache = FrameCache(settings.frame_cache_bytes)
        self.segments = segments
        # Called with a deleted incarnation's head once its sealed history is purged (the
        # index catalogue registers its own clean-up here: services.py).
        self.on_purged: list[Callable[[Head], None]] = []
        self.sealed = SealedReader(segments, blobs, self.cache) if segments else None
        # Set by the service container: seals, trims and evicts (engine/tiering.py).
        self.upkeep: Callable[[str], object] | None = None
        self._upkeep_at: dict[str, float] = {}
        self._upkeep_running: set[str] = set()
        self._upkeep_deferred: set[str] = set()  # topics whose upkeep waits to run once
        self.upkeep_interval_s = UPKEEP_INTERVAL_S
        self.notifier = Notifier()
        self.known = KnownHeads()
        self.hub = HeadHub(
            heads, self.known, self.notifier, lambda: self.settings.poll_interval_ms / 1000
        )
        self._writers: dict[str, _Writer] = {}
        self._head_cache: dict[str, Head] = {}
        self._touched: dict[str, int] = {}
        self._pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="headwater-io")
        # Background writes (watch cursor saves) run apart, so they never queue reads.
        self._bg_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="headwater-bg")

    def close(self) -> None:
        self.hub.stop()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._bg_pool.shutdown(wait=False, cancel_futures=False)

    async def _io(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def run_io(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking storage call of a protocol layer on the engine's I/O pool."""
        return await self._io(fn, *args)

    def submit_io(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """Start a background storage write (off the read pool) without waiting for it."""
        return asyncio.get_running_loop().run_in_executor(self._bg_pool, fn, *args)

    # --- blobs of protocol layers (immutable objects: a Durable Streams schema registry) --
    async def put_blob(self, key: str, body: bytes) -> None:
        await self._io(self.blobs.put, key, body)

    async def get_blob(self, key: str) -> bytes:
        return await self._io(self.blobs.get, key)

    async def find_blob(self, key: str) -> bytes | None:
        """The object's bytes, or None when there is no such object."""
        return await self._io(self.blobs.find, key)

    async def delete_blobs(self, keys: list[str]) -> None:
        await self._io(self.blobs.delete_many, keys)

    # --- topics -------------------------------------------------------------------------
    async def put_topic(self, topic: str, patch: dict[str, Any]) -> tuple[Head, bool]:
        return await self._io(self.put_topic_sync, topic, patch)

    def put_topic_sync(self, topic: str, patch: dict[str, Any]) -> tuple[Head, bool]:
        """Create the topic with `patch` or merge `patch` into its config, on the calling
        thread (a router creates its destination from the forwarder's worker): (head, created)."""
        for _ in range(MAX_ATTEMPTS):
            head = self.heads.get(topic)
            if head is None or head.deleted:
                new = self._fresh_head(topic, head, topic_config.resolve(patch))
                if self._create_head(new, head):
                    return new, True
                continue
            if "type" in patch and patch["type"] != head.cfg.type:
                raise TopicExistsIncompatible(
                    f"topic {topic!r} is a {head.cfg.type}; type is immutable",
                    detail={"topic": topic, "field": "type"},
                )
            merged = topic_config.resolve(patch, base=head.config)
            if merged == head.config:
                return head, False
            if self.heads.put_config(head, merged):
                self._head_cache.pop(topic, None)
                return dataclasses.replace(head, config=merged), False
        raise StorageUnavailable("topic configure kept conflicting; retry")

    def _create_head(self, new: Head, replacing: Head | None) -> bool:
        """Put a new head (over a deleted marker, if any) holding a max_topics slot, which
        is given back if another writer won the race."""
        self.quota_reserve(TOPICS, 1)
        created = False
        try:
            created = self.heads.create(new, replacing=replacing)
        finally:
            if not created:
                self.quota_release(TOPICS, 1)
        return created

    def quota_reserve(self, name: str, amount: int) -> None:
        if self.quotas is not None:
            self.quotas.reserve(name, amount)

    def quota_release(self, name: str, amount: int) -> None:
        if self.quotas is not None:
            self.quotas.release(name, amount)

    def _fresh_head(
        self, topic: str, old: Head | None, cfg: dict[str, Any], base_seq: int = 0
    ) -> Head:
        """A new, empty head; its log starts after `base_seq` (0 but for forks)."""
        epoch = old.epoch + 1 if old is not None else 1
        prev = old.prev_head_seq if old is not None else 0
        return Head(
            topic=topic,
            epoch=epoch,
            config=cfg,
            created_ms=self.clock(),
            prev_head_seq=prev,
            head_seq=base_seq,
            earliest_seq=base_seq + 1,
            evict_floor=base_seq + 1,
            sealed_through=base_seq,
            trimmed_through=base_seq,
        )

    async def get_topic(self, topic: str, *, touch: bool) -> Head:
        head = await self._io(self.heads.get, topic)
        if head is None or head.deleted:
            raise TopicNotFound(topic)
        if touch:
            head = await self._touch(head)
        return head

    async def _touch(self, head: Head) -> Head:
        now = self.clock()
        # Recency clocks are advisory: write at most once a second per topic per process.
        if now - self._touched.get(head.topic, 0) >= TOUCH_INTERVAL_MS:
            self._touched[head.topic] = now
            await self._io(self.heads.touch_read, head, now)
            return dataclasses.replace(head, last_read_ts=now)
        return head

    async def touch_all(self, heads: list[Head]) -> list[Head]:
        """Bump the read-recency clocks of listed topics (GET /v0/topics?touch=true)."""
        return [await self._touch(h) for h in heads]

    async def list_topics(self, prefixes: list[str], after: str | None, limit: int) -> TopicPage:
        def run() -> TopicPage:
            merged: list[Head] = []
            for p in prefixes:
                found = self.heads.list_live(p, after, limit + 1)
                if not p.startswith(PROTOCOL_TOPIC_MARK):
                    # Protocol-owned topics ("~ds/..." streams) sort after every topic name
                    # and are not topics to /v0: the listing ends where they begin.
                    found = [h for h in found if not h.topic.startswith(PROTOCOL_TOPIC_MARK)]
                merged.extend(found)
            merged.sort(key=lambda h: h.topic)
            page = merged[: limit + 1]
            more = len(page) > limit
            page = page[:limit]
            return TopicPage(page, page[-1].topic if more and page else None)

        return await self._io(run)

    async def count_topics(self) -> int:
        return await self._io(self.heads.count_live)

    async def all_topics(self, max_topics: int) -> tuple[list[Head], bool]:
        """Every live topic (up to max_topics), and whether more exist."""
        out: list[Head] = []
        after: str | None = None
        while len(out) < max_topics:
            page = await self.list_topics([""], after, min(1000, max_topics - len(out)))
            out.extend(page.heads)
            if page.next_after is None:
                return out, False
            after = page.next_after
        return out, True

    async def delete_topic(
        self, topic: str, *, if_empty: bool, if_ext: str | None = None
    ) -> Head | None:
        """Delete a topic: the head as it was when deleted, or None if there was none (or,
        with `if_ext`, if its ext no longer holds that: the caller's decision is stale)."""

        def run() -> Head | None:
            for _ in range(MAX_ATTEMPTS):
                head = self.heads.get(topic)
                if head is None or head.deleted:
                    return None
                if if_ext is not None and head.ext != if_ext:
                    return None
                if if_empty and head.count > 0:
                    raise TopicNotEmpty(
                        f"topic {topic!r} has {head.count} records",
                        detail={"topic": topic, "count": head.count},
                    )
                if self.heads.mark_deleted(head, if_empty=if_empty, if_ext=if_ext):
                    self.known.note(dataclasses.replace(head, deleted=True))
                    self.quota_release(TOPICS, 1)
                    self.quota_release(TOTAL_BYTES, head.bytes)
                    self._head_cache.pop(topic, None)
                    self.cache.drop_topic(head.log_key)
                    return head
            raise StorageUnavailable("topic delete kept conflicting; retry")

        deleted = await self._io(run)
        self.notifier.notify(topic)
        if deleted is not None and deleted.sealed_through > 0 and self.segments is not None:
            self.submit_io(self._purge_sealed, deleted)
        return deleted

    def _purge_sealed(self, head: Head) -> int:
        """Remove a deleted incarnation's sealed history: its segment objects, their index
        companions and lexicon runs, its segment items, then what `on_purged` forgets (its
        index catalogue) (nothing reads them any more: a stream that forks
        still read is held, not deleted). In the background after the delete; a process
        that dies part way leaves the rest (objects nothing points at). Segments removed."""
        store = self.segments
        if store is None:
            return 0
        removed = 0
        try:
            while True:
                segs = store.after(head, 0, 256)
                if not segs:
                    break
                self.blobs.delete_many([k for s in segs for k in object_keys(s.key)])
                store.delete_items(head, [s.last_seq for s in segs])
                removed += len(segs)
        except Exception:  # best effort: the delete itself has happened
            log.warning("purging %s's sealed history stopped", head.log_key, exc_info=True)
            return removed
        if self.sealed is not None:
            self.sealed.forget(head)
        for forget in self.on_purged:
            try:
                forget(head)
            except Exception:  # best effort, as above
                log.warning("forgetting %s's indexes stopped", head.log_key, exc_info=True)
        return removed

    # --- append (group commit) ----------------------------------------------------------
    async def append(self, topic: str, req: AppendRequest) -> AppendResult:
        loop = asyncio.get_running_loop()
        pending = _Pending(req, loop.create_future(), len(req.records))
        writer = self._writers.setdefault(topic, _Writer())
        writer.queue.append(pending)
        if writer.task is None or writer.task.done():
            writer.task = loop.create_task(self._drain(topic, writer))
        return await pending.future

    async def _drain(self, topic: str, writer: _Writer) -> None:
        limit = self.settings.group_commit_max_records
        while writer.queue:
            group: list[_Pending] = [writer.queue.popleft()]
            total = group[0].n
            while writer.queue and total + writer.queue[0].n <= limit and len(group) < 64:
                p = writer.queue.popleft()
                group.append(p)
                total += p.n
            try:
                results = await self._io(self._commit_group, topic, [p.req for p in group])
            except BaseException as exc:  # every waiter learns of the failure
                self._head_cache.pop(topic, None)  # the commit's outcome may be unknown
                for p in group:
                    if not p.future.done():
                        p.future.set_exception(exc)
                if not isinstance(exc, Exception):
                    raise
                continue
            for p, r in zip(group, results, strict=True):
                if p.future.done():
                    continue
                if isinstance(r, BaseException):
                    p.future.set_exception(r)
                else:
                    p.future.set_result(r)
            self.notifier.notify(topic)
            self._maybe_upkeep(topic)
        if writer.task is asyncio.current_task() and not writer.queue:
            self._writers.pop(topic, None)

    def _maybe_upkeep(self, topic: str) -> None:
        """Start sealing/eviction of a topic in the background once an append took it past
        a threshold or a cap (at most once per upkeep_interval_s per topic; one run at a
        time). A request the rate limit or a running upkeep holds back is deferred, not
        dropped: it runs once, as soon as both allow, so a cap is enforced within about
        an interval of the append that passed it rather than at the next sweep."""
        head = self._head_cache.get(topic)
        if (
            head is None
            or self.upkeep is None
            or not self.settings.tiering.inline
            or not upkeep_due(head, self.settings.tiering)
        ):
            return
        self._request_upkeep(topic, asyncio.get_running_loop())

    def _request_upkeep(self, topic: str, loop: asyncio.AbstractEventLoop) -> None:
        """Run upkeep of `topic` now if allowed, else once later (on the event loop)."""
        if topic in self._upkeep_deferred:
            return  # a later run is already arranged; it sees this append too
        if topic in self._upkeep_running:
            self._upkeep_deferred.add(topic)  # _upkeep_ready asks again
            return
        wait = self._upkeep_at.get(topic, -math.inf) + self.upkeep_interval_s - time.monotonic()
        if wait > 0:
            self._upkeep_deferred.add(topic)
            loop.call_later(wait, self._upkeep_ready, topic, loop, False)
            return
        upkeep = self.upkeep
        if upkeep is None:
            return
        self._upkeep_at[topic] = time.monotonic()
        self._upkeep_running.add(topic)

        def run() -> None:
            try:
                upkeep(topic)
            except Exception:  # upkeep is retried by the next append and the sweep
                log.warning("upkeep of %s failed", topic, exc_info=True)
            finally:
                try:
                    loop.call_soon_threadsafe(self._upkeep_ready, topic, loop, True)
                except RuntimeError:  # the loop closed: nothing more to arrange
                    self._upkeep_running.discard(topic)

        try:
            self._bg_pool.submit(run)
        except RuntimeError:  # the engine closed
            self._upkeep_running.discard(topic)

    def _upkeep_ready(self, topic: str, loop: asyncio.AbstractEventLoop, ran: bool) -> None:
        """A run finished (`ran`) or a deferral's wait is over: start a deferred request."""
        if ran:
            self._upkeep_running.discard(topic)
            if topic not in self._upkeep_deferred:
                return
        self._upkeep_deferred.discard(topic)
        self._request_upkeep(topic, loop)

    def _commit_group(
        self, topic: str, reqs: list[AppendRequest]
    ) -> list[AppendResult | HeadwaterError]:
        results: list[AppendResult | HeadwaterError | None] = [None] * len(reqs)
        head = self._head_cache.get(topic)
        verified = head is None  # read from storage now, not this process's last commit
        if head is None:
            head = self.heads.get(topic)
        deadline = time.monotonic() + APPEND_BUDGET_S
        conflicts = 0
        while True:
            live = [i for i, r in enumerate(results) if r is None]
            if not live:
                break
            outcome = self._try_commit(topic, head, reqs, live, results, verified)
            verified = True  # retries start from the head the failed condition saw, or a read
            if outcome is None:
                break
            head, conflicted = outcome
            if conflicted:
                conflicts += 1
                # Give up only on contention: past the budget AND after several lost races.
                # Time spent in slow or retried storage calls (botocore retries a lost or
                # late answer itself) is not contention, and one race lost after it must
                # not turn an append that can still succeed into a 503.
                if conflicts >= MIN_CONFLICTS_TO_GIVE_UP and time.monotonic() > deadline:
                    raise StorageUnavailable(
                        "append kept conflicting with other writers; retry",
                        headers={"Retry-After": "1"},
                    )
                # Jittered backoff keeps racing processes fair under sustained contention.
                if conflicts > 2:
                    time.sleep(random.uniform(0, min(0.05, 0.001 * 2**conflicts)))
        return [r for r in results if r is not None]

    def _try_commit(
        self,
        topic: str,
        head: Head | None,
        reqs: list[AppendRequest],
        live: list[int],
        results: list[AppendResult | HeadwaterError | None],
        verified: bool = True,
    ) -> tuple[Head | None, bool] | None:
        """One attempt. Fills `results` for requests it settles; returns None when done, or
        (fresh head, lost a race) to retry the remaining requests with.

        Guards may judge on this process's cached head: when anything commits, the condition
        proved that head current, and every verdict with it. Verdicts that write nothing
        (a duplicate, a conflict) on an unverified head are judged again on a read."""
        creating = head is None or head.deleted
        creator: int | None = None
        if creating:
            for i in live:
                if reqs[i].create is False:
                    results[i] = TopicNotFound(topic)
            live = [i for i in live if results[i] is None]
            if not live:
                return None
            creator = live[0]
            fresh = topic_config.resolve(reqs[creator].config or {})
            base = self._fresh_head(topic, head, fresh, reqs[creator].base_seq)
        else:
            assert head is not None
            base = head
        cfg = base.cfg

        # discard:"reject" caps: admit requests in order while they fit, reject the rest.
        cap_n, cap_b = cfg.cap_records, cfg.cap_bytes
        reject = cfg.rejects_over_cap
        count, nbytes = base.count, base.bytes
        admitted: list[int] = []
        seen_keys: dict[str, int] = {}
        window = cfg.idempotency_window_ms
        ext = base.ext
        guarded = False
        provisional: list[int] = []  # settled by a guard in this attempt: redo on a retry
        notes: dict[int, Any] = {}
        for i in live:
            r = reqs[i]
            key = r.idempotency_key if window > 0 else None
            if key is not None and key in seen_keys:
                continue  # same key twice in one group: settled from the first below
            n, b = len(r.records), sum(rec.size for rec in r.records)
            if reject and ((cap_n > 0 and count + n > cap_n) or (cap_b > 0 and nbytes + b > cap_b)):
                results[i] = TopicFull(
                    f"topic {topic!r} is full (discard: reject)",
                    detail={"topic": topic, "cap_records": cap_n, "cap_bytes": cap_b},
                )
                continue
            if r.guard is not None:
                guarded = True
                tail = base.head_seq + (count - base.count)  # after the requests admitted so far
                try:
                    verdict = r.guard(base, ext, tail)
                except HeadwaterError as exc:
                    results[i] = exc
                    provisional.append(i)
                    continue
                if isinstance(verdict, Settle):
                    results[i] = AppendResult(0, 0, tail, False, True, verdict.note)
                    provisional.append(i)
                    continue
                ext = verdict.ext
                notes[i] = verdict.note
            count, nbytes = count + n, nbytes + b
            admitted.append(i)
            if key is not None:
                seen_keys[key] = i
        if not admitted:
            if provisional and not verified:
                for i in provisional:
                    results[i] = None
                return self.heads.get(topic), False
            self._settle_duplicates(reqs, live, results, seen_keys, base)
            return None

        # Resource caps (spec §11): a new topic takes a max_topics slot, the payload counts
        # against max_total_bytes; both are given back if this attempt does not commit.
        payload = sum(rec.size for i in admitted for rec in reqs[i].records)
        reserved = self._reserve_append(creating, payload)
        if isinstance(reserved, Throttled):
            for i in admitted:
                results[i] = reserved
            self._settle_duplicates(reqs, live, results, seen_keys, base)
            return None
        committed = False
        try:
            outcome, committed = self._commit_admitted(
                topic,
                head,
                base,
                reqs,
                live,
                admitted,
                seen_keys,
                results,
                creating,
                creator,
                GuardState(ext, notes) if guarded else None,
            )
            if outcome is not None:
                for i in provisional:  # decided on a head that has since moved
                    results[i] = None
            return outcome
        finally:
            if not committed:
                self.quota_release(TOPICS, reserved[0])
                self.quota_release(TOTAL_BYTES, reserved[1])

    def _reserve_append(self, creating: bool, payload: int) -> tuple[int, int] | Throttled:
        if self.quotas is None:
            return 0, 0
        topic_slot = 0
        try:
            if creating:
                self.quotas.reserve(TOPICS, 1)
                topic_slot = 1
            byte_slot = payload if self.quotas.bytes_enabled else 0
            self.quotas.reserve(TOTAL_BYTES, byte_slot)
        except Throttled as exc:
            self.quota_release(TOPICS, topic_slot)
            return exc
        return topic_slot, byte_slot

    def _commit_admitted(
        self,
        topic: str,
        head: Head | None,
        base: Head,
        reqs: list[AppendRequest],
        live: list[int],
        admitted: list[int],
        seen_keys: dict[str, int],
        results: list[AppendResult | HeadwaterError | None],
        creating: bool,
        creator: int | None,
        guard: GuardState | None = None,
    ) -> tuple[tuple[Head | None, bool] | None, bool]:
        """Write the admitted requests as one frame: ((retry head, conflicted) or None when
        settled, whether the frame committed)."""
        # Append time never goes back on a topic (several processes, skewed clocks); an
        # append-time hint may pick an earlier time than now, but not one before the last.
        hints = [h for i in admitted if (h := reqs[i].ts_hint) is not None]
        now = max(hints) if len(hints) == len(admitted) else self.clock()
        now = max(now, base.last_write_ts or 0)
        cfg = base.cfg
        epoch = base.epoch
        window = cfg.idempotency_window_ms
        cap_n, cap_b = cfg.cap_records, cfg.cap_bytes
        reject = cfg.rejects_over_cap
        first = base.head_seq + 1
        seq = first
        records: list[NewRecord] = []
        spans: dict[int, tuple[int, int]] = {}
        for i in admitted:
            n = len(reqs[i].records)
            spans[i] = (seq, seq + n - 1)
            records.extend(reqs[i].records)
            seq += n
        last = seq - 1
        payload = sum(r.size for r in records)
        blob = encode_records(records)
        spill_key: str | None = None
        if len(blob) > self.settings.spill_threshold_bytes:
            spill_key = (
                f"{SPILL_PREFIX}{object_key_component(topic)}/{epoch}/{last}-{uuid.uuid4().hex}"
            )
            self.blobs.put(spill_key, blob)
        else:
            blob = compress_frame(blob)

        tags: dict[str, list[int]] = {}
        for offset, rec in enumerate(records):
            if rec.tag is not None:
                tags.setdefault(rec.tag, []).append(first + offset)
        entries = [TagEntry(t, last, tuple(s)) for t, s in tags.items()]
        idem = [
            IdemEntry(reqs[i].idempotency_key, *spans[i], now + window)  # type: ignore[arg-type]
            for i in admitted
            if reqs[i].idempotency_key is not None and window > 0
        ]
        inline_tags = len(entries) + len(idem) + 2 <= MAX_TXN_ITEMS
        if len(idem) + 2 > MAX_TXN_ITEMS:
            raise InvalidRequest("too many idempotent writes in one group")

        new_head: Head | None = None
        if creating:
            new_head = dataclasses.replace(
                base,
                head_seq=last,
                earliest_seq=base.earliest_seq,
                count=last - first + 1,
                bytes=payload,
                last_write_ts=now,
                tag_pending={} if inline_tags or not entries else {last: first},
                unsealed_bytes=payload,
                ext=guard.ext if guard is not None else base.ext,
            )
        max_count = max_bytes = None
        if reject and not creating:
            added_n = last - first + 1
            max_count = cap_n - added_n if cap_n > 0 else None
            max_bytes = cap_b - payload if cap_b > 0 else None
        commit = AppendCommit(
            topic=topic,
            expected=head,
            new_head=new_head,
            first_seq=first,
            last_seq=last,
            ts=now,
            blob=None if spill_key else blob,
            spill_key=spill_key,
            payload_bytes=payload,
            tag_entries=entries if inline_tags else [],
            tag_pending=bool(entries) and not inline_tags and not creating,
            idem=idem,
            max_count=max_count,
            max_bytes=max_bytes,
            expires_s=self._frame_expiry_s(cfg, now),
            ext_expected=base.ext if guard is not None and not creating else None,
            ext_new=guard.ext if guard is not None and not creating else None,
        )
        try:
            repeated = self.tail.commit_append(commit)
        except AppendRejected as rej:
            cur = rej.current_head
            if (
                rej.unconfirmed
                and cur is not None
                and cur.epoch == epoch
                and (cur.trimmed_through >= last or cur.evict_floor > last)
            ):
                # An earlier attempt may have applied and its frame since been sealed away or
                # evicted: neither writing again (a duplicate) nor refusing (maybe a lie).
                raise OutcomeUnknown(
                    "storage did not confirm the append and its seqs have since left the "
                    "tail; it may or may not have applied (retry with an idempotency key)"
                ) from rej
            if spill_key:
                self.blobs.delete_many([spill_key])
            for i in admitted:
                key = reqs[i].idempotency_key
                if key is not None and key in rej.idem_hits:
                    hit = rej.idem_hits[key] or self.tail.get_idempotency(base, key, now)
                    if hit is not None:
                        results[i] = AppendResult(
                            hit.first_seq, hit.last_seq, base.head_seq, False, True
                        )
            self._head_cache.pop(topic, None)
            if rej.head_conflict or not rej.idem_hits:
                return (rej.current_head or self.heads.get(topic), True), False
            return (head, False), False
        # Committed.
        committed = new_head or dataclasses.replace(
            base,
            head_seq=last,
            count=base.count + (last - first + 1),
            bytes=base.bytes + payload,
            last_write_ts=now,
            unsealed_bytes=base.unsealed_bytes + payload,
            ext=guard.ext if guard is not None else base.ext,
        )
        if repeated:
            # A lost response, retried: our commit applied, but others may have appended
            # since, so the head after it is not known here.
            self._head_cache.pop(topic, None)
        else:
            self._head_cache[topic] = committed
            self.known.note(committed)
        frame = Frame(
            first_seq=first,
            last_seq=last,
            ts=now,
            records=[stored(r, first + k, now) for k, r in enumerate(records)],
            payload_bytes=payload,
        )
        self.cache.put(committed.log_key, frame, committed.del_ver)
        notes = guard.notes if guard is not None else {}
        for i in admitted:
            results[i] = AppendResult(
                *spans[i], last, creating and i == creator, False, notes.get(i), now
            )
        self._settle_duplicates(reqs, live, results, seen_keys, committed)
        if entries and not inline_tags:
            try:
                self.tail.write_tag_entries(committed, entries)
                self.heads.clear_tag_pending(committed, last)
            except HeadwaterError:
                # The records are committed, so the write must succeed; the head still marks
                # the frame tag-pending and the next tag delete indexes it first.
                log.warning("tag index for %s frame %d left pending", topic, last, exc_info=True)
        return None, True

    def _frame_expiry_s(self, cfg: topic_config.TopicConfig, now: int) -> int | None:
        """Frames of the lossy classes carry a DynamoDB TTL well past their retention: the
        sweep reclaims them first (keeping the counters exact); DynamoDB's TTL is the
        backstop for a deployment whose sweep never runs."""
        window = class_window_ms(cfg, self.settings.tiering)
        return (now + window) // 1000 + TTL_BACKSTOP_S if window else None

    @staticmethod
    def _settle_duplicates(
        reqs: list[AppendRequest],
        live: list[int],
        results: list[AppendResult | HeadwaterError | None],
        seen_keys: dict[str, int],
        head: Head,
    ) -> None:
        for i in live:
            key = reqs[i].idempotency_key
            if results[i] is None and key is not None and key in seen_keys:
                orig = results[seen_keys[key]]
                if isinstance(orig, AppendResult):
                    results[i] = AppendResult(
                        orig.first_seq, orig.last_seq, head.head_seq, False, True
                    )
                elif orig is not None:
                    results[i] = orig

    # --- diff ---------------------------------------------------------------------------
    async def diff(self, topic: str, req: DiffRequest) -> DiffResult:
        known = None
        if req.consistency == "eventual" and self.hub.watched[topic] > 0:
            # Live readers: the hub confirms watched heads every poll interval. A one-shot
            # reader (a Lambda woken by the log stream) always reads the head strongly.
            known = self.known.fresh(topic, 2 * self.settings.poll_interval_ms / 1000 + 0.1)
        # Answered on the event loop, with no storage call, when the known head and the frame
        # cache suffice (live readers woken by an append in this process).
        cached = None
        if known is not None and not known.deleted:
            cached = self._diff_cached(known, req)
        result = (
            cached if cached is not None else await self._io(self._diff_sync, topic, req, known)
        )
        if req.wait_ms <= 0 or result.records or not result.caught_up:
            await self._touch(result.head)
            return result
        deadline = time.monotonic() + req.wait_ms / 1000
        start = result.next_from_seq
        poll = 0.025
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return result
            woke = await self.notifier.wait(topic, min(poll, remaining))
            if not woke:
                # Another process may have appended: a cheap eventually consistent head read.
                head = await self._io(lambda: self.heads.get(topic, consistent=False))
                poll = min(poll * 2, self.settings.poll_interval_ms / 1000)
                if head is None or head.deleted:
                    raise TopicNotFound(topic)
                if head.head_seq <= start:
                    continue
            req2 = dataclasses.replace(req, from_seq=start, wait_ms=0)
            result = await self._io(self._diff_sync, topic, req2)
            if result.records or not result.caught_up:
                return result
            start = result.next_from_seq

    def _diff_sync(self, topic: str, req: DiffRequest, known: Head | None = None) -> DiffResult:
        head = known
        for _ in range(4):
            if head is None:
                head = self.heads.get(topic)
                if head is not None:
                    self.known.note(head)
            if head is None or head.deleted:
                raise TopicNotFound(topic)
            try:
                return self._diff_head(head, req)
            except StaleHead:
                head = None  # trimmed or evicted under a head we read earlier: read it again
        raise StorageUnavailable(
            "the log kept moving under the read; retry", headers={"Retry-After": "1"}
        )

    def _horizon(self, head: Head) -> int | None:
        """Records with $ts below this are expired (None: the topic has no TTL)."""
        ttl = retention_ms(head.cfg, self.settings.tiering)
        return self.clock() - ttl if ttl > 0 else None

    def _diff_head(self, head: Head, req: DiffRequest) -> DiffResult:
        """One diff against a head (spec §3.3): a tombstone when the cursor fell below the
        involuntary floor (evicted, expired) or belongs to a deleted incarnation."""
        from_seq = req.from_seq
        tomb: Tombstone | None = None
        reasons: set[str] = set()
        missed = 0
        if head.prev_head_seq and head.head_seq < from_seq <= head.prev_head_seq:
            # A cursor past the head that the previous incarnation reached: the topic was
            # deleted and recreated since this consumer read it. Start the new one over.
            tomb = Tombstone(
                from_seq + 1,
                head.prev_head_seq,
                "recreated",
                head.prev_head_seq - from_seq,
                head.first_live_seq,
                head.head_seq,
            )
            from_seq = 0
        elif from_seq + 1 < head.evict_floor:
            reasons = eviction_reason(head.evictions, from_seq + 1, head.evict_floor - 1)
            reasons = reasons or {"cap"}
            missed = head.evict_floor - 1 - from_seq
        start = max(from_seq, head.earliest_seq - 1)
        if start >= head.head_seq:
            view = self._tombstoned(head, tomb, reasons, req.from_seq, missed, head.earliest_seq)
            return DiffResult([], max(start, head.head_seq), head, 0, view)
        frames = self.frames_after(head, start, req.limit, req.max_bytes)
        floor = head.earliest_seq
        horizon = self._horizon(head)
        if horizon is not None and self._expired_prefix(head, frames, start, horizon):
            floor, skipped = self._ttl_floor(head, start, horizon)
            reasons.add("ttl")
            missed += skipped
            start = floor - 1
            frames = (
                self.frames_after(head, start, req.limit, req.max_bytes)
                if start < head.head_seq
                else []
            )
        result = self._diff_frames(head, req, start, frames)
        view = self._tombstoned(head, tomb, reasons, req.from_seq, missed, floor)
        if view is None:
            return result
        if floor > head.earliest_seq:
            result = dataclasses.replace(result, head=dataclasses.replace(head, earliest_seq=floor))
        return dataclasses.replace(result, tombstone=view)

    @staticmethod
    def _tombstoned(
        head: Head,
        tomb: Tombstone | None,
        reasons: set[str],
        from_seq: int,
        missed: int,
        floor: int,
    ) -> Tombstone | None:
        if tomb is not None or not reasons:
            return tomb
        earliest = max(floor, head.first_live_seq)
        return Tombstone(
            from_seq + 1,
            earliest - 1,
            tombstone_reason(reasons),
            max(missed, 0),
            earliest,
            head.head_seq,
        )

    @staticmethod
    def _expired_prefix(head: Head, frames: list[Frame], start: int, horizon: int) -> bool:
        """Is the first live record after `start` past the TTL?"""
        for frame in frames:
            if frame.last_seq <= start:
                continue
            for rec in frame.records:
                if (
                    rec.seq > start
                    and rec.seq >= head.earliest_seq
                    and rec.seq not in frame.deleted
                ):
                    return rec.ts < horizon
        return False

    def _ttl_floor(self, head: Head, start: int, horizon: int) -> tuple[int, int]:
        """The first seq after `start` at or past the TTL horizon (expiry runs by position:
        the floor stops at the first record still inside the TTL), and about how many live
        records lie below it. Walks segment and block metadata and frame summaries; decodes
        only the block where the horizon falls."""
        after, skipped = start, 0
        while self.sealed is not None and after < head.sealed_through:
            found = self.sealed.segment_after(head, after)
            if found is None:
                break
            item, info = found
            if item.max_ts < horizon:
                skipped += max(0, item.count - item.deleted_count)
                after = item.last_seq
                continue
            for b in blocks_between(info, after, item.last_seq):
                if b.max_ts < horizon:
                    skipped += b.records
                    after = b.last_seq
                    continue
                for rec in self.sealed.frames(head, after, 1)[0].records:
                    if rec.seq > after and rec.ts >= horizon:
                        return rec.seq, skipped
                    skipped += rec.seq > after
                after = b.last_seq
            after = max(after, item.last_seq)
        after = max(after, head.sealed_through)
        while after < head.head_seq:
            summaries = self.tail.frame_summaries(head, after, head.head_seq, 256)
            if not summaries:
                break
            for f in summaries:
                if f.ts >= horizon:
                    return max(f.first_seq, after + 1), skipped
                skipped += f.last_seq - max(f.first_seq, after + 1) + 1 - f.deleted_count
                after = f.last_seq
        return head.head_seq + 1, skipped

    def _diff_cached(self, head: Head, req: DiffRequest) -> DiffResult | None:
        """The diff from a known head and the frame cache alone, or None if it needs a read
        from storage (or carries a tombstone). Live readers woken by an append in this
        process take this path."""
        start = max(req.from_seq, head.earliest_seq - 1)
        if req.from_seq + 1 < head.evict_floor or req.from_seq > head.head_seq:
            return None
        if start >= head.head_seq:
            return DiffResult([], max(req.from_seq, head.head_seq), head, 0)
        if start < head.sealed_through:
            return None
        frames = self.cache.run(head.log_key, start, head.del_ver)
        covered = frames[-1].last_seq if frames else start
        if covered < head.head_seq and covered - start < req.limit:
            return None
        horizon = self._horizon(head)
        if horizon is not None and self._expired_prefix(head, frames, start, horizon):
            return None
        return self._diff_frames(head, req, start, frames)

    def _diff_frames(
        self, head: Head, req: DiffRequest, start: int, frames: list[Frame]
    ) -> DiffResult:
        # Compare stored JSON literals: no per-record decoding on the read path.
        nodes = (
            frozenset(json_literal(n) for n in req.nodes) if head.cfg.dedupe_node else frozenset()
        )
        horizon = self._horizon(head)
        expired_before = horizon if horizon is not None else 0
        out: list[bytes] = []
        budget = req.max_bytes
        scan_cap = max(req.limit * 8, 1024)
        scanned = 0
        last_examined = start
        done = False
        for frame in frames:
            if frame.last_seq <= start:
                continue
            for rec in frame.records:
                if rec.seq <= start:
                    continue
                if rec.seq > head.head_seq:
                    done = True
                    break
                if out and (len(out) >= req.limit or rec.size > budget or scanned >= scan_cap):
                    done = True
                    break
                scanned += 1
                last_examined = rec.seq
                if rec.seq in frame.deleted or rec.seq < head.earliest_seq:
                    continue
                if rec.node_json is not None and rec.node_json in nodes:
                    continue
                if rec.ts < expired_before:
                    continue
                out.append(rec.render(req.include_tags, req.include_meta))
                budget -= rec.size
            if done:
                break
        if not done and frames and last_examined < frames[-1].last_seq <= head.head_seq:
            last_examined = frames[-1].last_seq  # the rest of the last frame was a seq gap
        return DiffResult(out, last_examined, head, scanned)

    def frames_after(self, head: Head, start: int, want: int, max_bytes: int = 0) -> list[Frame]:
        """Frames (sealed blocks, then tail frames) holding the records after `start`: at
        least `want` records' worth, or `max_bytes` payload bytes (0: no byte budget),
        unless the log ends first."""
        out: list[Frame] = []
        if start < head.sealed_through:
            if self.sealed is None:
                raise StorageUnavailable("this process cannot read sealed history")
            out = self.sealed.frames(head, start, want, max_bytes)
            covered = out[-1].last_seq if out else start
            got = sum(f.payload_bytes for f in out)
            if covered < head.sealed_through and (covered - start >= want or 0 < max_bytes <= got):
                return out
            want -= max(0, covered - start)
            max_bytes = max(1, max_bytes - got) if max_bytes else 0
            start = max(covered, head.sealed_through)
            if want <= 0 or start >= head.head_seq:
                return out
        frames = self.cache.run(head.log_key, start, head.del_ver)
        covered = frames[-1].last_seq if frames else start
        have = covered - start
        cached = sum(f.payload_bytes for f in frames)
        if covered < head.head_seq and have < want and not 0 < max_bytes <= cached:
            budget = max(1, max_bytes - cached) if max_bytes else 0
            fetched = self.tail.read_frames(head, covered, head.head_seq, want - have, budget)
            if not fetched or fetched[0].first_seq > covered + 1:
                raise StaleHead
            for f in fetched:
                self.cache.put(head.log_key, f, head.del_ver)
            frames = frames + [f for f in fetched if f.last_seq > covered]
        return out + frames

    # --- raw ranges and head state (protocol layers: Durable Streams) ---------------------
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
        the caller) saves a read."""
        return await self._io(
            self._read_range_sync, topic, after, limit, max_bytes, tag_json, head, upto
        )

    def _read_range_sync(
        self,
        topic: str,
        after: int,
        limit: int,
        max_bytes: int,
        tag_json: bytes | None,
        head: Head | None,
        upto: int | None = None,
    ) -> RangeRead:
        for _ in range(4):
            if head is None:
                head = self.heads.get(topic)
            if head is None or head.deleted:
                raise TopicNotFound(topic)
            capped = head
            if upto is not None and upto < head.head_seq:
                capped = dataclasses.replace(head, head_seq=upto)  # read as if it ended there
            try:
                rr = self._range_of(capped, after, limit, max_bytes, tag_json)
                return rr if capped is head else dataclasses.replace(rr, head=head)
            except StaleHead:
                head = None
        raise StorageUnavailable(
            "the log kept moving under the read; retry", headers={"Retry-After": "1"}
        )

    async def read_seqs(self, head: Head, seqs: Sequence[int]) -> list[StoredRecord]:
        """The stored records at `seqs` (ascending) of the log as of `head`, in that order,
        leaving out deleted and trimmed ones: a reader that knows which entries it wants
        (the index families' candidates) fetches only the blocks holding them."""
        return await self._io(self._read_seqs_sync, head, list(seqs))

    def _read_seqs_sync(self, head: Head, seqs: list[int]) -> list[StoredRecord]:
        for _ in range(4):
            try:
                return self._seqs_of(head, seqs)
            except StaleHead:
                fresh = self.heads.get(head.topic)
                if fresh is None or fresh.deleted or fresh.epoch != head.epoch:
                    raise TopicNotFound(head.topic) from None
                head = dataclasses.replace(
                    fresh, head_seq=min(fresh.head_seq, head.head_seq)
                )  # the same snapshot end, on the current segments and trim point
        raise StorageUnavailable(
            "the log kept moving under the read; retry", headers={"Retry-After": "1"}
        )

    def _seqs_of(self, head: Head, seqs: list[int]) -> list[StoredRecord]:
        wanted = [q for q in seqs if head.earliest_seq <= q <= head.head_seq]
        cut = bisect.bisect_right(wanted, head.sealed_through)
        frames: list[Frame] = []
        if cut:
            if self.sealed is None:
                raise StorageUnavailable("this process cannot read sealed history")
            frames = self.sealed.frames_holding(head, wanted[:cut])
        out = _pick(frames, wanted[:cut])
        i = cut
        while i < len(wanted):  # the unsealed tail: a run of frames from the cache or table
            frames = self.frames_after(head, wanted[i] - 1, 1)
            if not frames or frames[-1].last_seq < wanted[i]:
                break
            run = [q for q in wanted[i:] if q <= frames[-1].last_seq]
            out += _pick(frames, run)
            i += len(run)
        return out

    def _range_of(
        self, head: Head, after: int, limit: int, max_bytes: int, tag_json: bytes | None
    ) -> RangeRead:
        start = max(after, head.earliest_seq - 1)
        if start >= head.head_seq:
            return RangeRead(head, [], max(after, head.head_seq), 0)
        # A key-filtered read examines up to 64x its page before answering with what it has.
        want = limit if tag_json is None else limit * 64
        frames = self.frames_after(head, start, want, max_bytes if tag_json is None else 0)
        out: list[StoredRecord] = []
        budget = max_bytes
        scanned = 0
        examined = start
        for frame in frames:
            if frame.last_seq <= start:
                continue
            for rec in frame.records:
                if rec.seq <= start:
                    continue
                if rec.seq > head.head_seq or (
                    out and (len(out) >= limit or len(rec.data_raw) > budget)
                ):
                    return RangeRead(head, out, examined, scanned)
                if scanned >= max_bytes * 64 and tag_json is not None:
                    return RangeRead(head, out, examined, scanned)
                examined = rec.seq
                if rec.seq in frame.deleted or rec.seq < head.earliest_seq:
                    continue
                scanned += len(rec.data_raw)
                if tag_json is not None and rec.tag_json != tag_json:
                    continue
                out.append(rec)
                budget -= len(rec.data_raw)
        if frames and examined < frames[-1].last_seq <= head.head_seq:
            examined = frames[-1].last_seq
        return RangeRead(head, out, examined, scanned)

    async def seek_time(self, head: Head, ts: int) -> int:
        """The seq just before the first record appended at or after `ts` (append times
        never go back on a topic, so this is a search over segment, block and frame
        metadata; it decodes at most one block)."""

        def run() -> int:
            start = head.earliest_seq - 1
            return min(self._ttl_floor(head, start, ts)[0], head.head_seq + 1) - 1

        return await self._io(run)

    def head_hint(self, topic: str) -> Head | None:
        """The head this process last committed or saw for `topic`, without I/O: possibly
        stale (another process may have moved it), so only for decisions a conditional
        commit re-checks (an append's guard)."""
        return self._head_cache.get(topic)

    async def head_of(self, topic: str, *, consistent: bool = True) -> Head | None:
        return await self._io(lambda: self.heads.get(topic, consistent=consistent))

    async def create_with_ext(
        self, topic: str, ext: str, replacing: Head | None, base_seq: int = 0
    ) -> Head | None:
        """Create a record-less topic holding `ext` whose log starts after `base_seq`
        (conditional: None when it lost a race)."""
        if not ext:
            raise ValueError("ext must not be empty")

        def run() -> Head | None:
            new = dataclasses.replace(
                self._fresh_head(topic, replacing, topic_config.resolve({}), base_seq), ext=ext
            )
            if not self._create_head(new, replacing):
                return None
            self.known.note(new)
            return new

        head = await self._io(run)
        if head is not None:
            self.notifier.notify(topic)
        return head

    async def put_ext(self, head: Head, ext: str) -> Head | None:
        """Set a live head's ext iff its head_seq and ext are as read (None: it moved)."""
        ok = await self._io(self.heads.put_ext, head, ext)
        if not ok:
            return None
        new = dataclasses.replace(head, ext=ext)
        self._head_cache[head.topic] = new
        self.known.note(new)
        self.notifier.notify(head.topic)
        return new

    async def touch_read(self, head: Head, now: int) -> None:
        await self._io(self.heads.touch_read, head, now)

    async def wait_change(self, topic: str, seen: Head, timeout_s: float) -> Head | None:
        """Wait until the topic's head moves past `seen` (an append, an ext change, a
        delete): the new head (deleted heads included), or None at the timeout. Woken at
        once by commits in this process; other processes' are seen by polling."""
        deadline = time.monotonic() + timeout_s
        poll = 0.025
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            woke = await self.notifier.wait(topic, min(poll, remaining))
            head = self._head_cache.get(topic) if woke else None
            if head is None or head.epoch != seen.epoch or head.head_seq <= seen.head_seq:
                # Not this process's commit (or a delete): read it (eventually consistent
                # while polling; other processes' writes are seen within a poll interval).
                head = await self._io(partial(self.heads.get, topic, consistent=woke))
            if not woke:
                poll = min(poll * 2, self.settings.poll_interval_ms / 1000)
            if (
                head is None
                or head.deleted
                or head.epoch != seen.epoch
                or head.head_seq > seen.head_seq
                or head.ext != seen.ext
            ):
                return head

    # --- record delete ------------------------------------------------------------------
    async def delete_records(
        self, topic: str, before_seq: int | None, match: TagMatch | None
    ) -> DeleteResult:
        result = await self._io(self._delete_sync, topic, before_seq, match)
        self.notifier.notify(topic)
        return result

    async def delete_seqs(self, topic: str, seqs: Sequence[int]) -> DeleteResult:
        """Delete the records with these seqs (tail or sealed), by the same delete marks a
        tag delete writes; seqs that are absent or already deleted are skipped. `deleted`
        counts the records this call removed."""
        result = await self._io(self._delete_sync, topic, None, tuple(sorted(set(seqs))))
        self.notifier.notify(topic)
        return result

    def _delete_sync(
        self, topic: str, before_seq: int | None, match: TagMatch | tuple[int, ...] | None
    ) -> DeleteResult:
        for _ in range(MAX_ATTEMPTS):
            head = self.heads.get(topic)
            if head is None or head.deleted:
                raise TopicNotFound(topic)
            self._head_cache.pop(topic, None)
            bound = head.head_seq + 1
            upper = bound if before_seq is None else min(bound, before_seq)
            try:
                if match is None:
                    outcome = self._delete_prefix(head, upper)
                elif isinstance(match, tuple):
                    outcome = self._delete_marked(head, self._frames_holding(head, match))
                else:
                    outcome = self._delete_tagged(head, upper, match)
            except StaleHead:
                continue
            if outcome is not None:
                deleted, after = outcome
                self.known.forget(topic)  # the deleted sets changed: next reads are strong
                self.quota_release(TOTAL_BYTES, head.bytes - after.bytes)
                return DeleteResult(deleted, after)
        raise StorageUnavailable("delete kept conflicting; retry")

    def _delete_prefix(self, head: Head, upper: int) -> tuple[int, Head] | None:
        if upper <= head.earliest_seq:
            return 0, head
        count, nbytes = self.live_between(head, head.earliest_seq, upper)
        new_es = self.first_live(head, upper)
        ok = self.tail.commit_delete(
            DeleteCommit(
                head.topic,
                head.epoch,
                head.del_ver,
                [],
                count,
                nbytes,
                new_es,
                expected_sealed=head.sealed_through,
            )
        )
        if not ok:
            return None
        return count, self.after_delete(head, count, nbytes, new_es)

    def _records_between(
        self, head: Head, lo: int, hi: int
    ) -> Iterator[tuple[StoredRecord, Frame]]:
        """Every stored record with lo <= seq < hi (deleted ones too), with its frame."""
        after = lo - 1
        while after < hi - 1:
            frames = self.frames_after(head, after, min(hi - 1 - after, 8192))
            moved = after
            for f in frames:
                if f.last_seq <= after:
                    continue
                for rec in f.records:
                    if after < rec.seq < hi:
                        yield rec, f
                moved = max(moved, f.last_seq)
            if moved == after:
                return
            after = moved

    def live_between(self, head: Head, lo: int, hi: int) -> tuple[int, int]:
        """Count and bytes of the live records with lo <= seq < hi. Whole segments count from
        their item's counters; the rest is read."""
        count = nbytes = 0
        while self.sealed is not None and lo <= head.sealed_through and lo < hi:
            found = self.sealed.segment_after(head, lo - 1)
            if found is None:
                break
            item, _ = found
            if not (lo <= item.first_seq and item.last_seq < hi):
                break
            count += item.count - item.deleted_count
            nbytes += item.bytes - item.deleted_bytes
            lo = item.last_seq + 1
        for rec, frame in self._records_between(head, lo, hi):
            if rec.seq not in frame.deleted:
                count += 1
                nbytes += rec.size
        return count, nbytes

    def _delete_tagged(self, head: Head, upper: int, match: TagMatch) -> tuple[int, Head] | None:
        self._complete_tag_index(head)
        entries = self.tail.tag_lookup(head, match.value, match.prefix)
        wanted: dict[int, list[int]] = {}
        for e in entries:
            seqs = [s for s in e.seqs if head.earliest_seq <= s < upper]
            if seqs:
                wanted.setdefault(e.frame_last_seq, []).extend(seqs)
        return self._delete_marked(head, wanted)

    def _frames_holding(self, head: Head, seqs: tuple[int, ...]) -> dict[int, list[int]]:
        """{last seq of the frame (or segment block) holding it: [seq, ...]} for the live
        records among `seqs`."""
        wanted: dict[int, list[int]] = {}
        for seq in seqs:
            if not head.earliest_seq <= seq <= head.head_seq:
                continue
            for rec, frame in self._records_between(head, seq, seq + 1):
                if rec.seq == seq and seq not in frame.deleted:
                    wanted.setdefault(frame.last_seq, []).append(seq)
        return wanted

    def _delete_marked(self, head: Head, wanted: dict[int, list[int]]) -> tuple[int, Head] | None:
        """Mark `wanted` ({frame last seq: seqs}) deleted, atomically with the head counters
        (in chunks of one transaction), then move the floor past a deleted prefix."""
        if not wanted:
            return 0, head
        # (in a segment, marks): sealed seqs are marked on their segment's item, the rest on
        # their tail frame.
        deletes: list[tuple[bool, FrameDelete]] = self._sealed_deletes(
            head,
            sorted(s for last, ss in wanted.items() if last <= head.sealed_through for s in ss),
        )
        tail_wanted = {k: v for k, v in wanted.items() if k > head.sealed_through}
        frames = self.tail.get_frames(head, list(tail_wanted)) if tail_wanted else {}
        for last, seqs in sorted(tail_wanted.items()):
            frame = frames.get(last)
            if frame is None:
                continue
            fresh = sorted(s for s in set(seqs) if s not in frame.deleted)
            if fresh:
                size = sum(frame.records[s - frame.first_seq].size for s in fresh)
                deletes.append((False, FrameDelete(last, tuple(fresh), size, frame.deleted_count)))
        if not deletes:
            return 0, head
        count = sum(len(d.seqs) for _, d in deletes)
        # A transaction holds at most 100 items: big deletes commit in chunks, each atomic
        # with its head counters; the floor moves once at the end.
        cur = head
        chunk_size = MAX_TXN_ITEMS - 1
        for i in range(0, len(deletes), chunk_size):
            chunk = deletes[i : i + chunk_size]
            c_n = sum(len(d.seqs) for _, d in chunk)
            c_b = sum(d.bytes for _, d in chunk)
            ok = self.tail.commit_delete(
                DeleteCommit(
                    cur.topic,
                    cur.epoch,
                    cur.del_ver,
                    [d for sealed, d in chunk if not sealed],
                    c_n,
                    c_b,
                    None,
                    expected_sealed=cur.sealed_through,
                    segments=[d for sealed, d in chunk if sealed],
                )
            )
            if not ok:
                return None if i == 0 else (sum(len(d.seqs) for _, d in deletes[:i]), cur)
            cur = self.after_delete(cur, c_n, c_b, None)
        new_es = self.first_live(cur, cur.earliest_seq)
        if new_es != cur.earliest_seq:
            while not self.tail.commit_delete(
                DeleteCommit(
                    cur.topic,
                    cur.epoch,
                    cur.del_ver,
                    [],
                    0,
                    0,
                    new_es,
                    expected_sealed=cur.sealed_through,
                )
            ):
                fresh_head = self.heads.get(cur.topic)
                if fresh_head is None or fresh_head.deleted:
                    break
                cur = fresh_head
                new_es = self.first_live(cur, cur.earliest_seq)
            cur = dataclasses.replace(cur, earliest_seq=new_es, del_ver=cur.del_ver + 1)
        return count, cur

    def _sealed_deletes(self, head: Head, seqs: list[int]) -> list[tuple[bool, FrameDelete]]:
        """Delete marks for sealed seqs, one per segment (sizes read from their blocks)."""
        if not seqs or self.sealed is None:
            return []
        by_segment: dict[int, list[StoredRecord]] = {}
        items: dict[int, SegmentItem] = {}
        records: dict[int, StoredRecord] = {}
        for seq in seqs:
            found = self.sealed.segment_after(head, seq - 1)
            if found is None or found[0].first_seq > seq or seq in found[0].deleted:
                continue
            item = found[0]
            if seq not in records:
                for frame in self.sealed.frames(head, seq - 1, 1):
                    for rec in frame.records:
                        records[rec.seq] = rec
            found_rec = records.get(seq)
            if found_rec is not None:
                items[item.last_seq] = item
                by_segment.setdefault(item.last_seq, []).append(found_rec)
        out: list[tuple[bool, FrameDelete]] = []
        for last, recs in sorted(by_segment.items()):
            uniq = {r.seq: r for r in recs}
            out.append(
                (
                    True,
                    FrameDelete(
                        last,
                        tuple(sorted(uniq)),
                        sum(r.size for r in uniq.values()),
                        items[last].deleted_count,
                    ),
                )
            )
        return out

    def advance_floor(self, topic: str) -> None:
        """Move earliest_seq past a deleted prefix (records deleted one by one, e.g. queue
        acks). One attempt: a concurrent delete wins, and the next call catches up."""
        head = self.heads.get(topic)
        if head is None or head.deleted:
            return
        try:
            floor = self.first_live(head, head.earliest_seq)
        except StaleHead:
            return
        if floor > head.earliest_seq and self.tail.commit_delete(
            DeleteCommit(
                topic,
                head.epoch,
                head.del_ver,
                [],
                0,
                0,
                floor,
                expected_sealed=head.sealed_through,
            )
        ):
            self.forget_head(topic)

    def forget_head(self, topic: str) -> None:
        """Records were deleted: the next reads of this topic take its head from storage."""
        self.known.forget(topic)
        self._head_cache.pop(topic, None)

    def first_live(self, head: Head, start: int) -> int:
        """First seq >= start that is not deleted (head_seq + 1 if none)."""
        for rec, frame in self._records_between(head, start, head.head_seq + 1):
            if rec.seq not in frame.deleted:
                return rec.seq
        return head.head_seq + 1

    @staticmethod
    def after_delete(head: Head, count: int, nbytes: int, new_es: int | None) -> Head:
        """The head as a delete of `count` records (`nbytes`) leaves it (a queue's acks)."""
        return dataclasses.replace(
            head,
            count=head.count - count,
            bytes=head.bytes - nbytes,
            earliest_seq=new_es if new_es is not None else head.earliest_seq,
            del_ver=head.del_ver + 1,
        )

    def _complete_tag_index(self, head: Head) -> None:
        """Index frames whose tag entries did not fit their commit (or whose writer died
        between commit and indexing). Idempotent."""
        if not head.tag_pending:
            return
        frames = self.tail.get_frames(head, list(head.tag_pending))
        for last in head.tag_pending:
            if last not in frames:  # evicted or trimmed since: nothing left to index
                self.heads.clear_tag_pending(head, last)
        for last, frame in frames.items():
            tags: dict[str, list[int]] = {}
            for rec in frame.records:
                if rec.tag is not None:
                    tags.setdefault(rec.tag, []).append(rec.seq)
            self.tail.write_tag_entries(
                head, [TagEntry(t, last, tuple(s)) for t, s in tags.items()]
            )
            self.heads.clear_tag_pending(head, last)
