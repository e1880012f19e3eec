"""The one frame scan every read shares: which frames hold the records after a seq (sealed
blocks, then tail frames from the cache or the table), and the walk over their records.

Diffs, range reads, seq reads, record deletes, counters and time seeks all go through
`FrameScan.frames_after` and `records_in`; nothing else fetches frames."""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence

from headwater.engine.core import LogCore
from headwater.engine.ports import Head
from headwater.engine.records import Frame, StoredRecord
from headwater.engine.sealed import StaleHead
from headwater.engine.segment import blocks_between
from headwater.errors import StorageUnavailable

__all__ = ["FrameScan", "StaleHead", "pick", "records_in"]


def records_in(
    frames: Sequence[Frame], start: int, end: int
) -> Iterator[tuple[StoredRecord, Frame]]:
    """Every stored record with start < seq <= end in `frames` (ascending by seq), deleted
    ones included, with its frame. Stops at the first record past `end`."""
    for frame in frames:
        if frame.last_seq <= start:
            continue
        for rec in frame.records:
            if rec.seq <= start:
                continue
            if rec.seq > end:
                return
            yield rec, frame


def _seq_of(rec: StoredRecord) -> int:
    return rec.seq


def pick(frames: Sequence[Frame], seqs: Sequence[int]) -> list[StoredRecord]:
    """The live records at `seqs` (ascending) in `frames` (ascending by seq)."""
    out: list[StoredRecord] = []
    i = 0
    for frame in frames:
        recs = frame.records
        while i < len(seqs) and seqs[i] < frame.first_seq:
            i += 1
        while i < len(seqs) and seqs[i] <= frame.last_seq:
            q = seqs[i]
            i += 1
            if q in frame.deleted:
                continue
            j = bisect.bisect_left(recs, q, key=_seq_of)
            if j < len(recs) and recs[j].seq == q:
                out.append(recs[j])
    return out


