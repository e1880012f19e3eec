"""Reading sealed history: the blocks of S3 segments as frames the diff path already knows.

A read of seqs after `start` looks up the segment holding start + 1 (segment items are
cached per topic incarnation while the head's delete version stands), picks the blocks it
needs from the segment's block index, fetches adjacent blocks with one ranged GET, and
hands back one Frame per block (deleted seqs from the segment item). Decoded blocks go
into the engine's frame cache under their own key, so sequential readers fetch each block
once and a read of N records costs O(N / block size) S3 requests."""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass

from headwater.engine.cache import FrameCache
from headwater.engine.ports import BlobStore, Head, SegmentItem, SegmentStore
from headwater.engine.records import Frame
from headwater.engine.segment import (
    BlockRef,
    SegmentInfo,
    blocks_between,
    byte_ranges,
    decode_blocks,
    decode_index,
)
from headwater.errors import BlobNotFound

# A sequential reader gets up to this many stored bytes of the same segment per GET.
READ_AHEAD_BYTES = 1 << 20
READ_AHEAD_X = 4  # ...and up to this many times the records asked for
_ITEMS_PER_QUERY = 32


@dataclass(slots=True)
class _Known:
    """Segment items of one topic incarnation, complete for last seqs in (lo, hi]."""

    del_ver: int
    lo: int
    hi: int
    lasts: list[int]  # sorted last seqs
    items: dict[int, tuple[SegmentItem, SegmentInfo]]


class StaleHead(Exception):
    """Storage no longer holds what the head we read points at (frames trimmed after
    sealing, units evicted, a dropped segment): read the head again."""


def cache_key(head: Head) -> str:
    return head.log_key + "#sealed"


class SealedReader:
    def __init__(self, store: SegmentStore, blobs: BlobStore, cache: FrameCache) -> None:
        self.store = store
        self.blobs = blobs
        self.cache = cache
        self._known: dict[str, _Known] = {}
        self._lock = threading.Lock()
        self.range_gets = 0  # S3 requests made (tests and benchmarks)

    def segment_after(self, head: Head, after: int) -> tuple[SegmentItem, SegmentInfo] | None:
        """The first segment whose last seq is > after (None past the last one)."""
        with self._lock:
            k = self._known.get(head.log_key)
            if k is not None and k.del_ver == head.del_ver and k.lo <= after < k.hi:
                return k.items[k.lasts[bisect.bisect_right(k.lasts, after)]]
        items = self.store.after(head, after, _ITEMS_PER_QUERY)
        if not items:
            return None
        with self._lock:
            k = self._known.get(head.log_key)
            if k is None or k.del_ver != head.del_ver or not k.lo <= after <= k.hi:
                k = self._known[head.log_key] = _Known(head.del_ver, after, after, [], {})
                if len(self._known) > 4096:  # a bound, not an LRU: cheap to refill
                    self._known = {head.log_key: k}
            for it in items:
                if it.last_seq not in k.items:
                    bisect.insort(k.lasts, it.last_seq)
                k.items[it.last_seq] = (it, decode_index(it.index))
            k.lo = min(k.lo, after)
            k.hi = max(k.hi, items[-1].last_seq)
            return k.items[items[0].last_seq]

    def forget(self, head: Head) -> None:
        with self._lock:
            self._known.pop(head.log_key, None)

    def frames(self, head: Head, start: int, want: int, max_bytes: int = 0) -> list[Frame]:
        """Block frames with records after `start`, up to sealed_through: at least `want`
        records' worth, or `max_bytes` payload bytes (0: no byte budget), unless sealed
        history ends first. Read-ahead stops at the byte budget too, so a reader of large
        records fetches about what one response holds."""
        key = cache_key(head)
        upto = head.sealed_through
        out = self.cache.run(key, start, head.del_ver)
        covered = out[-1].last_seq if out else start
        got = sum(f.payload_bytes for f in out)
        while covered < upto and covered - start < want and not 0 < max_bytes <= got:
            found = self.segment_after(head, covered)
            if found is None:
                break
            item, info = found
            blocks = blocks_between(info, covered, min(upto, item.last_seq))
            if not blocks:
                covered = item.last_seq
                continue
            chosen = []
            records = stored = 0
            need = want - (covered - start)
            for b in blocks:
                chosen.append(b)
                records += b.records
                stored += b.length
                if records >= need and stored >= min(
                    READ_AHEAD_BYTES, READ_AHEAD_X * stored / records * need
                ):
                    break
                if 0 < max_bytes <= got + stored:  # stored <= raw: the budget is met
                    break
            for frame in self._fetch(head, key, item, chosen, 0):
                if frame.last_seq > covered:
                    out.append(frame)
                    covered = frame.last_seq
                    got += frame.payload_bytes
        return out

    def frames_holding(self, head: Head, seqs: list[int]) -> list[Frame]:
        """The block frames holding `seqs` (ascending, all <= sealed_through), oldest first:
        cached ones as they are, the others fetched per segment with one ranged GET per run
        of nearby blocks (a gap of up to READ_AHEAD_BYTES is fetched rather than paying
        for another request). Blocks between the seqs are not decoded."""
        key = cache_key(head)
        out: list[Frame] = []
        i = 0
        while i < len(seqs):
            found = self.segment_after(head, seqs[i] - 1)
            if found is None:
                break
            item, info = found
            want: list[BlockRef] = []
            blocks = info.blocks
            while i < len(seqs) and seqs[i] <= item.last_seq:
                j = bisect.bisect_left(blocks, seqs[i], key=lambda b: b.last_seq)
                if j == len(blocks):
                    break
                b = blocks[j]
                if not want or want[-1] is not b:
                    want.append(b)
                while i < len(seqs) and seqs[i] <= b.last_seq:
                    i += 1
            while i < len(seqs) and seqs[i] <= item.last_seq:
                i += 1  # past the last block: not stored
            missing: list[BlockRef] = []
            for b in want:
                cached = self.cache.frame(key, b.last_seq, head.del_ver)
                if cached is not None:
                    out.append(cached)
                else:
                    missing.append(b)
            if missing:
                out.extend(self._fetch(head, key, item, missing, READ_AHEAD_BYTES))
        out.sort(key=lambda f: f.last_seq)
        return out

    def _fetch(
        self, head: Head, key: str, item: SegmentItem, blocks: list[BlockRef], max_gap: int
    ) -> list[Frame]:
        """Frames of `blocks` (ascending) of one segment, fetched and put in the cache."""
        out: list[Frame] = []
        for lo, hi, group in byte_ranges(blocks, max_gap):
            try:
                data = self.blobs.get_range(item.key, lo, hi)
            except BlobNotFound as exc:
                self.forget(head)
                raise StaleHead from exc
            self.range_gets += 1
            recs = decode_blocks(data, lo, group)
            pos = 0
            for b in group:
                end = pos
                while end < len(recs) and recs[end].seq <= b.last_seq:
                    end += 1
                block_recs = recs[pos:end]
                pos = end
                frame = Frame(
                    first_seq=b.first_seq,
                    last_seq=b.last_seq,
                    ts=b.max_ts,
                    records=block_recs,
                    deleted=frozenset(s for s in item.deleted if b.first_seq <= s <= b.last_seq),
                    payload_bytes=sum(r.size for r in block_recs),
                )
                self.cache.put(key, frame, head.del_ver)
                out.append(frame)
        return out
