"""Reads of /v0's diff (spec §3.3) with long-poll, and waiting for a head to move.

A diff is answered on the event loop from the known head and the frame cache when they
suffice (live readers woken by an append in this process), else from storage through the
shared frame scan."""

from __future__ import annotations

import dataclasses
import sys
import time
from functools import partial

from headwater.engine.core import STALE_READ_RETRIES, LogCore
from headwater.engine.ports import Head
from headwater.engine.records import Frame, json_literal
from headwater.engine.retention import eviction_reason, retention_ms, tombstone_reason
from headwater.engine.scan import FrameScan, StaleHead, records_in
from headwater.engine.topics import Topics
from headwater.engine.values import DiffRequest, DiffResult, Tombstone
from headwater.errors import StorageUnavailable, TopicNotFound

_NO_END = sys.maxsize


class DiffReader:
    def __init__(self, core: LogCore, scan: FrameScan, topics: Topics) -> None:
        self.core = core
        self.scan = scan
        self.topics = topics

    async def diff(self, topic: str, req: DiffRequest) -> DiffResult:
        c = self.core
        known = None
        if req.consistency == "eventual" and c.hub.watched[topic] > 0:
            # Live readers: the hub confirms watched heads every poll interval. A one-shot
            # reader (a Lambda woken by the log stream) always reads the head strongly.
            known = c.known.fresh(topic, 2 * c.settings.poll_interval_ms / 1000 + 0.1)
        cached = None
        if known is not None and not known.deleted:
            cached = self._cached(known, req)
        result = cached if cached is not None else await c.io(self.diff_sync, topic, req, known)
        if req.wait_ms <= 0 or result.records or not result.caught_up:
            await self.topics.touch(result.head)
            return result
        deadline = time.monotonic() + req.wait_ms / 1000
        start = result.next_from_seq
        poll = 0.025
        while True:
            woke, poll = await self._turn(topic, poll, deadline)
            if woke is None:
                return result
            if not woke:
                # Another process may have appended: a cheap eventually consistent head read.
                head = await c.io(partial(c.heads.get, topic, consistent=False))
                if head is None or head.deleted:
                    raise TopicNotFound(topic)
                if head.head_seq <= start and self._ours_past(topic, head.epoch, start) is None:
                    continue
            req2 = dataclasses.replace(req, from_seq=start, wait_ms=0)
            result = await c.io(self.diff_sync, topic, req2)
            if result.records or not result.caught_up:
                return result
            start = result.next_from_seq

    async def _turn(self, topic: str, poll: float, deadline: float) -> tuple[bool | None, float]:
        """One turn of a live wait on `topic`: (woke, the next poll interval); woke is None
        once `deadline` has passed. A commit of this process wakes it at once; otherwise
        the interval doubles up to the poll interval, and a turn without a wake-up while an
        append of this process commits is waited through rather than polled (`committing`)."""
        c = self.core
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None, poll
            if await c.notifier.wait(topic, min(poll, remaining)):
                return True, poll
            poll = min(poll * 2, c.settings.poll_interval_ms / 1000)
            if not self.committing(topic):
                return False, poll

    def committing(self, topic: str) -> bool:
        """Whether an append of this process to `topic` is committing (for less than the
        hole timeout). A live reader's poll of storage would then find at best the seqs it
        reserved and wait on them; its commit wakes the reader instead (a long-poll round
        trip on one server made a head read more per append once an append was two calls).
        Past the hole timeout readers poll, and fill the slot, as for any writer."""
        since = self.core.committing.get(topic)
        return (
            since is not None
            and time.monotonic() - since < self.core.settings.hole_timeout_ms / 1000
        )

    def _ours_past(self, topic: str, epoch: int, seq: int) -> Head | None:
        """This process's last committed head of `topic`, when it is past `seq` in `epoch`.
        A waiter polling storage is not waiting on the notifier, so the wake-up of a commit
        that lands meanwhile finds no one; checking here keeps it from waiting a whole poll
        interval more for data this process just wrote."""
        head = self.core.head_cache.get(topic)
        if head is None or head.deleted or head.epoch != epoch or head.head_seq <= seq:
            return None
        return head

    def diff_sync(self, topic: str, req: DiffRequest, known: Head | None = None) -> DiffResult:
        """One diff on the calling thread, from `known` when given (else a strong read)."""
        c = self.core
        head = known
        for _ in range(STALE_READ_RETRIES):
            if head is None:
                head = c.heads.get(topic)
                if head is not None:
                    c.known.note(head)
            if head is None or head.deleted:
                raise TopicNotFound(topic)
            try:
                return self._diff_head(head, req)
            except StaleHead:
                head = None  # trimmed or evicted under a head we read earlier: read it again
        raise StorageUnavailable(
            "the log kept moving under the read; retry", headers={"Retry-After": "1"}
        )

    def horizon(self, head: Head) -> int | None:
        """Records with $ts below this are expired (None: the topic has no TTL)."""
        ttl = retention_ms(head.cfg, self.core.settings.tiering)
        return self.core.clock() - ttl if ttl > 0 else None

    def _diff_head(self, head: Head, req: DiffRequest) -> DiffResult:
        """One diff against a head: a tombstone when the cursor fell below the involuntary
        floor (evicted, expired) or belongs to a deleted incarnation."""
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
            view = _tombstoned(head, tomb, reasons, req.from_seq, missed, head.earliest_seq)
            return DiffResult([], max(start, head.head_seq), head, 0, view)
        frames = self.scan.frames_after(head, start, req.limit, req.max_bytes)
        floor = head.earliest_seq
        horizon = self.horizon(head)
        if horizon is not None and _expired_prefix(head, frames, start, horizon):
            floor, skipped = self.scan.time_floor(head, start, horizon)
            reasons.add("ttl")
            missed += skipped
            start = floor - 1
            frames = (
                self.scan.frames_after(head, start, req.limit, req.max_bytes)
                if start < head.head_seq
                else []
            )
        result = self._diff_frames(head, req, start, frames)
        view = _tombstoned(head, tomb, reasons, req.from_seq, missed, floor)
        if view is None:
            return result
        if floor > head.earliest_seq:
            result = dataclasses.replace(result, head=dataclasses.replace(head, earliest_seq=floor))
        return dataclasses.replace(result, tombstone=view)

    def _cached(self, head: Head, req: DiffRequest) -> DiffResult | None:
        """The diff from a known head and the frame cache alone, or None if it needs a read
        from storage (or carries a tombstone)."""
        start = max(req.from_seq, head.earliest_seq - 1)
        if req.from_seq + 1 < head.evict_floor or req.from_seq > head.head_seq:
            return None
        if start >= head.head_seq:
            return DiffResult([], max(req.from_seq, head.head_seq), head, 0)
        frames = self.scan.frames_cached(head, start, req.limit)
        if frames is None:
            return None
        horizon = self.horizon(head)
        if horizon is not None and _expired_prefix(head, frames, start, horizon):
            return None
        return self._diff_frames(head, req, start, frames)

    def _diff_frames(
        self, head: Head, req: DiffRequest, start: int, frames: list[Frame]
    ) -> DiffResult:
        # Compare stored JSON literals: no per-record decoding on the read path.
        nodes = (
            frozenset(json_literal(n) for n in req.nodes) if head.cfg.dedupe_node else frozenset()
        )
        horizon = self.horizon(head)
        expired_before = horizon if horizon is not None else 0
        out: list[bytes] = []
        budget = req.max_bytes
        scan_cap = max(req.limit * 8, 1024)
        scanned = 0
        last_examined = start
        for rec, frame in records_in(frames, start, head.head_seq):
            if out and (len(out) >= req.limit or rec.size > budget or scanned >= scan_cap):
                return DiffResult(out, last_examined, head, scanned)
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
        if frames and last_examined < frames[-1].last_seq <= head.head_seq:
            last_examined = frames[-1].last_seq  # the rest of the last frame was a seq gap
        return DiffResult(out, last_examined, head, scanned)

    async def wait_change(self, topic: str, seen: Head, timeout_s: float) -> Head | None:
        """Wait until the topic's head moves past `seen` (an append, an ext change, a
        delete): the new head (deleted heads included), or None at the timeout. Woken at
        once by commits in this process; other processes' are seen by polling."""
        c = self.core
        deadline = time.monotonic() + timeout_s
        poll = 0.025
        while True:
            woke, poll = await self._turn(topic, poll, deadline)
            if woke is None:
                return None
            head = self._ours_past(topic, seen.epoch, seen.head_seq)
            if head is None:
                # Not this process's commit (or a delete): read it (eventually consistent
                # while polling; other processes' writes are seen within a poll interval).
                head = await c.io(partial(c.heads.get, topic, consistent=woke))
                ours = self._ours_past(topic, seen.epoch, seen.head_seq)
                if ours is not None and head is not None and head.epoch == ours.epoch:
                    # a commit of ours landed while we read (its wake-up found no waiter)
                    head = ours if ours.head_seq > head.head_seq else head
            if (
                head is None
                or head.deleted
                or head.epoch != seen.epoch
                or head.head_seq > seen.head_seq
                or head.ext != seen.ext
            ):
                return head


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


def _expired_prefix(head: Head, frames: list[Frame], start: int, horizon: int) -> bool:
    """Is the first live record after `start` past the TTL?"""
    for rec, frame in records_in(frames, start, _NO_END):
        if rec.seq >= head.earliest_seq and rec.seq not in frame.deleted:
            return rec.ts < horizon
    return False
