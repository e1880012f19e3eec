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

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from headwater import jsoncodec
from headwater.durable.fields import FieldSpec
from headwater.durable.offsets import (
    encode_offset,
)
from headwater.durable.scan import (
    WINDOW_BYTES,
    Coverage,
    Deadline,
    Doc,
    Pruner,
    SearchError,
    doc_of,
    scan,
)
from headwater.durable.search_request import (
    Resume,
    SearchRequest,
    SortSpec,
    _encode_resume,
    _sort_body,
    search_config,
)
from headwater.durable.service import DurableStreams
from headwater.engine import StoredRecord
from headwater.engine.ports import Head, SegmentItem


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
            h = _Hit(h.key, doc_of(rec, reg), h.score, h.seq)
        out.append(h)
    return out


def hit_fields(fields: Mapping[str, FieldSpec], doc: Doc) -> dict[str, Any]:
    """The declared search fields' raw values in the entry (one value: itself; several: an
    array), as the reference's hit `fields`."""
    from headwater.durable.jsonvalue import MISSING, flatten, json_pointer_get

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
        values = list(flatten(raw))
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
    return [doc_of(got[q], reg) for q in want if q in got]


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