class FrameScan:
    def __init__(self, core: LogCore) -> None:
        self.core = core

    def frames_after(self, head: Head, start: int, want: int, max_bytes: int = 0) -> list[Frame]:
        """Frames (sealed blocks, then tail frames) holding the records after `start`: at
        least `want` records' worth, or `max_bytes` payload bytes (0: no byte budget),
        unless the log ends first. Raises StaleHead when the tail moved under `head`."""
        c = self.core
        out: list[Frame] = []
        if start < head.sealed_through:
            if c.sealed is None:
                raise StorageUnavailable("this process cannot read sealed history")
            out = c.sealed.frames(head, start, want, max_bytes)
            covered = out[-1].last_seq if out else start
            got = sum(f.payload_bytes for f in out)
            if covered < head.sealed_through and (covered - start >= want or 0 < max_bytes <= got):
                return out
            want -= max(0, covered - start)
            max_bytes = max(1, max_bytes - got) if max_bytes else 0
            start = max(covered, head.sealed_through)
            if want <= 0 or start >= head.head_seq:
                return out
        frames, enough = self._cached_run(head, start, want, max_bytes)
        if not enough:
            covered = frames[-1].last_seq if frames else start
            have = covered - start
            cached = sum(f.payload_bytes for f in frames)
            budget = max(1, max_bytes - cached) if max_bytes else 0
            # the chain up to the head, through slots reserved and not yet written
            fetched = c.slots.read_chain(head, covered, head.head_seq, want - have, budget)
            for f in fetched:
                c.cache.put(head.log_key, f, head.del_ver)
            frames = frames + [f for f in fetched if f.last_seq > covered]
        return out + frames

    def frames_cached(
        self, head: Head, start: int, want: int, max_bytes: int = 0
    ) -> list[Frame] | None:
        """frames_after from this process's frame cache alone, or None when it would read
        storage (sealed history, or tail frames not cached)."""
        if start < head.sealed_through:
            return None
        frames, enough = self._cached_run(head, start, want, max_bytes)
        return frames if enough else None

    def _cached_run(
        self, head: Head, start: int, want: int, max_bytes: int
    ) -> tuple[list[Frame], bool]:
        """The cached run of tail frames after `start`, and whether it is all frames_after
        needs: the log's end, `want` records, or `max_bytes` payload bytes (0: no budget)."""
        frames = self.core.cache.run(head.log_key, start, head.del_ver)
        covered = frames[-1].last_seq if frames else start
        cached = sum(f.payload_bytes for f in frames)
        enough = covered >= head.head_seq or covered - start >= want or 0 < max_bytes <= cached
        return frames, enough

    def records_between(self, head: Head, lo: int, hi: int) -> Iterator[tuple[StoredRecord, Frame]]:
        """Every stored record with lo <= seq < hi (deleted ones too), with its frame,
        fetching frames as the walk goes."""
        after = lo - 1
        while after < hi - 1:
            frames = self.frames_after(head, after, min(hi - 1 - after, 8192))
            moved = after
            for rec, frame in records_in(frames, after, hi - 1):
                yield rec, frame
                moved = rec.seq
            if frames:
                moved = max(moved, min(frames[-1].last_seq, hi - 1))
            if moved == after:
                return
            after = moved

    def voids_between(self, head: Head, lo: int, hi: int) -> tuple[int, int]:
        """Seqs and bytes of the holes with lo <= seq < hi in the unsealed tail: reserved by
        appends that never committed, still in the head's counters (a seal takes out the
        ones it passes)."""
        c = self.core
        after = max(lo - 1, head.sealed_through)
        n = nbytes = 0
        while after < hi - 1:
            summaries = c.tail.frame_summaries(head, after, hi - 1, 256)
            if not summaries:
                break
            for f in summaries:
                if f.hole:
                    n += min(f.last_seq, hi - 1) - max(f.first_seq, lo) + 1
                    nbytes += f.void_bytes
                after = f.last_seq
        return n, nbytes

    def first_live(self, head: Head, start: int) -> int:
        """First seq >= start that is not deleted (head_seq + 1 if none)."""
        for rec, frame in self.records_between(head, start, head.head_seq + 1):
            if rec.seq not in frame.deleted:
                return rec.seq
        return head.head_seq + 1

    def live_between(self, head: Head, lo: int, hi: int) -> tuple[int, int]:
        """Count and bytes of the live records with lo <= seq < hi. Whole segments count from
        their item's counters; the rest is read."""
        sealed = self.core.sealed
        count = nbytes = 0
        while sealed is not None and lo <= head.sealed_through and lo < hi:
            found = sealed.segment_after(head, lo - 1)
            if found is None:
                break
            item, _ = found
            if not (lo <= item.first_seq and item.last_seq < hi):
                break
            count += item.count - item.deleted_count
            nbytes += item.bytes - item.deleted_bytes
            lo = item.last_seq + 1
        for rec, frame in self.records_between(head, lo, hi):
            if rec.seq not in frame.deleted:
                count += 1
                nbytes += rec.size
        return count, nbytes

    def time_floor(self, head: Head, start: int, horizon: int) -> tuple[int, int]:
        """The first seq after `start` appended at or past `horizon` (append times never go
        back on a topic, so the floor stops at the first record at or past it), and about
        how many live records lie below it. Walks segment and block metadata and frame
        summaries; decodes only the block where the horizon falls."""
        c = self.core
        after, skipped = start, 0
        while c.sealed is not None and after < head.sealed_through:
            found = c.sealed.segment_after(head, after)
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
                for rec in c.sealed.frames(head, after, 1)[0].records:
                    if rec.seq > after and rec.ts >= horizon:
                        return rec.seq, skipped
                    skipped += rec.seq > after
                after = b.last_seq
            after = max(after, item.last_seq)
        after = max(after, head.sealed_through)
        while after < head.head_seq:
            summaries = c.tail.frame_summaries(head, after, head.head_seq, 256)
            if not summaries:
                # the chain stops at a slot reserved and not yet written: nothing past it
                # can be judged yet, so the floor stops there
                return after + 1, skipped
            for f in summaries:
                if f.hole:
                    after = f.last_seq
                    continue
                if f.ts >= horizon:
                    return max(f.first_seq, after + 1), skipped
                skipped += f.last_seq - max(f.first_seq, after + 1) + 1 - f.deleted_count
                after = f.last_seq
        return head.head_seq + 1, skipped
