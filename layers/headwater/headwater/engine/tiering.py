"""Upkeep of a topic's storage: retention (cap and TTL eviction), sealing the tail into S3
segments, trimming sealed frames from DynamoDB, and dropping dead units.

Every step reads the head, does its work, and commits with a write conditional on the head
as read, so any number of processes may run upkeep on the same topic at once: a loser's
commit fails and it re-reads (a losing seal deletes the object it wrote). Locally an
append that crosses a threshold starts upkeep in-process and a timer sweeps every topic;
on AWS the sealer function runs the same sweep on a schedule."""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from headwater.engine.core import LogCore
from headwater.engine.ports import (
    SEGMENT_PREFIX,
    EvictCommit,
    FrameSummary,
    Head,
    SealCommit,
    SegmentItem,
    SegmentStore,
)
from headwater.engine.quotas import TOTAL_BYTES
from headwater.engine.records import Frame, StoredRecord
from headwater.engine.retention import is_tiered, merge_runs, over_cap, retention_ms
from headwater.engine.scan import FrameScan
from headwater.engine.sealed import StaleHead
from headwater.engine.segment import encode_index, encode_segment, object_keys
from headwater.engine.sweeps import SweepPlan, live_heads
from headwater.errors import HeadwaterError
from headwater.names import object_key_component
from headwater.settings import Tiering

log = logging.getLogger(__name__)

# A segment's deleted seqs live in one DynamoDB number set (items are capped at 400 KB).
SEGMENT_MAX_RECORDS = 8192
SEGMENT_MAX_BYTES = 16 << 20
MAX_SEALS_PER_RUN = 64
MAX_EVICT_UNITS_PER_RUN = 500


@dataclass(frozen=True, slots=True)
class _Unit:
    """What eviction drops at once: a sealed segment, or an unsealed tail frame."""

    first_seq: int
    last_seq: int
    live: int
    live_bytes: int
    max_ts: int
    segment: SegmentItem | None = None
    frame: FrameSummary | None = None


@dataclass(slots=True)
class UpkeepReport:
    """What one topic's upkeep did: segments sealed, how far frames are trimmed, records
    evicted and units dropped, with notes."""

    topic: str
    sealed: int = 0  # segments written
    trimmed_through: int = 0
    evicted: int = 0  # live records evicted
    dropped: int = 0  # units removed from storage
    notes: list[str] = field(default_factory=list)
    # When a time rule next makes work here (wall ms: a frame old enough to seal, sealed
    # frames past the grace period, records past their TTL, or the next interval when this
    # run stopped short); None: nothing until the topic is written (engine/sweeps.py).
    due_ms: int | None = None

    def due(self, at_ms: int) -> None:
        self.due_ms = at_ms if self.due_ms is None else min(self.due_ms, at_ms)


