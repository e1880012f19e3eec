"""Raw reads for the protocol layers (Durable Streams, the index families, the queue):
ranges after a seq (optionally of one routing key), records at given seqs, and the seq at
an append time."""

from __future__ import annotations

import bisect
import dataclasses

from headwater.engine.core import STALE_READ_RETRIES, LogCore
from headwater.engine.ports import Head
from headwater.engine.records import Frame, StoredRecord
from headwater.engine.scan import FrameScan, StaleHead, pick, records_in
from headwater.engine.values import RangeRead
from headwater.errors import StorageUnavailable, TopicNotFound

_MOVED = "the log kept moving under the read; retry"


class RangeReader:
    def __init__(self, core: LogCore, scan: FrameScan) -> None:
        self.core = core
        self.scan = scan

    def read_range_sync(
        self,
        topic: str,
        after: int,
        limit: int,
        max_bytes: int,
        tag_json: bytes | None,
        head: Head | None,
        upto: int | None = None,
    ) -> RangeRead:
        for _ in range(STALE_READ_RETRIES):
            if head is None:
                head = self.core.heads.get(topic)
            if head is None or head.deleted:
                raise TopicNotFound(topic)
            try:
                rr = self._range_upto(head, upto, after, limit, max_bytes, tag_json)
                assert rr is not None  # read from storage when not cached
                return rr
            except StaleHead:
                head = None
        raise StorageUnavailable(_MOVED, headers={"Retry-After": "1"})

    def read_range_cached(
        self, after: int, limit: int, max_bytes: int, head: Head, upto: int | None = None
    ) -> RangeRead | None:
        """read_range_sync from a known head and the frame cache alone, without a key filter:
        what a long-poll woken by this process's own append reads (the frame its commit
        cached). None when it needs storage: sealed history, or tail frames not cached."""
        if head.deleted:
            return None  # read_range_sync says what became of it
        return self._range_upto(head, upto, after, limit, max_bytes, None, cached_only=True)

    def _range_upto(
        self,
        head: Head,
        upto: int | None,
        after: int,
        limit: int,
        max_bytes: int,
        tag_json: bytes | None,
        *,
        cached_only: bool = False,
    ) -> RangeRead | None:
        """_range_of the log as if it ended at `upto` (when before its head), answered with
        the real head."""
        capped = head
        if upto is not None and upto < head.head_seq:
            capped = dataclasses.replace(head, head_seq=upto)  # read as if it ended there
        rr = self._range_of(capped, after, limit, max_bytes, tag_json, cached_only=cached_only)
        return rr if rr is None or capped is head else dataclasses.replace(rr, head=head)

    def _range_of(
        self,
        head: Head,
        after: int,
        limit: int,
        max_bytes: int,
        tag_json: bytes | None,
        *,
        cached_only: bool = False,
    ) -> RangeRead | None:
        start = max(after, head.earliest_seq - 1)
        if start >= head.head_seq:
            return RangeRead(head, [], max(after, head.head_seq), 0)
        # A key-filtered read examines up to 64x its page before answering with what it has.
        want = limit if tag_json is None else limit * 64
        budget = max_bytes if tag_json is None else 0
        if cached_only:
            cached = self.scan.frames_cached(head, start, want, budget)
            if cached is None:
                return None
            frames = cached
        else:
            frames = self.scan.frames_after(head, start, want, budget)
        return self._walk(head, after, start, limit, max_bytes, tag_json, frames)

    def _walk(
        self,
        head: Head,
        after: int,
        start: int,
        limit: int,
        max_bytes: int,
        tag_json: bytes | None,
        frames: list[Frame],
    ) -> RangeRead:
        out: list[StoredRecord] = []
        budget = max_bytes
        scanned = 0
        examined = start
        for rec, frame in records_in(frames, start, head.head_seq):
            if out and (len(out) >= limit or len(rec.data_raw) > budget):
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

    def read_seqs_sync(self, head: Head, seqs: list[int]) -> list[StoredRecord]:
        for _ in range(STALE_READ_RETRIES):
            try:
                return self._seqs_of(head, seqs)
            except StaleHead:
                fresh = self.core.heads.get(head.topic)
                if fresh is None or fresh.deleted or fresh.epoch != head.epoch:
                    raise TopicNotFound(head.topic) from None
                head = dataclasses.replace(
                    fresh, head_seq=min(fresh.head_seq, head.head_seq)
                )  # the same snapshot end, on the current segments and trim point
        raise StorageUnavailable(_MOVED, headers={"Retry-After": "1"})

    def _seqs_of(self, head: Head, seqs: list[int]) -> list[StoredRecord]:
        wanted = [q for q in seqs if head.earliest_seq <= q <= head.head_seq]
        cut = bisect.bisect_right(wanted, head.sealed_through)
        frames: list[Frame] = []
        if cut:
            sealed = self.core.sealed
            if sealed is None:
                raise StorageUnavailable("this process cannot read sealed history")
            frames = sealed.frames_holding(head, wanted[:cut])
        out = pick(frames, wanted[:cut])
        i = cut
        while i < len(wanted):  # the unsealed tail: a run of frames from the cache or table
            frames = self.scan.frames_after(head, wanted[i] - 1, 1)
            if not frames or frames[-1].last_seq < wanted[i]:
                break
            run = [q for q in wanted[i:] if q <= frames[-1].last_seq]
            out += pick(frames, run)
            i += len(run)
        return out

    def seek_time_sync(self, head: Head, ts: int) -> int:
        start = head.earliest_seq - 1
        return min(self.scan.time_floor(head, start, ts)[0], head.head_seq + 1) - 1
