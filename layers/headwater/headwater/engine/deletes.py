"""Record deletes: a prefix (before a seq), by routing key (tag), or given seqs; each marks
records deleted atomically with the head's counters (in chunks of one transaction) and then
moves the floor (earliest_seq) past a deleted prefix."""

from __future__ import annotations

import dataclasses

from headwater.engine.core import MAX_ATTEMPTS, LogCore
from headwater.engine.ports import MAX_TXN_ITEMS, DeleteCommit, FrameDelete, Head, TagEntry
from headwater.engine.quotas import TOTAL_BYTES
from headwater.engine.records import StoredRecord
from headwater.engine.scan import FrameScan, StaleHead
from headwater.engine.values import DeleteResult, TagMatch
from headwater.errors import StorageUnavailable, TopicNotFound

FLOOR_ATTEMPTS = 5  # reads of the head by one advance_floor that concurrent deletes beat


def after_delete(head: Head, count: int, nbytes: int, new_es: int | None) -> Head:
    """The head as a delete of `count` records (`nbytes`) leaves it (a queue's acks)."""
    return dataclasses.replace(
        head,
        count=head.count - count,
        bytes=head.bytes - nbytes,
        earliest_seq=new_es if new_es is not None else head.earliest_seq,
        del_ver=head.del_ver + 1,
    )


def passed(head: Head, new_es: int, count: int, nbytes: int) -> tuple[int, int]:
    """What a floor move to `new_es` takes out of the counters: `count` and `nbytes`, or,
    when it passes every seq `head` reserved, all the head counts (the topic holds nothing:
    that includes the bytes of holes a reader filled, which no one else knows)."""
    if new_es > head.head_seq:
        return head.count, head.bytes
    return count, nbytes


