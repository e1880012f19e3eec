"""The bounded scan every /v1 query runs (``_search``, ``_aggregate``, inspection): a window
of a stream's entries read oldest- or newest-first through ``DurableStreams.read_window``,
sealed segments pruned by the index families where they answer (``Pruner``), with the
cooperative deadline checked between records and what was consulted accumulated in
``Coverage``."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol

from headwater import jsoncodec
from headwater.durable import schema
from headwater.durable.offsets import (
    boundary_seq,
    encode_offset,
)
from headwater.durable.service import DurableStreams
from headwater.engine import StoredRecord
from headwater.engine.ports import Head, SegmentItem
from headwater.errors import InvalidRequest

TIMEOUT_CAP_MS: Final = 3000  # §8.6: the effective timeout is clamped to <= 3000 ms
WINDOW_RECORDS: Final = 512  # records per newest-first window / forward page
WINDOW_BYTES: Final = 4 << 20
CANDIDATE_BATCH: Final = 256  # an indexed segment's candidates read per engine call
READ_AHEAD: Final = 8  # segments whose companions a pruner may fetch ahead of the scan

# The clock the cooperative deadline reads (seconds); tests replace it to make a deadline
# fall after a known number of records.
monotonic: Callable[[], float] = time.monotonic


class Pruner(Protocol):
    """What the index families say of a sealed segment for one query (index/reader.py)."""

    families: frozenset[str]

    async def __call__(self, seg: SegmentItem) -> frozenset[int] | None: ...


class SearchError(InvalidRequest):
    """A bad search/aggregate/inspection request: 400 in the /v1 error envelope."""


@dataclass(slots=True)
class Coverage:
    """What one request consulted. Families will add indexed counts; the scan fills the rest."""

    head: Head
    segments: list[SegmentItem]
    scanned_segments: set[int] = field(default_factory=set)  # segment last seqs
    scanned_segment_time_ms: float = 0.0
    scanned_tail_docs: int = 0
    scanned_tail_time_ms: float = 0.0
    indexed_segments: int = 0
    indexed_segment_time_ms: float = 0.0  # asking the families + reading their candidates
    exact_candidate_time_ms: float = 0.0  # asking the families (companion reads included)
    index_families_used: set[str] = field(default_factory=set)
    # (lo, hi] seqs the request meant to cover but did not reach (a deadline)
    missing: list[tuple[int, int]] = field(default_factory=list)
    timed_out: bool = False

    def segment_of(self, seq: int) -> SegmentItem | None:
        lo, hi = 0, len(self.segments)
        while lo < hi:  # first segment whose last_seq >= seq
            mid = (lo + hi) // 2
            if self.segments[mid].last_seq < seq:
                lo = mid + 1
            else:
                hi = mid
        if lo < len(self.segments) and self.segments[lo].first_seq <= seq:
            return self.segments[lo]
        return None

    def note(self, seq: int, seconds: float) -> None:
        seg = self.segment_of(seq) if seq <= self.head.sealed_through else None
        if seg is not None:
            self.scanned_segments.add(seg.last_seq)
            self.scanned_segment_time_ms += seconds * 1000
        else:
            self.scanned_tail_docs += 1
            self.scanned_tail_time_ms += seconds * 1000

    def missing_counts(self) -> dict[str, int]:
        sealed = wal = 0
        segs: set[int] = set()
        for lo, hi in self.missing:
            cut = min(hi, self.head.sealed_through)
            if cut > lo:
                sealed += cut - lo
                for s in self.segments:
                    if s.last_seq > lo and s.first_seq <= cut:
                        segs.add(s.last_seq)
            wal += max(0, hi - max(lo, self.head.sealed_through))
        return {
            "possible_missing_events_upper_bound": sealed + wal,
            "possible_missing_uploaded_segments": len(segs),
            "possible_missing_sealed_rows": sealed,
            "possible_missing_wal_rows": wal,
        }

    def common(self) -> dict[str, Any]:
        end = encode_offset(self.head.epoch, self.head.head_seq)
        return {
            "mode": "complete",
            "complete": not self.missing,
            "stream_head_offset": end,
            "visible_through_offset": end,
            "visible_through_primary_timestamp_max": None,
            "oldest_omitted_append_at": None,
            **self.missing_counts(),
        }


class Deadline:
    """The cooperative deadline of one request. It never stops a scan before the scan has
    examined something (`progressed`: an entry read, or a batch of an indexed segment's
    candidates): a page cut by the deadline always moves its continuation on, so a client
    following it cannot loop, whatever `timeout_ms` (0 included) and however slow the
    first read (issue 42)."""

    def __init__(self, timeout_ms: int) -> None:
        self.timeout_ms = timeout_ms
        self.started = monotonic()
        self.at = self.started + timeout_ms / 1000
        self.progressed = False

    def passed(self) -> bool:
        return self.progressed and monotonic() >= self.at

    def took_ms(self) -> int:
        return max(0, round((monotonic() - self.started) * 1000))


@dataclass(frozen=True, slots=True)
class Doc:
    rec: StoredRecord
    value: object  # the entry as stored (its own schema version)
    version: int | None  # None: no schema (newest bindings)


def doc_of(rec: StoredRecord, reg: Mapping[str, Any] | None) -> Doc:
    """A stored entry decoded for evaluation: its JSON value (None when it is not JSON: it
    matches nothing) and its schema version (by the registry's boundaries)."""
    try:
        value = jsoncodec.loads(rec.data_raw)
    except ValueError:
        value = None  # a JSON stream never stores one
    version = schema.version_at(reg, rec.seq, key=boundary_seq) if reg else 0
    return Doc(rec, value, version or None)


async def scan(
    streams: DurableStreams,
    cov: Coverage,
    deadline: Deadline,
    reg: Mapping[str, Any] | None,
    lo: int,
    hi: int,
    order: Literal["asc", "desc"],
    pruner: Pruner | None = None,
) -> AsyncIterator[Doc]:
    """The entries in seqs (lo, hi] in `order`, each noted in `cov`. At the deadline the
    rest of the window is recorded as missing and the iteration ends (cov.timed_out).

    `pruner`: what the index families say of each sealed segment (the seqs in it that may
    match the query, or None: no usable companion). A segment with none is skipped unread;
    of one with some only the blocks holding them are read, and only they are decoded and
    yielded (the caller still evaluates them: candidates may be a superset); the unsealed
    tail is always scanned."""
    if pruner is None:
        async for doc in _scan_range(streams, cov, deadline, reg, lo, hi, order):
            yield doc
        return
    pieces = _pieces(cov, lo, hi, order)
    warm = getattr(pruner, "warm", None)  # index/reader: fetch companions ahead of the scan
    for i, (p_lo, p_hi, seg) in enumerate(pieces):
        if warm is not None and seg is not None:
            warm(s for _, _, s in pieces[i : i + 1 + READ_AHEAD] if s is not None)
        t0 = monotonic()
        allowed = await pruner(seg) if seg is not None else None
        if allowed is not None:
            asked_ms = (monotonic() - t0) * 1000
            cov.exact_candidate_time_ms += asked_ms
            cov.indexed_segment_time_ms += asked_ms
            cov.indexed_segments += 1
            cov.index_families_used.update(pruner.families)
            if not any(p_lo < q <= p_hi for q in allowed):
                continue
            picked = _read_candidates(streams, cov, deadline, reg, p_lo, p_hi, order, allowed)
            async for doc in picked:
                yield doc
        else:
            if seg is not None:
                cov.scanned_segments.add(seg.last_seq)
            async for doc in _scan_range(streams, cov, deadline, reg, p_lo, p_hi, order):
                yield doc
        if cov.timed_out:
            if order == "asc":
                cov.missing.append((p_hi, hi))
            else:
                cov.missing.append((lo, p_lo))
            return


def _pieces(
    cov: Coverage, lo: int, hi: int, order: Literal["asc", "desc"]
) -> list[tuple[int, int, SegmentItem | None]]:
    """(lo, hi] cut at sealed segment boundaries: (piece lo, piece hi, its segment or None
    for the unsealed tail and any gap), in scan order."""
    out: list[tuple[int, int, SegmentItem | None]] = []
    at = lo
    for seg in cov.segments:
        if seg.last_seq <= at or seg.first_seq > hi:
            continue
        start = max(at, seg.first_seq - 1)
        if start > at:
            out.append((at, start, None))
        end = min(hi, seg.last_seq)
        out.append((start, end, seg))
        at = end
    if at < hi:
        out.append((at, hi, None))
    return out if order == "asc" else out[::-1]


async def _read_candidates(
    streams: DurableStreams,
    cov: Coverage,
    deadline: Deadline,
    reg: Mapping[str, Any] | None,
    lo: int,
    hi: int,
    order: Literal["asc", "desc"],
    allowed: frozenset[int],
) -> AsyncIterator[Doc]:
    """The candidate entries of an indexed segment in (lo, hi], in `order`: only the
    blocks holding them are read (and decoded once, in the frame cache)."""
    want = sorted(q for q in allowed if lo < q <= hi)
    if order == "desc":
        want.reverse()
    for at in range(0, len(want), CANDIDATE_BATCH):
        batch = want[at : at + CANDIDATE_BATCH]
        if deadline.passed():
            cov.timed_out = True
            cov.missing.append((batch[0] - 1, hi) if order == "asc" else (lo, batch[0]))
            return
        t0 = monotonic()
        recs = await streams.read_entries(cov.head, sorted(batch))
        cov.indexed_segment_time_ms += (monotonic() - t0) * 1000
        deadline.progressed = True
        if order == "desc":
            recs.reverse()
        for rec in recs:
            yield doc_of(rec, reg)


async def _scan_range(
    streams: DurableStreams,
    cov: Coverage,
    deadline: Deadline,
    reg: Mapping[str, Any] | None,
    lo: int,
    hi: int,
    order: Literal["asc", "desc"],
) -> AsyncIterator[Doc]:
    head = cov.head
    while lo < hi:
        if deadline.passed():
            cov.timed_out = True
            cov.missing.append((lo, hi))
            return
        if order == "asc":
            page = await streams.read_window(head, lo, hi, WINDOW_RECORDS, WINDOW_BYTES)
            recs, nxt = list(page.records), max(page.next_seq, lo)
            if nxt <= lo:
                return
        else:
            start = max(lo, hi - WINDOW_RECORDS)
            recs = []
            at = start
            while at < hi:  # the window, oldest first (a byte-capped page may stop short)
                page = await streams.read_window(head, at, hi, WINDOW_RECORDS, WINDOW_BYTES)
                recs.extend(page.records)
                if page.next_seq <= at:
                    break
                at = page.next_seq
            recs.reverse()
        for rec in recs:
            if deadline.passed():
                cov.timed_out = True
                if order == "asc":
                    cov.missing.append((rec.seq - 1, hi))
                else:
                    cov.missing.append((lo, rec.seq))
                return
            t0 = monotonic()
            doc = doc_of(rec, reg)
            cov.note(rec.seq, monotonic() - t0)
            deadline.progressed = True
            yield doc
        if order == "asc":
            lo = nxt
        else:
            hi = start