class Upkeep:
    def __init__(self, core: LogCore, segments: SegmentStore) -> None:
        self.log = core
        self.scan = FrameScan(core)
        self.segments = segments
        # Told of each topic a run sealed, evicted or dropped from (the local indexer's and
        # the timers' change feed: engine/sweeps.py); set by the serving process.
        self.on_change: Callable[[str], None] | None = None

    @property
    def tiering(self) -> Tiering:
        return self.log.settings.tiering

    def run(self, topic: str, head: Head | None = None) -> UpkeepReport:
        """Evict, collect, seal and trim one topic (blocking storage calls). `head`: one
        just read strongly (the sweep's listing), to save the read."""
        report = UpkeepReport(topic)
        head = head or self.log.heads.get(topic)
        if head is None or head.deleted:
            return report
        now = self.log.clock()
        try:
            head = self._evict(head, now, report)
            if report.evicted or head.del_ver > 0:
                self._collect(head, report)
            for _ in range(MAX_SEALS_PER_RUN):
                sealed = self._seal(head, self.log.clock(), report)
                if sealed is None:
                    break
                head = sealed
                report.sealed += 1
            else:
                report.due(now)  # more to seal than one run does
            self._trim(head, self.log.clock(), report)
        except StaleHead:
            report.notes.append("head moved; the next run continues")
            report.due(now)
        if report.sealed or report.evicted or report.dropped:
            self.log.forget_head(topic)
            if self.on_change is not None:
                self.on_change(topic)
        return report

    def sweep(
        self, deadline: float | None = None, failed: list[str] | None = None
    ) -> list[UpkeepReport]:
        """Upkeep of every live topic (the local timer's full sweeps and the scheduled
        sealer); the topics whose upkeep failed go to `failed`."""
        reports: list[UpkeepReport] = []
        after: str | None = None
        while deadline is None or time.monotonic() < deadline:
            page = self.log.heads.list_live("", after, 100)
            if not self._visit(page, deadline, reports, failed):
                return reports
            if len(page) < 100:
                break
            after = page[-1].topic
        return reports

    def sweep_topics(
        self, topics: list[str], failed: list[str] | None = None
    ) -> list[UpkeepReport]:
        """Upkeep of these topics only (the local timer between full sweeps: the topics this
        process changed and those come due, engine/sweeps.py), each head read strongly."""
        reports: list[UpkeepReport] = []
        self._visit(live_heads(self.log.heads, topics), None, reports, failed)
        return reports

    def _visit(
        self,
        heads: list[Head],
        deadline: float | None,
        reports: list[UpkeepReport],
        failed: list[str] | None,
    ) -> bool:
        """Run upkeep of the heads that want it (a failed one is not reported, it goes to
        `failed`); False when the deadline passed."""
        for head in heads:
            if deadline is not None and time.monotonic() >= deadline:
                return False
            if not self.wanted(head):
                continue
            try:
                reports.append(self.run(head.topic, head))
            except HeadwaterError:
                log.warning("upkeep of %s failed", head.topic, exc_info=True)
                if failed is not None:
                    failed.append(head.topic)
        return True

    def wanted(self, head: Head) -> bool:
        """Could upkeep do anything for this topic? Decided from the head alone, so a sweep
        over idle topics costs only the listing."""
        unsealed = head.head_seq > max(head.sealed_through, head.earliest_seq - 1)
        return (
            over_cap(head)
            or (head.count > 0 and retention_ms(head.cfg, self.tiering) > 0)
            or (is_tiered(head) and unsealed)
            or head.trimmed_through < head.sealed_through
            or (head.del_ver > 0 and head.earliest_seq > 1)
        )

    def tick(self, plan: SweepPlan) -> list[UpkeepReport]:
        """One sweep of the timer (blocking storage calls): every live topic when the plan
        says so, else the topics it names (none: no storage call at all). The reports' due
        times go back to the plan; a failed sweep is retried in full next time."""
        topics = plan.next(self.log.clock())
        if topics is not None and not topics:
            return []
        failed: list[str] = []
        try:
            reports = (
                self.sweep(failed=failed) if topics is None else self.sweep_topics(topics, failed)
            )
        except Exception:
            plan.failed(topics)
            raise
        due = {r.topic: r.due_ms for r in reports if r.due_ms is not None}
        due.update((t, 0) for t in failed)  # due at once: visited again next tick
        plan.visited(topics or (), due)
        return reports

    # --- retention ----------------------------------------------------------------------
    def _units(self, head: Head) -> Iterator[_Unit]:
        """Live units from earliest_seq up: sealed segments, then unsealed tail frames."""
        es = head.earliest_seq
        after = es - 1
        while after < head.sealed_through:
            segs = self.segments.after(head, after, 32)
            if not segs:
                break
            for seg in segs:
                if seg.first_seq < es:
                    n, b = self.scan.live_between(head, es, seg.last_seq + 1)
                else:
                    n, b = seg.count - seg.deleted_count, seg.bytes - seg.deleted_bytes
                yield _Unit(seg.first_seq, seg.last_seq, n, b, seg.max_ts, segment=seg)
                after = seg.last_seq
        after = max(after, head.sealed_through)
        while after < head.head_seq:
            summaries = self.log.tail.frame_summaries(head, after, head.head_seq, 256)
            if not summaries:
                break
            for f in summaries:
                if f.hole:  # reserved, never committed: counted until dropped or sealed
                    n, b = f.last_seq - f.first_seq + 1, f.void_bytes
                elif f.first_seq < es:
                    n, b = self.scan.live_between(head, es, f.last_seq + 1)
                else:
                    n = f.last_seq - f.first_seq + 1 - f.deleted_count
                    b = f.bytes - f.deleted_bytes
                yield _Unit(f.first_seq, f.last_seq, n, b, f.ts, frame=f)
                after = f.last_seq

    def _evict(self, head: Head, now: int, report: UpkeepReport) -> Head:
        """Drop whole units off the front while the rest still meets the cap (discard:
        "old"), or while they are past the TTL. Lazy and unit-granular (spec §0.10): the
        topic may exceed its cap by less than one unit."""
        cfg = head.cfg
        ttl = retention_ms(cfg, self.tiering)
        horizon = now - ttl if ttl else None
        if not over_cap(head) and horizon is None:
            return head
        capped = cfg.discard == "old"
        cap_n, cap_b = cfg.cap_records, cfg.cap_bytes
        count, nbytes = head.count, head.bytes
        drop: list[tuple[_Unit, str]] = []
        held: list[_Unit] = []  # holes go with the unit after them (they have no time)
        for unit in self._units(head):
            if unit.frame is not None and unit.frame.hole:
                held.append(unit)
                continue
            if capped and (
                (cap_n and count - unit.live >= cap_n)
                or (cap_b and nbytes - unit.live_bytes >= cap_b)
            ):
                reason = "cap"
            elif horizon is not None and unit.max_ts < horizon:
                reason = "ttl"
            else:
                if horizon is not None:
                    report.due(unit.max_ts + ttl + 1)  # when this unit passes the TTL
                break
            for h in held:
                count -= h.live
                nbytes -= h.live_bytes
                drop.append((h, reason))
            held = []
            count -= unit.live
            nbytes -= unit.live_bytes
            drop.append((unit, reason))
            if len(drop) >= MAX_EVICT_UNITS_PER_RUN:
                report.due(now)  # more than one run drops
                break
        if not drop:
            return head
        last = drop[-1][0].last_seq
        new_es = self.scan.first_live(head, last + 1)
        runs = merge_runs(head.evictions, [(u.last_seq, r) for u, r in drop])
        unsealed = sum(u.frame.bytes + u.frame.void_bytes for u, _ in drop if u.frame is not None)
        commit = EvictCommit(
            head,
            new_es,
            max(head.evict_floor, last + 1),
            head.count - count,
            head.bytes - nbytes,
            unsealed,
            runs,
        )
        if not self.log.tail.commit_evict(commit):
            report.notes.append("eviction raced another writer")
            report.due(now)
            fresh = self.log.heads.get(head.topic)
            if fresh is None or fresh.deleted:
                raise StaleHead
            return fresh
        self.log.quota_release(TOTAL_BYTES, head.bytes - nbytes)
        report.evicted += head.count - count
        self._drop(head, [u for u, _ in drop], report)
        return dataclasses.replace(
            head,
            earliest_seq=new_es,
            evict_floor=commit.new_floor,
            count=count,
            bytes=nbytes,
            evictions=runs,
            unsealed_bytes=max(0, head.unsealed_bytes - unsealed),
        )

    def _drop(self, head: Head, units: list[_Unit], report: UpkeepReport) -> None:
        """Remove units below the floor from storage: items first, then objects, so a
        reader never finds an item whose object is gone for good."""
        segs = [u.segment for u in units if u.segment is not None]
        frames = [u.frame for u in units if u.frame is not None]
        if segs:
            self.segments.delete_items(head, [s.last_seq for s in segs])
            # each segment's object, its index companion and lexicon run (there may be none)
            self.log.blobs.delete_many([k for s in segs for k in object_keys(s.key)])
        self._delete_frames(head, frames)
        report.dropped += len(segs) + len(frames)

    def _delete_frames(self, head: Head, frames: list[FrameSummary]) -> None:
        """Tail frame items, then the S3 objects of those that were spilled. Frames of sealed
        logs carry the tail TTL and are left to it (a delete costs the write units of the
        put); their S3 objects go now. A late writer's retried put that lands on a deleted
        key lands below the floor, where no reader looks (docs/storage.md "The sequencer")."""
        if not frames:
            return
        doomed = [f for f in frames if not (f.expires_s is not None and is_tiered(head))]
        if doomed:
            self.log.tail.delete_frames(head, [f.first_seq for f in doomed])
        spilled = [f.spill_key for f in frames if f.spill_key]
        if spilled:
            self.log.blobs.delete_many(spilled)

    def _collect(self, head: Head, report: UpkeepReport) -> None:
        """Drop units that hold nothing live: wholly below earliest_seq (after a prefix
        delete or an interrupted eviction), or segments whose every record was deleted."""
        dead: list[_Unit] = []
        for seg in self.segments.after(head, 0, 64):
            if seg.last_seq < head.earliest_seq or seg.deleted_count >= seg.count:
                dead.append(_Unit(seg.first_seq, seg.last_seq, 0, 0, seg.max_ts, segment=seg))
        floor = head.earliest_seq - 1
        below: list[FrameSummary] = []
        if head.trimmed_through < floor:
            below = self.log.tail.frame_summaries(
                head, head.trimmed_through, floor, 1000, every=True
            )
        for f in below:
            if f.last_seq < head.earliest_seq:
                dead.append(_Unit(f.first_seq, f.last_seq, 0, 0, f.ts, frame=f))
        if dead:
            self._drop(head, dead, report)
        # Every frame below the floor is dropped or left to its TTL: trimmed, so the next
        # run does not find them again (a topic whose every record was deleted has nothing
        # to seal, and its trim would never move past them).
        # A listing cut at 1,000 frames goes on next run. One that was not cut holds at most
        # the frame the floor stands in (still live) once the rest are dropped: that is no
        # work left (a queue's acked prefix would have had it visited every tick).
        cut = len(below) >= 1000
        complete = below and not cut and is_tiered(head)
        if cut:
            report.due(self.log.clock())
        if complete and self.log.tail.set_trimmed(head, floor):
            report.trimmed_through = floor

    # --- sealing ------------------------------------------------------------------------
    def _seal(self, head: Head, now: int, report: UpkeepReport | None = None) -> Head | None:
        """Seal the oldest unsealed frames into one segment if a threshold is reached: the
        new head, or None when there is nothing (more) to seal or another process won."""
        t = self.tiering
        if not is_tiered(head):
            return None
        report = report or UpkeepReport(head.topic)
        start = max(head.sealed_through, head.earliest_seq - 1)
        limit = head.head_seq
        pending = [first for first in head.tag_pending if first >= head.earliest_seq]
        if pending:  # frames whose tag entries are not written yet stay in the tail
            limit = min(limit, min(pending) - 1)
            report.due(now)  # ...until those are written: look again next interval
        if limit <= start:
            return None
        if limit - start < t.seal_records and head.unsealed_bytes < t.seal_bytes:
            # Only the age rule can apply: one projected Query for the oldest frame's ts.
            # (None when a reserved slot is pending there: the read below waits for it)
            oldest = self.log.tail.frame_summaries(head, start, limit, 1)
            if oldest and not oldest[0].hole and oldest[0].ts > now - t.seal_age_ms:
                report.due(oldest[0].ts + t.seal_age_ms)
                return None
        # A segment is a few MB of records and buffers: a process builds at most
        # `seal_concurrency` at once, the other topics' runs wait (settings.Tiering)
        with self.log.seal_gate:
            return self._build_segment(head, start, limit, now, report)

    def _build_segment(
        self, head: Head, start: int, limit: int, now: int, report: UpkeepReport
    ) -> Head | None:
        """Read, encode, put and commit one segment from the frames after `start` (through
        `limit` at most) if a threshold is reached: _seal's result."""
        t = self.tiering
        cache, log_key, del_ver = self.log.cache, head.log_key, head.del_ver

        def known(first: int, last: int) -> list[StoredRecord] | None:
            # spilled frames this process appended (or read) are not fetched from S3 again
            f = cache.frame_from(log_key, first, del_ver)
            return f.records if f is not None and f.last_seq == last else None

        frames = [
            f
            # at most one segment's worth: frames past it are neither fetched nor decoded
            # (a tail of 1 MiB frames was read whole, from S3, for every segment sealed);
            # a slot reserved and not yet written is waited for, or filled once overdue
            for f in self.log.slots.read_chain(
                head, start, limit, SEGMENT_MAX_RECORDS, SEGMENT_MAX_BYTES, known
            )
            if f.last_seq <= limit
        ]
        chosen: list[Frame] = []
        n = nbytes = 0
        for f in frames:
            if chosen and (
                n + len(f.records) > SEGMENT_MAX_RECORDS
                or nbytes + f.payload_bytes > SEGMENT_MAX_BYTES
            ):
                break
            chosen.append(f)
            n += len(f.records)
            nbytes += f.payload_bytes
        while chosen and chosen[-1].hole:
            chosen.pop()  # a segment ends on records: trailing holes wait for the next
        if not chosen:
            report.due(now)
            return None
        first_real = next(f for f in chosen if not f.hole)
        due = (
            limit - start >= t.seal_records
            or head.unsealed_bytes >= t.seal_bytes
            or first_real.ts <= now - t.seal_age_ms
        )
        if not due:
            report.due(first_real.ts + t.seal_age_ms)
            return None
        records = [r for f in chosen for r in f.records]
        blob, info = encode_segment(head.topic, head.epoch, records, block_bytes=t.block_bytes)
        first, last = chosen[0].first_seq, chosen[-1].last_seq
        key = (
            f"{SEGMENT_PREFIX}{object_key_component(head.topic)}/{head.epoch}/"
            f"{first:020d}-{last:020d}-{uuid.uuid4().hex[:8]}"
        )
        deleted = frozenset(s for f in chosen for s in f.deleted)
        holes = [f for f in chosen if f.hole]
        void_n = sum(f.last_seq - f.first_seq + 1 for f in holes)
        void_b = sum(f.void_bytes for f in holes)
        item = SegmentItem(
            first_seq=first,
            last_seq=last,
            key=key,
            index=encode_index(info),
            count=len(records),
            bytes=info.payload_bytes,
            min_ts=info.min_ts,
            max_ts=info.max_ts,
            created_ms=now,
            deleted=deleted,
            deleted_count=sum(f.deleted_count for f in chosen),
            deleted_bytes=sum(f.deleted_bytes for f in chosen),
        )
        self.log.blobs.put(key, blob)
        commit = SealCommit(head, item, nbytes + void_b, void_n, void_b)
        if not self.segments.commit_seal(commit):
            self.log.blobs.delete_many([key])
            report.due(now)
            return None
        return dataclasses.replace(
            head,
            sealed_through=last,
            unsealed_bytes=max(0, head.unsealed_bytes - nbytes - void_b),
            count=head.count - void_n,
            bytes=head.bytes - void_b,
        )

    def _trim(self, head: Head, now: int, report: UpkeepReport) -> None:
        """Delete tail frames sealed more than the grace period ago (readers that read the
        head before the seal still find them meanwhile)."""
        if head.trimmed_through >= head.sealed_through:
            return
        through = head.trimmed_through
        segs = self.segments.after(head, head.trimmed_through, 64)
        for seg in segs:
            if seg.last_seq > head.sealed_through:
                break
            if seg.created_ms + self.tiering.grace_ms > now:
                report.due(seg.created_ms + self.tiering.grace_ms)  # past the grace period
                break
            through = seg.last_seq
        else:
            if len(segs) == 64:
                report.due(now)  # one batch of segments per run: the next run trims on
        if through == head.trimmed_through:
            return
        gone = [
            f
            for f in self.log.tail.frame_summaries(
                head, head.trimmed_through, through, 1 << 30, every=True
            )
            if f.last_seq <= through
        ]
        self._delete_frames(head, gone)
        if self.log.tail.set_trimmed(head, through):
            report.trimmed_through = through
        else:
            report.due(now)