class RecordDeletes:
    def __init__(self, core: LogCore, scan: FrameScan) -> None:
        self.core = core
        self.scan = scan

    def delete_sync(
        self, topic: str, before_seq: int | None, match: TagMatch | tuple[int, ...] | None
    ) -> DeleteResult:
        """Delete the records before `before_seq` (all when None) or, with `match`, those
        of a routing key or at the given seqs (ascending)."""
        c = self.core
        for _ in range(MAX_ATTEMPTS):
            head = c.heads.get(topic)
            if head is None or head.deleted:
                raise TopicNotFound(topic)
            c.head_cache.pop(topic, None)
            bound = head.head_seq + 1
            upper = bound if before_seq is None else min(bound, before_seq)
            try:
                if match is None:
                    outcome = self._prefix(head, upper)
                elif isinstance(match, tuple):
                    outcome = self._marked(head, self._frames_holding(head, match))
                else:
                    outcome = self._tagged(head, upper, match)
            except StaleHead:
                continue
            if outcome is not None:
                deleted, after = outcome
                c.known.forget(topic)  # the deleted sets changed: next reads are strong
                c.quota_release(TOTAL_BYTES, head.bytes - after.bytes)
                return DeleteResult(deleted, after)
        raise StorageUnavailable("delete kept conflicting; retry")

    def _move_floor(self, head: Head, new_es: int, count: int = 0, nbytes: int = 0) -> bool:
        return self.core.tail.commit_delete(
            DeleteCommit(
                head.topic,
                head.epoch,
                head.del_ver,
                [],
                count,
                nbytes,
                new_es,
                expected_sealed=head.sealed_through,
                partitions=head.partitions,
            )
        )

    def _prefix(self, head: Head, upper: int) -> tuple[int, Head] | None:
        if upper <= head.earliest_seq:
            return 0, head
        count, nbytes = self.scan.live_between(head, head.earliest_seq, upper)
        new_es = self.scan.first_live(head, upper)
        # holes below the new floor leave the counters with the records (docs/storage.md
        # "The sequencer": a hole's seqs count until something passes it)
        void_n, void_b = self.scan.voids_between(head, head.earliest_seq, new_es)
        gone_n, gone_b = passed(head, new_es, count + void_n, nbytes + void_b)
        if not self._move_floor(head, new_es, gone_n, gone_b):
            return None
        return count, after_delete(head, gone_n, gone_b, new_es)

    def _tagged(self, head: Head, upper: int, match: TagMatch) -> tuple[int, Head] | None:
        self.complete_tag_index(head)
        entries = self.core.tail.tag_lookup(head, match.value, match.prefix)
        wanted: dict[int, list[int]] = {}
        for e in entries:
            seqs = [s for s in e.seqs if head.earliest_seq <= s < upper]
            if seqs:
                wanted.setdefault(e.frame_seq, []).extend(seqs)
        return self._marked(head, wanted)

    def _frames_holding(self, head: Head, seqs: tuple[int, ...]) -> dict[int, list[int]]:
        """{first seq of the frame (or segment block) holding it: [seq, ...]} for the live
        records among `seqs`."""
        wanted: dict[int, list[int]] = {}
        for seq in seqs:
            if not head.earliest_seq <= seq <= head.head_seq:
                continue
            for rec, frame in self.scan.records_between(head, seq, seq + 1):
                if rec.seq == seq and seq not in frame.deleted:
                    wanted.setdefault(frame.first_seq, []).append(seq)
        return wanted

    def _marked(self, head: Head, wanted: dict[int, list[int]]) -> tuple[int, Head] | None:
        """Mark `wanted` ({frame first seq: seqs}) deleted, atomically with the head counters
        (in chunks of one transaction), then move the floor past a deleted prefix."""
        if not wanted:
            return 0, head
        c = self.core
        # Sealed seqs are marked on their segment's item, the rest on their tail frame (a
        # seal takes whole frames, so a frame is sealed iff its first seq is).
        deletes: list[tuple[bool, FrameDelete]] = self._sealed_marks(
            head,
            sorted(s for key, ss in wanted.items() if key <= head.sealed_through for s in ss),
        )
        tail_wanted = {k: v for k, v in wanted.items() if k > head.sealed_through}
        frames = c.tail.get_frames(head, list(tail_wanted)) if tail_wanted else {}
        for key, seqs in sorted(tail_wanted.items()):
            frame = frames.get(key)
            if frame is None:
                continue
            fresh = sorted(s for s in set(seqs) if s not in frame.deleted)
            if fresh:
                size = sum(frame.records[s - frame.first_seq].size for s in fresh)
                deletes.append((False, FrameDelete(key, tuple(fresh), size, frame.deleted_count)))
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
            ok = c.tail.commit_delete(
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
                    partitions=cur.partitions,
                )
            )
            if not ok:
                return None if i == 0 else (sum(len(d.seqs) for _, d in deletes[:i]), cur)
            cur = after_delete(cur, c_n, c_b, None)
        return count, self._raise_floor(cur, MAX_ATTEMPTS) or cur

    def _raise_floor(self, head: Head, attempts: int) -> Head | None:
        """Move the floor past the deleted prefix at it and the holes in it (taken out of the
        counters: a hole's seqs count until something passes it), re-reading the head when
        a concurrent delete wins, at most `attempts` times. The head after; None when the
        topic is gone."""
        c = self.core
        for _ in range(attempts):
            try:
                new_es = self.scan.first_live(head, head.earliest_seq)
                if new_es == head.earliest_seq:
                    return head
                voids = self.scan.voids_between(head, head.earliest_seq, new_es)
                gone_n, gone_b = passed(head, new_es, *voids)
                if self._move_floor(head, new_es, gone_n, gone_b):
                    return after_delete(head, gone_n, gone_b, new_es)
            except StaleHead:
                pass
            fresh = c.heads.get(head.topic)
            if fresh is None or fresh.deleted:
                return None
            head = fresh
        return head

    def _sealed_marks(self, head: Head, seqs: list[int]) -> list[tuple[bool, FrameDelete]]:
        """Delete marks for sealed seqs, one per segment (sizes read from their blocks)."""
        sealed = self.core.sealed
        if not seqs or sealed is None:
            return []
        by_segment: dict[int, dict[int, StoredRecord]] = {}
        deleted_before: dict[int, int] = {}
        records: dict[int, StoredRecord] = {}
        for seq in seqs:
            found = sealed.segment_after(head, seq - 1)
            if found is None or found[0].first_seq > seq or seq in found[0].deleted:
                continue
            item = found[0]
            if seq not in records:
                for frame in sealed.frames(head, seq - 1, 1):
                    for rec in frame.records:
                        records[rec.seq] = rec
            found_rec = records.get(seq)
            if found_rec is not None:
                deleted_before[item.last_seq] = item.deleted_count
                by_segment.setdefault(item.last_seq, {})[seq] = found_rec
        return [
            (
                True,
                FrameDelete(
                    last,
                    tuple(sorted(recs)),
                    sum(r.size for r in recs.values()),
                    deleted_before[last],
                ),
            )
            for last, recs in sorted(by_segment.items())
        ]

    def advance_floor(self, topic: str) -> None:
        """Move earliest_seq past a deleted prefix (records deleted one by one, e.g. queue
        acks) and the holes in it. A few tries: the last acks of a drained queue have no
        later call to catch up."""
        c = self.core
        head = c.heads.get(topic)
        if head is None or head.deleted:
            return
        if self._raise_floor(head, FLOOR_ATTEMPTS) is not head:
            c.forget_head(topic)

    def complete_tag_index(self, head: Head) -> None:
        """Index frames whose tag entries did not fit their commit (or whose writer died
        between commit and indexing). Idempotent."""
        if not head.tag_pending:
            return
        c = self.core
        frames = c.tail.get_frames(head, list(head.tag_pending))
        for first in head.tag_pending:
            if first not in frames:  # evicted or trimmed since: nothing left to index
                c.heads.clear_tag_pending(head, first)
        for first, frame in frames.items():
            tags: dict[str, list[int]] = {}
            for rec in frame.records:
                if rec.tag is not None:
                    tags.setdefault(rec.tag, []).append(rec.seq)
            c.tail.write_tag_entries(head, [TagEntry(t, first, tuple(s)) for t, s in tags.items()])
            c.heads.clear_tag_pending(head, first)
