"""``_search`` (protocol §8.6): parse a request, run it over a snapshot of the stream, shape
the response (docs/durable-streams.md, "Search and inspection").

This increment answers every request by scanning the stream's entries (sealed segments in S3
and the DynamoDB tail alike, through ``DurableStreams.read_window``). Index families (exact,
``.col``, ``.fts``, ``.agg``, lexicon) are later increments; they plug in at two seams here:

* ``Coverage`` accumulates what a request consulted: today ``indexed_segments`` stays 0 and
  ``index_families_used`` empty, and the scan counters say what was read.
* ``Scan`` is the one source of documents: a window of seqs read oldest- or newest-first, with
  the cooperative deadline checked between records. A family-backed source would hand back
  candidate seqs per segment and fall back to ``Scan`` for what it does not cover.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import itertools
import json
import math
import time
import zlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol, cast

from headwater import jsoncodec
from headwater.durable import schema
from headwater.durable.filter import FieldSpec, FilterError, Predicate, parse_query
from headwater.durable.offsets import (
    Offset,
    OffsetError,
    boundary_seq,
    decode_offset,
    encode_offset,
)
from headwater.durable.service import DurableStreams
from headwater.engine.ports import Head, SegmentItem
from headwater.engine.records import StoredRecord
from headwater.errors import InvalidRequest

DEFAULT_SIZE: Final = 50  # the reference's default page size
MAX_SIZE: Final = 500  # ...and its cap
TIMEOUT_CAP_MS: Final = 3000  # §8.6: the effective timeout is clamped to <= 3000 ms
WINDOW_RECORDS: Final = 512  # records per newest-first window / forward page
WINDOW_BYTES: Final = 4 << 20
CANDIDATE_BATCH: Final = 256  # an indexed segment's candidates read per engine call
READ_AHEAD: Final = 8  # segments whose companions a pruner may fetch ahead of the scan
BODY_KEYS: Final = frozenset({"q", "size", "sort", "search_after", "timeout_ms"})

# The clock the cooperative deadline reads (seconds); tests replace it to make a deadline
# fall after a known number of records.
monotonic: Callable[[], float] = time.monotonic


class Pruner(Protocol):
    """What the index families say of a sealed segment for one query (index/reader.py)."""

    families: frozenset[str]

    async def __call__(self, seg: SegmentItem) -> frozenset[int] | None: ...


class Ranker(Protocol):
    """A Pruner that can also answer a ranked query for a sealed segment from the families
    alone: every matching entry with its score and sort columns (index/reader.py)."""

    families: frozenset[str]

    async def __call__(self, seg: SegmentItem) -> frozenset[int] | None: ...

    async def ranked(
        self, seg: SegmentItem, columns: Sequence[FieldSpec]
    ) -> list[tuple[int, float, tuple[Any, ...]]] | None: ...


class _Ranking:
    """A scan pruner for a ranked (score or field sorted) search: a segment whose matches
    and their sort keys the families give exactly is answered without being read (its
    entries are collected in `found`; only the page's are read at the end); any other
    segment is pruned as usual."""

    def __init__(self, ranker: Ranker, columns: Sequence[FieldSpec], head: Head) -> None:
        self.ranker, self.columns, self.head = ranker, columns, head
        self.found: list[tuple[int, float, tuple[Any, ...]]] = []
        self.families: frozenset[str] = frozenset()
        self.warm = getattr(ranker, "warm", None)

    async def __call__(self, seg: SegmentItem) -> frozenset[int] | None:
        got = await self.ranker.ranked(seg, self.columns)
        if got is None:
            allowed = await self.ranker(seg)
            self.families = self.ranker.families
            return allowed
        self.families = self.ranker.families
        gone = seg.deleted
        lo, hi = self.head.earliest_seq, self.head.head_seq
        self.found.extend(x for x in got if lo <= x[0] <= hi and x[0] not in gone)
        return frozenset()


class SearchError(InvalidRequest):
    """A bad search/aggregate/inspection request: 400 in the /v1 error envelope."""


# --------------------------------------------------------------------------- coverage
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


def _doc(rec: StoredRecord, reg: Mapping[str, Any] | None) -> Doc:
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
            yield _doc(rec, reg)


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
            doc = _doc(rec, reg)
            cov.note(rec.seq, monotonic() - t0)
            deadline.progressed = True
            yield doc
        if order == "asc":
            lo = nxt
        else:
            hi = start


# --------------------------------------------------------------------------- request
@dataclass(frozen=True, slots=True)
class SortSpec:
    kind: Literal["offset", "score", "field"]
    desc: bool
    field: FieldSpec | None = None

    @property
    def label(self) -> str:
        name = {"offset": "offset", "score": "_score"}.get(self.kind) or self.field.name  # type: ignore[union-attr]
        return f"{name}:{'desc' if self.desc else 'asc'}"


@dataclass(frozen=True, slots=True)
class Resume:
    """Where a ranked pass cut by the deadline stands (the continuation of its 408 page):
    the walk's cursor it ranks after, the seqs (lo, hi] it has examined, how many matches
    it found there, and the best `size + 1` of them (by seq: the next request reads them
    again and merges them with what it finds in the rest of the stream)."""

    epoch: int
    after: tuple[Any, ...] | None
    lo: int
    hi: int
    matched: int
    seqs: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class SearchRequest:
    query: Predicate
    size: int
    sorts: tuple[SortSpec, ...]
    search_after: tuple[Any, ...] | None
    timeout_ms: int
    requested_timeout_ms: int | None
    resume: Resume | None = None
    fingerprint: str = ""  # of q, sort and size: a continuation belongs to one query


def search_config(reg: Mapping[str, Any]) -> tuple[Mapping[str, Any], dict[str, FieldSpec]]:
    search = reg.get("search")
    if not search:
        raise SearchError("search is not configured for this stream (POST /_schema a search)")
    return search, schema.search_fields(reg)


def compile_q(q: object, reg: Mapping[str, Any]) -> Predicate:
    search, fields = search_config(reg)
    if not isinstance(q, str):
        raise SearchError("q must be a string")
    try:
        return parse_query(q, fields, search)
    except FilterError as exc:
        raise SearchError(f"q: {exc}") from None


def _int_param(raw: object, name: str, lo: int, hi: int | None) -> int:
    if isinstance(raw, str):
        text = raw.strip()
        if not (text.isascii() and text.isdigit()) or len(text) > 9:
            raise SearchError(f"{name} must be an integer")
        raw = int(text)
    if isinstance(raw, float) and raw.is_integer():
        raw = int(raw)
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise SearchError(f"{name} must be an integer")
    if raw < lo or (hi is not None and raw > hi):
        limit = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
        raise SearchError(f"{name} must be an integer {limit}")
    return raw


def _sorts(
    raw: list[str], search: Mapping[str, Any], fields: Mapping[str, FieldSpec]
) -> tuple[SortSpec, ...]:
    out: list[SortSpec] = []
    for item in raw:
        if not isinstance(item, str) or not item.strip():
            raise SearchError("sort entries must be non-empty strings like offset:desc")
        name, _, direction = item.strip().partition(":")
        direction = direction or "desc"
        if direction not in ("asc", "desc"):
            raise SearchError(f"sort {item!r}: direction must be asc or desc")
        desc = direction == "desc"
        if name == "offset":
            spec = SortSpec("offset", desc)
        elif name == "_score":
            spec = SortSpec("score", desc)
        else:
            f = fields.get(name)
            if f is None:
                raise SearchError(f"sort {item!r}: unknown search field {name!r}")
            if not f.sortable and f.name != search.get("primaryTimestampField"):
                raise SearchError(f"sort {item!r}: field {name!r} is not sortable")
            spec = SortSpec("field", desc, f)
        if any(s.label.split(":")[0] == spec.label.split(":")[0] for s in out):
            raise SearchError(f"sort {item!r}: {name} is given twice")
        out.append(spec)
        if spec.kind == "offset":
            break  # offsets are unique: nothing after them could order anything
    if not any(s.kind == "offset" for s in out):
        out.append(SortSpec("offset", True))  # the tie-break (reference behaviour)
    return tuple(out)


def parse_request(
    raw: Mapping[str, Any], reg: Mapping[str, Any], *, from_query: bool
) -> SearchRequest:
    """A search request from a POST body (strict) or from GET parameters (already mapped:
    `sort` a list, `search_after` the decoded JSON)."""
    unknown = sorted(set(raw) - BODY_KEYS)
    if unknown:
        raise SearchError(f"unknown search request field(s): {', '.join(unknown)}")
    if "q" not in raw:
        raise SearchError("q is required")
    search, fields = search_config(reg)
    query = compile_q(raw["q"], reg)
    size = DEFAULT_SIZE if raw.get("size") is None else _int_param(raw["size"], "size", 1, MAX_SIZE)
    requested = None
    if raw.get("timeout_ms") is not None:
        requested = _int_param(raw["timeout_ms"], "timeout_ms", 0, None)
    timeout = TIMEOUT_CAP_MS if requested is None else min(requested, TIMEOUT_CAP_MS)
    sort_raw = raw.get("sort")
    if sort_raw is None:
        sort_raw = []
    elif isinstance(sort_raw, str) and not from_query:
        raise SearchError("sort must be an array of strings")
    if not isinstance(sort_raw, list):
        raise SearchError("sort must be an array of strings")
    if sort_raw:
        sorts = _sorts(sort_raw, search, fields)
    elif _scores(query):  # the reference: text queries rank by score, then time, then offset
        primary = fields.get(str(search.get("primaryTimestampField")))
        sorts = (
            SortSpec("score", True),
            SortSpec("field", True, primary),
            SortSpec("offset", True),
        )
    else:
        sorts = (SortSpec("offset", True),)
    fingerprint = _fingerprint(raw["q"], sorts, size)
    after = raw.get("search_after")
    resume = None
    if after is not None:
        if not isinstance(after, list):
            raise SearchError("search_after must be an array (a hit's sort)")
        if _is_resume(sorts, after):
            resume = _decode_resume(after[0], sorts, fingerprint)
            after = resume.after
        elif len(after) != len(sorts):
            raise SearchError(f"search_after must have {len(sorts)} values, one per sort")
        else:
            after = tuple(_after_value(s, v) for s, v in zip(sorts, after, strict=True))
    return SearchRequest(query, size, sorts, after, timeout, requested, resume, fingerprint)


# A ranked pass's continuation (next_search_after of a ranked 408 page): a one-element array
# holding an opaque string. A hit's sort array always has at least two values under a
# ranked sort (the offset tie-break), so the two shapes cannot be confused, and a client
# that pages by a hit's sort, as documented, is unaffected.
RESUME_PREFIX: Final = "~rank1."


def _fingerprint(q: object, sorts: tuple[SortSpec, ...], size: int) -> str:
    text = json.dumps([q, [s.label for s in sorts], size], separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def _is_resume(sorts: tuple[SortSpec, ...], after: list[Any]) -> bool:
    return (
        len(sorts) > 1
        and len(after) == 1
        and isinstance(after[0], str)
        and after[0].startswith(RESUME_PREFIX)
    )


def _encode_resume(head: Head, sorts: tuple[SortSpec, ...], fingerprint: str, r: Resume) -> str:
    deltas, prev = [], 0
    for q in sorted(r.seqs):
        deltas.append(q - prev)
        prev = q
    doc = {
        "f": fingerprint,
        "e": r.epoch,
        "a": None if r.after is None else _sort_body(head, sorts, r.after),
        "c": [r.lo, r.hi],
        "m": r.matched,
        "s": deltas,
    }
    raw = zlib.compress(json.dumps(doc, separators=(",", ":")).encode(), 6)
    return RESUME_PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_resume(token: str, sorts: tuple[SortSpec, ...], fingerprint: str) -> Resume:
    bad = SearchError("search_after: not a continuation this server gave")
    try:
        text = token[len(RESUME_PREFIX) :]
        raw = zlib.decompress(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        doc = json.loads(raw)
    except (ValueError, zlib.error):
        raise bad from None
    if not isinstance(doc, dict):
        raise bad
    if doc.get("f") != fingerprint:
        raise SearchError(
            "search_after: this continuation belongs to another query, sort or size "
            "(page with the q, sort and size that gave it)"
        )
    a, c, m, deltas, epoch = doc.get("a"), doc.get("c"), doc.get("m"), doc.get("s"), doc.get("e")

    def nat(v: object) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= 0

    if not (
        nat(epoch)
        and nat(m)
        and isinstance(c, list)
        and len(c) == 2
        and all(nat(x) for x in c)
        and c[0] <= c[1]
        and isinstance(deltas, list)
        and len(deltas) <= MAX_SIZE + 1
        and all(nat(x) and x > 0 for x in deltas)
        and (a is None or (isinstance(a, list) and len(a) == len(sorts)))
    ):
        raise bad
    seqs = tuple(itertools.accumulate(deltas))
    if seqs and not c[0] < seqs[0] <= seqs[-1] <= c[1]:
        raise bad
    after = None if a is None else tuple(_after_value(s, v) for s, v in zip(sorts, a, strict=True))
    return Resume(cast(int, epoch), after, c[0], c[1], cast(int, m), seqs)


def _scores(p: Predicate) -> bool:
    from headwater.durable.filter import And, Not, Or, Text

    if isinstance(p, Text):
        return True
    if isinstance(p, And | Or):
        return any(_scores(c) for c in p.children)
    return isinstance(p, Not) and _scores(p.child)


def _after_value(s: SortSpec, v: object) -> Any:
    """A search_after element as the comparable internal value (offsets as seqs)."""
    if s.kind == "offset":
        if not isinstance(v, str):
            raise SearchError("search_after: the offset value must be an offset string")
        try:
            off = decode_offset(v)
        except OffsetError as exc:
            raise SearchError(f"search_after: {exc}") from None
        return off.seq if isinstance(off, Offset) else 0
    if v is None:
        return None
    if s.kind == "score":
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise SearchError("search_after: a _score value must be a number")
        return float(v)
    kind = s.field.kind  # type: ignore[union-attr]
    ok = {
        "keyword": isinstance(v, str),
        "bool": isinstance(v, bool),
        "integer": isinstance(v, int) and not isinstance(v, bool),
        "date": isinstance(v, int) and not isinstance(v, bool),
        "float": isinstance(v, int | float) and not isinstance(v, bool),
    }.get(kind, False)
    if not ok or (isinstance(v, float) and not math.isfinite(v)):
        raise SearchError(f"search_after: a value of the wrong type for {s.label}")
    return v


# --------------------------------------------------------------------------- execution
def _cmp(a: Any, b: Any) -> int:
    """Natural order, None after every value."""
    if a is None and b is None:
        return 0
    if a is None:
        return 1
    if b is None:
        return -1
    return -1 if a < b else (1 if a > b else 0)


def compare_keys(sorts: tuple[SortSpec, ...], a: tuple[Any, ...], b: tuple[Any, ...]) -> int:
    """Hit order: per sort, ascending or descending, a missing value after every value in
    both directions (then the next sort decides)."""
    for s, x, y in zip(sorts, a, b, strict=True):
        if x is None or y is None:
            c = _cmp(x, y)  # None last whatever the direction
            if c:
                return c
            continue
        c = _cmp(x, y)
        if c:
            return -c if s.desc else c
    return 0


@dataclass(slots=True)
class _Hit:
    key: tuple[Any, ...]
    doc: Doc | None  # None: ranked from the families, read only if on the page
    score: float
    seq: int


def _ranked_key(
    sorts: tuple[SortSpec, ...], seq: int, score: float, cols: tuple[Any, ...]
) -> tuple[Any, ...]:
    """`_sort_key` of an entry known only from the families (the field sorts' values in
    `cols`, in sort order)."""
    key: list[Any] = []
    fields = iter(cols)
    for s in sorts:
        if s.kind == "offset":
            key.append(seq)
        elif s.kind == "score":
            key.append(score)
        else:
            key.append(next(fields))
    return tuple(key)


async def _read_page(
    streams: DurableStreams, head: Head, reg: Mapping[str, Any] | None, page: list[_Hit]
) -> list[_Hit]:
    """The page with every hit's entry read (those ranked from the families were not)."""
    want = sorted(h.seq for h in page if h.doc is None)
    if not want:
        return page
    recs = {r.seq: r for r in await streams.read_entries(head, want)}
    out: list[_Hit] = []
    for h in page:
        if h.doc is None:
            rec = recs.get(h.seq)
            if rec is None:
                continue  # deleted since the request's snapshot
            h = _Hit(h.key, _doc(rec, reg), h.score, h.seq)
        out.append(h)
    return out


def hit_fields(fields: Mapping[str, FieldSpec], doc: Doc) -> dict[str, Any]:
    """The declared search fields' raw values in the entry (one value: itself; several: an
    array), as the reference's hit `fields`."""
    from headwater.durable.filter import MISSING, _flatten, json_pointer_get

    out: dict[str, Any] = {}
    for name, spec in fields.items():
        if spec.name != name:
            continue  # an alias
        pointer = spec.pointer_for(doc.version)
        if pointer is None:
            continue
        raw = json_pointer_get(doc.value, pointer)
        if raw is MISSING:
            continue
        values = list(_flatten(raw))
        if values:
            out[name] = values[0] if len(values) == 1 else values
    return out


def _sort_key(sorts: tuple[SortSpec, ...], doc: Doc, score: float) -> tuple[Any, ...]:
    key: list[Any] = []
    for s in sorts:
        if s.kind == "offset":
            key.append(doc.rec.seq)
        elif s.kind == "score":
            key.append(score)
        else:
            values = s.field.values(doc.value, doc.version)  # type: ignore[union-attr]
            key.append(values[0] if values else None)
    return tuple(key)


async def run_search(
    streams: DurableStreams,
    name: str,
    head: Head,
    reg: Mapping[str, Any],
    req: SearchRequest,
    pruner: Pruner | None = None,
) -> tuple[int, dict[str, Any]]:
    """(status, body): 200, or 408 with the partial result when the deadline passed.
    `pruner`: the stream's index families for this query (None: scan every segment)."""
    deadline = Deadline(req.timeout_ms)
    cov = Coverage(head, await streams.segments(head))
    _, fields = search_config(reg)
    promote = streams.promoter(dict(reg))
    sorts = req.sorts
    offset_only = len(sorts) == 1
    if offset_only:
        order: Literal["asc", "desc"] = "desc" if sorts[0].desc else "asc"
        hits, matched, more = await _offset_page(streams, cov, deadline, reg, req, pruner)
        resume = None
    else:
        order = "desc"
        hits, matched, resume = await _ranked_pass(streams, cov, deadline, reg, req, pruner)
        more = len(hits) > req.size
    page = await _read_page(streams, head, reg, hits[: req.size]) if resume is None else []
    # `eq` only where the walk ends: a page with a continuation does not hold every match
    # past the cursor (§8.6: "if the returned page may not include every visible match,
    # total.relation is gte"), whatever the sort; a client may stop at `eq`.
    last = not cov.timed_out and not more
    if resume is not None:
        nxt: list[Any] | None = [_encode_resume(head, sorts, req.fingerprint, resume)]
    else:
        nxt = _continuation(head, sorts, page, more, cov, order, offset_only)
    body = {
        "stream": name,
        "snapshot_end_offset": encode_offset(head.epoch, head.head_seq),
        "took_ms": deadline.took_ms(),
        "timed_out": cov.timed_out,
        "timeout_ms": req.timeout_ms,
        "coverage": {
            **cov.common(),
            "indexed_segments": cov.indexed_segments,
            "indexed_segment_time_ms": round(cov.indexed_segment_time_ms),
            "fts_section_get_ms": round(getattr(pruner, "fts_section_get_ms", 0.0)),
            "fts_decode_ms": 0,
            "fts_clause_estimate_ms": 0,
            "scanned_segments": len(cov.scanned_segments),
            "scanned_segment_time_ms": round(cov.scanned_segment_time_ms),
            "scanned_tail_docs": cov.scanned_tail_docs,
            "scanned_tail_time_ms": round(cov.scanned_tail_time_ms),
            "exact_candidate_time_ms": round(cov.exact_candidate_time_ms),
            "index_families_used": sorted(cov.index_families_used),
        },
        "total": {"value": matched, "relation": "eq" if last else "gte"},
        "hits": [_hit_body(head, sorts, fields, promote, h) for h in page],
        "next_search_after": nxt,
    }
    return (408 if cov.timed_out else 200), body


async def _offset_page(
    streams: DurableStreams,
    cov: Coverage,
    deadline: Deadline,
    reg: Mapping[str, Any],
    req: SearchRequest,
    pruner: Pruner | None,
) -> tuple[list[_Hit], int, bool]:
    """An offset-sorted page: the scan runs from the cursor in the sort's order and stops one
    match past the page (hits, matches seen, whether one more follows)."""
    sorts, after = req.sorts, req.search_after
    order: Literal["asc", "desc"] = "desc" if sorts[0].desc else "asc"
    lo, hi = 0, cov.head.head_seq
    if after is not None:
        if sorts[0].desc:
            hi = min(hi, after[0] - 1)
        else:
            lo = max(lo, after[0])
    hits: list[_Hit] = []
    async for doc in scan(streams, cov, deadline, reg, lo, hi, order, pruner):
        ok, score = req.query.evaluate(doc.value, version=doc.version)
        if not ok:
            continue
        hits.append(_Hit(_sort_key(sorts, doc, score), doc, score, doc.rec.seq))
        if len(hits) > req.size:  # one past the page: there is a next page
            break
    return hits, len(hits), len(hits) > req.size


async def _ranked_pass(
    streams: DurableStreams,
    cov: Coverage,
    deadline: Deadline,
    reg: Mapping[str, Any],
    req: SearchRequest,
    pruner: Pruner | None,
) -> tuple[list[_Hit], int, Resume | None]:
    """A page sorted by a field or by score: every match past the cursor in the whole
    snapshot is ranked and the best `size + 1` kept (sorted hits, matches, None), so a page
    is only given once the pass has examined every entry. A pass the deadline cuts gives no
    hit (the best of what it reached need not be the next in the walk) but a Resume: the
    seqs it has examined, its match count and its best `size + 1` so far; the request that
    continues it reads those again and examines the rest, and so on until the pass is whole.

    The examined seqs stay one interval (lo, hi]: a pass first ranks (hi, head] oldest
    first (what was appended since the pass began), then (0, lo] newest first, so a cut in
    either leaves the examined part contiguous."""
    head, sorts = cov.head, req.sorts
    after = req.search_after
    top = head.head_seq

    def order_of(x: _Hit, y: _Hit) -> int:
        return compare_keys(sorts, x.key, y.key)

    cmp = functools.cmp_to_key(order_of)
    hits: list[_Hit] = []
    matched = 0
    r = req.resume
    if r is not None:
        if r.epoch != head.epoch:
            raise SearchError(
                "search_after: the stream was deleted and created again since this "
                "continuation was given; start the walk again"
            )
        lo, hi = min(r.lo, top), min(r.hi, top)
        carried = await _read_docs(streams, head, reg, list(r.seqs))
        matched = max(0, r.matched - (len(r.seqs) - len(carried)))
        for doc in carried:
            ok, score = req.query.evaluate(doc.value, version=doc.version)
            key = _sort_key(sorts, doc, score)
            if not ok or (after is not None and compare_keys(sorts, key, after) <= 0):
                matched = max(0, matched - 1)
                continue
            hits.append(_Hit(key, doc, score, doc.rec.seq))
    else:
        lo = hi = top
    done_lo, done_hi = lo, hi  # examined by the requests before this one
    ranking: _Ranking | None = None
    if pruner is not None and hasattr(pruner, "ranked"):
        columns = [s.field for s in sorts if s.kind == "field" and s.field is not None]
        ranking = _Ranking(pruner, columns, head)  # type: ignore[arg-type]
    source = ranking or pruner

    def keep(hit: _Hit) -> None:
        nonlocal matched
        if after is not None and compare_keys(sorts, hit.key, after) <= 0:
            return
        matched += 1
        hits.append(hit)
        if len(hits) >= 4 * (req.size + 1):
            hits.sort(key=cmp)
            del hits[req.size + 1 :]

    async def rank(a: int, b: int, order: Literal["asc", "desc"]) -> None:
        async for doc in scan(streams, cov, deadline, reg, a, b, order, source):
            ok, score = req.query.evaluate(doc.value, version=doc.version)
            if ok:
                keep(_Hit(_sort_key(sorts, doc, score), doc, score, doc.rec.seq))

    if hi < top:
        await rank(hi, top, "asc")
        if cov.timed_out:
            hi = min(a for a, _ in cov.missing)  # examined now: (lo, hi]
            if lo > 0:
                cov.missing.append((0, lo))
    if not cov.timed_out:
        hi = top
        if lo > 0:
            await rank(0, lo, "desc")
            lo = max(b for _, b in cov.missing) if cov.timed_out else 0
    # A segment the families answer is taken whole: one that straddles a bound of this
    # request's passes has entries outside them (examined by a request before this one, or
    # left to the next), and one that holds the whole range examined before (sealed since)
    # is handed over by both passes. Each entry counts once, in the request that examines it.
    seen: set[int] = set()
    for seq_, score, cols in ranking.found if ranking is not None else ():
        if lo < seq_ <= hi and not done_lo < seq_ <= done_hi and seq_ not in seen:
            seen.add(seq_)
            keep(_Hit(_ranked_key(sorts, seq_, score, cols), None, score, seq_))
    hits.sort(key=cmp)
    del hits[req.size + 1 :]
    if not cov.timed_out:
        return hits, matched, None
    seqs = tuple(h.seq for h in hits)
    return hits, matched, Resume(head.epoch, after, lo, hi, matched, seqs)


async def _read_docs(
    streams: DurableStreams, head: Head, reg: Mapping[str, Any] | None, seqs: list[int]
) -> list[Doc]:
    """The entries at `seqs` that still exist, decoded (those read_entries does not reach,
    as a fork's inherited ones, are read one by one)."""
    want = sorted(set(seqs))
    got = {r.seq: r for r in await streams.read_entries(head, want)} if want else {}
    for q in want:
        if q not in got:
            page = await streams.read_window(head, q - 1, q, 1, WINDOW_BYTES)
            got.update((r.seq, r) for r in page.records if r.seq == q)
    return [_doc(got[q], reg) for q in want if q in got]


def _continuation(
    head: Head,
    sorts: tuple[SortSpec, ...],
    page: list[_Hit],
    more: bool,
    cov: Coverage,
    order: Literal["asc", "desc"],
    offset_only: bool,
) -> list[Any] | None:
    """`next_search_after`: where the next page starts, or None when this page ends the walk.

    An offset-sorted scan stopped by the deadline continues from the offset its scan stopped
    at, not from the page's last hit: so a partial page without any hit still continues, and
    the next one neither skips nor reads again what this one examined. Paging through 408s
    thus returns every match once, as a complete walk does. (A ranked pass cut by the
    deadline continues with a Resume instead: _ranked_pass.)"""
    if cov.timed_out and offset_only and cov.missing:
        if order == "asc":
            frontier = min(lo for lo, _ in cov.missing)  # the next page scans (frontier, hi]
        else:
            frontier = max(hi for _, hi in cov.missing) + 1  # ...and (lo, frontier - 1]
        return _sort_body(head, sorts, (frontier,))
    if page and more:
        return _sort_body(head, sorts, page[-1].key)
    return None


def _sort_body(head: Head, sorts: tuple[SortSpec, ...], key: tuple[Any, ...]) -> list[Any]:
    return [
        encode_offset(head.epoch, v) if s.kind == "offset" else v
        for s, v in zip(sorts, key, strict=True)
    ]


def _hit_body(
    head: Head,
    sorts: tuple[SortSpec, ...],
    fields: Mapping[str, FieldSpec],
    promote: Callable[[StoredRecord], bytes] | None,
    h: _Hit,
) -> dict[str, Any]:
    doc = h.doc
    assert doc is not None  # _read_page read every page entry
    source = jsoncodec.loads(promote(doc.rec)) if promote else doc.value
    return {
        "offset": encode_offset(head.epoch, doc.rec.seq),
        "score": h.score,
        "sort": _sort_body(head, sorts, h.key),
        "fields": hit_fields(fields, doc),
        "source": source,
    }


def search_headers(body: Mapping[str, Any]) -> dict[str, str]:
    cov = body["coverage"]

    def b(v: object) -> str:
        return "true" if v else "false"

    return {
        "search-timed-out": b(body["timed_out"]),
        "search-timeout-ms": str(body["timeout_ms"]),
        "search-took-ms": str(body["took_ms"]),
        "search-total-relation": body["total"]["relation"],
        "search-coverage-complete": b(cov["complete"]),
        "search-indexed-segments": str(cov["indexed_segments"]),
        "search-indexed-segment-time-ms": str(cov["indexed_segment_time_ms"]),
        "search-fts-section-get-ms": str(cov["fts_section_get_ms"]),
        "search-fts-decode-ms": str(cov["fts_decode_ms"]),
        "search-fts-clause-estimate-ms": str(cov["fts_clause_estimate_ms"]),
        "search-scanned-segments": str(cov["scanned_segments"]),
        "search-scanned-segment-time-ms": str(cov["scanned_segment_time_ms"]),
        "search-scanned-tail-docs": str(cov["scanned_tail_docs"]),
        "search-scanned-tail-time-ms": str(cov["scanned_tail_time_ms"]),
        "search-exact-candidate-time-ms": str(cov["exact_candidate_time_ms"]),
        "search-index-families-used": ",".join(cov["index_families_used"]),
        "Cache-Control": "no-store",
    }
