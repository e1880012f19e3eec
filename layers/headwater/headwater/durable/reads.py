"""Reading a stream: catch-up pages (a fork's inherited entries from its source, then its
own), windows for the query scans, entries at seqs, filtered reads pruned by the index
families, time seeks and live waits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from headwater import jsoncodec
from headwater.durable import schema
from headwater.durable.core import StreamsCore, check_live
from headwater.durable.errors import StreamNotFound
from headwater.durable.filter import Predicate
from headwater.durable.offsets import boundary_seq
from headwater.durable.state import StreamState, name_of, state_of, topic_of
from headwater.durable.values import SegmentPruner
from headwater.engine import RangeRead, StoredRecord, json_literal
from headwater.engine.ports import Head, SegmentItem
from headwater.errors import StorageUnavailable, TopicNotFound

FILTER_SCAN_CAP = 100 * 1024 * 1024  # payload bytes one filtered read examines (§8.5)
PAGE_SCAN_RECORDS = 2_000
PAGE_SCAN_BYTES = 4 << 20
SEGMENT_LISTS: Final = 4096  # streams whose segment lists a process keeps


class StreamReads:
    def __init__(self, core: StreamsCore) -> None:
        self._core = core
        self._engine = core.engine
        # per log: ((del_ver, earliest_seq) it was read under, its segments oldest first)
        self._segments: dict[str, tuple[tuple[int, int], list[SegmentItem]]] = {}

    async def read(
        self, head: Head, after: int, limit: int, max_bytes: int, key: str | None = None
    ) -> RangeRead:
        """Entries after `after`: a fork's, up to its fork point, come from its source
        (recursively), then its own."""
        tag = json_literal(key) if key is not None else None
        try:
            return await self._compose(head, after, head.head_seq, limit, max_bytes, tag)
        except TopicNotFound:
            raise StreamNotFound(name_of(head.topic)) from None

    async def _compose(
        self, head: Head, after: int, upto: int, limit: int, max_bytes: int, tag: bytes | None
    ) -> RangeRead:
        state = state_of(head)
        fork = state.fork if state is not None else None
        records: list[StoredRecord] = []
        scanned = 0
        nxt = after
        if fork is not None and after < fork.at:
            src = await self._engine.head_of(topic_of(fork.src), consistent=False)
            if src is None or src.deleted or src.epoch != fork.src_epoch:
                src = await self._engine.head_of(topic_of(fork.src))  # strongly, to be sure
            if src is None or src.deleted or src.epoch != fork.src_epoch:
                raise StorageUnavailable(
                    f"the entries this fork inherits from {fork.src!r} are missing"
                )
            cap = min(fork.at, upto)
            inherited = await self._compose(src, after, cap, limit, max_bytes, tag)
            records, scanned, nxt = (
                list(inherited.records),
                inherited.scanned_bytes,
                inherited.next_seq,
            )
            used = sum(len(r.data_raw) for r in records)
            if nxt < cap or len(records) >= limit or used >= max_bytes:
                return RangeRead(head, records, nxt, scanned)
            limit, max_bytes = limit - len(records), max_bytes - used
        if nxt >= min(upto, head.head_seq):
            return RangeRead(head, records, max(nxt, after), scanned)
        own = await self._engine.read_range(head.topic, nxt, limit, max_bytes, tag, head, upto)
        if not records:
            return own
        nxt = own.next_seq
        for rec in own.records:
            if len(rec.data_raw) > max_bytes:
                nxt = rec.seq - 1  # the page is full: the next read starts here
                break
            records.append(rec)
            max_bytes -= len(rec.data_raw)
        return RangeRead(own.head, records, nxt, scanned + own.scanned_bytes)

    async def read_window(
        self, head: Head, after: int, upto: int, limit: int, max_bytes: int
    ) -> RangeRead:
        """Entries in (after, upto] of the stream as of `head` (at most `limit` records and
        about `max_bytes`; the page's next_seq says how far it got): the scans of _search,
        _aggregate and _routing_keys (durable/scan.py) read newest-first windows with it."""
        try:
            return await self._compose(
                head, after, min(upto, head.head_seq), limit, max_bytes, None
            )
        except TopicNotFound:
            raise StreamNotFound(name_of(head.topic)) from None

    async def read_entries(self, head: Head, seqs: Sequence[int]) -> list[StoredRecord]:
        """The entries at `seqs` (ascending) of the stream's own log (seqs of its own sealed
        segments: a fork's inherited entries are not in it), deleted ones left out: the
        index families' candidates, read block by block."""
        try:
            return await self._engine.read_seqs(head, seqs)
        except TopicNotFound:
            raise StreamNotFound(name_of(head.topic)) from None

    async def segments(self, head: Head) -> list[SegmentItem]:
        """The stream's own sealed segments (S3), oldest first; [] without tiering.

        Kept per stream while its delete version and trim point stand (a record delete or a
        retention drop changes the items: read them all again); a head sealed further reads
        only the segments after the ones known. Segment items never change otherwise."""
        store = self._engine.segments
        if store is None:
            return []
        known = self._segments.get(head.log_key)
        out: list[SegmentItem] = []
        if known is not None and known[0] == (head.del_ver, head.earliest_seq):
            out = [s for s in known[1] if s.first_seq <= head.sealed_through]
            if len(out) < len(known[1]):
                return out  # an older head than the one that filled it
        after = out[-1].last_seq if out else 0
        while after < head.sealed_through:
            items = await self._engine.run_io(store.after, head, after, 256)
            if not items:
                break
            out.extend(it for it in items if it.first_seq <= head.sealed_through)
            after = items[-1].last_seq
        if len(self._segments) >= SEGMENT_LISTS and head.log_key not in self._segments:
            self._segments.clear()  # a bound, not an LRU: cheap to refill
        self._segments[head.log_key] = ((head.del_ver, head.earliest_seq), out)
        return list(out)

    async def read_filtered(
        self,
        head: Head,
        after: int,
        limit: int,
        max_bytes: int,
        key: str | None,
        pred: Predicate | None,
        reg: dict[str, Any] | None,
        pruner: SegmentPruner | None = None,
    ) -> tuple[RangeRead, bool]:
        """Entries after `after` with routing key `key` (when given) that match `pred`
        (§8.5; when given), scanning at most FILTER_SCAN_CAP payload bytes: (page, whether
        the cap stopped the scan). The page's next_seq is past every entry examined,
        matching or not.

        `pruner`: the index families' answer for a sealed segment of the stream's own (the
        seqs in it that may be selected, or None: no usable companion). A segment with no
        candidate is skipped unread; of one with some only the blocks holding them are read;
        the rest of the stream (segments without a companion, the unsealed tail, a fork's
        inherited entries) is scanned."""
        tag = json_literal(key) if key is not None else None
        out: list[StoredRecord] = []
        out_bytes = scanned = 0
        nxt = after
        segs = await self.segments(head) if pruner is not None else []
        at = 0  # segs[at] is the first segment ending after nxt
        while nxt < head.head_seq and scanned < FILTER_SCAN_CAP:
            while at < len(segs) and segs[at].last_seq <= nxt:
                at += 1
            seg = segs[at] if at < len(segs) and segs[at].first_seq <= nxt + 1 else None
            allowed = await pruner(seg) if pruner is not None and seg is not None else None
            if seg is not None and allowed is not None:
                picked = sorted(q for q in allowed if q > nxt)
                recs = await self.read_entries(head, picked) if picked else []
                upto = seg.last_seq
            else:
                # scan up to the next segment the families may answer
                if seg is not None:
                    upto = seg.last_seq
                elif at < len(segs):
                    upto = segs[at].first_seq - 1
                else:
                    upto = head.head_seq
                try:
                    rr = await self._compose(
                        head, nxt, upto, PAGE_SCAN_RECORDS, PAGE_SCAN_BYTES, tag
                    )
                except TopicNotFound:
                    raise StreamNotFound(name_of(head.topic)) from None
                head = rr.head
                recs = list(rr.records)
                upto = rr.next_seq
                if upto <= nxt:
                    break
            for rec in recs:
                if tag is not None and rec.tag_json != tag:
                    continue
                if out and (len(out) >= limit or out_bytes + len(rec.data_raw) > max_bytes):
                    return RangeRead(head, out, rec.seq - 1, scanned), False
                scanned += len(rec.data_raw)
                if pred is None:
                    selected = True
                else:
                    version = schema.version_at(reg, rec.seq, key=boundary_seq) if reg else 0
                    selected = pred.matches(jsoncodec.loads(rec.data_raw), version=version or None)
                if selected:
                    out.append(rec)
                    out_bytes += len(rec.data_raw)
                if scanned >= FILTER_SCAN_CAP:
                    more = rec.seq < head.head_seq
                    return RangeRead(head, out, rec.seq, scanned), more and pred is not None
            nxt = upto
            if pred is None and allowed is None:
                break  # a key read answers after one scanned page, as an unpruned one does
        return RangeRead(head, out, nxt, scanned), False

    async def seek(self, head: Head, ts: int) -> int:
        """The seq just before the first entry appended at or after `ts` (a fork's search
        continues into its source when its own entries are all newer)."""
        found = await self._engine.seek_time(head, ts)
        state = state_of(head)
        fork = state.fork if state is not None else None
        if fork is None or found > fork.at:
            return found
        src = await self._engine.head_of(topic_of(fork.src), consistent=False)
        if src is None or src.deleted or src.epoch != fork.src_epoch:
            return found
        return min(await self.seek(src, ts), fork.at)

    async def wait(self, head: Head, timeout_s: float) -> tuple[Head, StreamState] | None:
        """Wait for the stream to move past `head` (an append, closure): the stream as it
        is then, None at the timeout; StreamNotFound if it was deleted or expired."""
        if timeout_s <= 0:
            return None
        moved = await self._engine.wait_change(head.topic, head, timeout_s)
        if moved is None:
            return None
        state = state_of(moved)
        if state is None or moved.epoch != head.epoch:
            raise StreamNotFound(name_of(head.topic))
        check_live(name_of(head.topic), moved, state, self._core.clock())
        return moved, state
