"""The request side of the index families: for one stream and one query, what each sealed
segment's companion says (durable/scan.py's `Pruner`).

A segment is served from its companion only when all of this holds: the stream's catalogue
(storage/index_catalogue.py) is for the plan generation the current search config asks for,
the segment lies in the covered prefix, and the companion object's own header carries that
generation. Anything else (no catalogue, a stale plan, a segment past the covered prefix, a
companion missing or corrupt) answers None and the segment is scanned: results are exact
whatever the coverage, only the cost differs.

Candidates may include entries deleted since the companion was built (reads skip those) and
are always verified by the query evaluator on the entries read, so a companion can narrow a
scan but never change its answer. Decoded companions are kept in a small per-process LRU
(they are immutable for a given key and generation)."""

from __future__ import annotations

import asyncio
import functools
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from headwater.durable.aggregate import Rollup
from headwater.durable.fields import FieldSpec
from headwater.durable.filter import Predicate
from headwater.engine import LogEngine, companion_key
from headwater.engine.ports import Head, SegmentItem
from headwater.engine.ports.catalogue import Catalogue, IndexCatalogueStore
from headwater.errors import StorageUnavailable
from headwater.index import runs
from headwater.index.companion import Companion
from headwater.index.format import SECTION_ORDER, CompanionError, SectionNotLoaded
from headwater.index.plan import IndexPlan
from headwater.index.runs import LexiconRun, LexiconRunError, runs_touching

CACHE_ENTRIES = 512
# A companion is first read as its first PREFIX_BYTES: the whole object for most (one GET,
# as a whole read), the header, the section table and the front sections of a bigger one,
# whose other sections are then read one ranged GET each when a request first uses them.
# Measured (bench_search, 1.1 MB companions, moto): with a 64 KiB prefix a cold exact query
# over 40 segments took 2.5 s against 2.0 s for whole reads: a second round trip per segment
# costs more than the bytes it saves.
PREFIX_BYTES = 2 << 20
T = TypeVar("T")
RUN_CACHE_ENTRIES = 32
# Companions a request fetches ahead of its scan (StreamIndex.warm), concurrently: a cold
# process otherwise pays one S3 round trip per segment, one after the other.
READ_AHEAD = 8


class CompanionCache:
    def __init__(self, entries: int = CACHE_ENTRIES) -> None:
        self._entries = entries
        self._lru: OrderedDict[str, Companion] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def peek(self, key: str) -> Companion | None:
        """The cached companion, without counting a hit or moving it."""
        return self._lru.get(key)

    def get(self, key: str) -> Companion | None:
        comp = self._lru.get(key)
        if comp is not None:
            self._lru.move_to_end(key)
            self.hits += 1
        return comp

    def put(self, key: str, comp: Companion) -> None:
        self._lru[key] = comp
        self._lru.move_to_end(key)
        while len(self._lru) > self._entries:
            self._lru.popitem(last=False)

    def __len__(self) -> int:
        return len(self._lru)


_CACHE = CompanionCache()
_RUNS: OrderedDict[str, LexiconRun] = OrderedDict()


class StreamIndex:
    """One stream's usable companions, as of one catalogue read."""

    def __init__(
        self, engine: LogEngine, plan: IndexPlan, catalogue: Catalogue, cache: CompanionCache
    ) -> None:
        self.engine = engine
        self.plan = plan
        self.catalogue = catalogue
        self.cache = cache
        self._inflight: dict[str, asyncio.Future[Companion | None]] = {}
        self.fts_section_get_ms = 0.0  # ranged GETs of text-postings sections

    async def run_for(self, seg: SegmentItem) -> LexiconRun | None:
        """The lexicon run the catalogue lists over this segment, built for this plan (None:
        there is none, or it cannot be read: use the segment's companion)."""
        span = runs_touching(self.catalogue, seg)
        if span is None or span[1] > self.catalogue.covered_through:
            return None
        key = runs.key_of(span, seg)
        run = _RUNS.get(key)
        if run is None or run.generation != self.plan.generation:
            try:
                raw = await self.engine.run_io(self.engine.blobs.get, key)
                run = LexiconRun.from_bytes(raw)
            except (StorageUnavailable, LexiconRunError):
                return None
            _RUNS[key] = run
            while len(_RUNS) > RUN_CACHE_ENTRIES:
                _RUNS.popitem(last=False)
        _RUNS.move_to_end(key)
        if run.generation != self.plan.generation or run.member_of(seg) is None:
            return None
        return run

    def covers(self, seg: SegmentItem) -> bool:
        return seg.last_seq <= self.catalogue.covered_through

    async def companion(self, seg: SegmentItem) -> Companion | None:
        """The segment's companion: from the cache, else its first PREFIX_BYTES (the whole
        object, or its header, section table and the sections lying in them; `use` reads
        the others a request needs). None: not covered, missing, unreadable or built for
        another plan."""
        if not self.covers(seg):
            return None
        key = companion_key(seg.key)
        comp = self.cache.get(key)
        if comp is None or comp.generation != self.plan.generation:
            pending = self._inflight.get(key)
            comp = await (pending if pending is not None else self._load(key))
            if comp is None:
                return None  # missing or unreadable: scan the segment
        if comp.generation != self.plan.generation:
            return None  # rebuilt for another plan meanwhile
        return comp

    async def _load(self, key: str) -> Companion | None:
        self.cache.misses += 1
        try:
            raw = await self.engine.run_io(self.engine.blobs.get_range, key, 0, PREFIX_BYTES)
            comp = Companion.from_prefix(raw)
        except (StorageUnavailable, CompanionError):
            return None
        self.cache.put(key, comp)
        return comp

    def warm(self, segs: Iterable[SegmentItem]) -> None:
        """Start fetching the companions of these segments (the next ones a scan will ask
        for) that are neither cached nor on their way, at most READ_AHEAD at a time; the
        scan's `companion()` then awaits the fetch already running. A fetch that fails is
        reported by `companion()` as a missing companion (the segment is scanned)."""
        for seg in segs:
            if len(self._inflight) >= READ_AHEAD:
                return
            if not self.covers(seg):
                continue
            key = companion_key(seg.key)
            cached = self.cache.peek(key)
            if key in self._inflight or (
                cached is not None and cached.generation == self.plan.generation
            ):
                continue
            task = asyncio.ensure_future(self._load(key))
            self._inflight[key] = task
            task.add_done_callback(functools.partial(self._landed, key))

    def _landed(self, key: str, task: asyncio.Future[Companion | None]) -> None:
        self._inflight.pop(key, None)
        if not task.cancelled():
            task.exception()  # retrieved: a fetch nobody awaited fails quietly

    async def use(self, seg: SegmentItem, comp: Companion, fn: Callable[[], T]) -> T | None:
        """`fn()` (a computation on `comp`), reading each section it needs that the companion
        does not hold yet with one ranged GET; None when one cannot be read or is corrupt
        (the caller scans the segment, as for a missing companion)."""
        key = companion_key(seg.key)
        for _ in range(len(SECTION_ORDER) + 1):
            try:
                return fn()
            except SectionNotLoaded as need:
                t0 = time.monotonic()
                try:
                    body = await self.engine.run_io(
                        self.engine.blobs.get_range, key, need.offset, need.offset + need.length
                    )
                    if need.name == "fts":
                        self.fts_section_get_ms += (time.monotonic() - t0) * 1000
                    comp.load(need.name, body)
                except (StorageUnavailable, CompanionError):
                    return None
            except CompanionError:
                return None
        return None

    @staticmethod
    def fresh(seg: SegmentItem, comp: Companion) -> bool:
        """No entry of the segment was deleted since its companion was built (it left out
        the entries deleted by then): needed where a deleted entry would count (routing
        keys, rollups), not for search candidates (reads skip deleted entries)."""
        return comp.doc_count == seg.count - seg.deleted_count

    async def keys_of(self, seg: SegmentItem) -> list[str] | None:
        """durable.inspect.KeyIndex: the segment's distinct routing keys, from its companion."""
        comp = await self.companion(seg)
        if comp is None or "rk" not in comp.families or not self.fresh(seg, comp):
            return None
        return await self.use(seg, comp, comp.routing_keys)

    async def windows_of(self, seg: SegmentItem, r: Rollup) -> Any:
        """durable.aggregate.RollupIndex: the segment's full windows of the request."""
        comp = await self.companion(seg)
        if comp is None or "agg" not in comp.families or not self.fresh(seg, comp):
            return None

        def windows() -> Any:
            try:
                return comp.rollup_windows(r.name, r.interval, r.group_by, r.wanted)
            except KeyError:
                return None  # not built for this rollup or interval: scan

        return await self.use(seg, comp, windows)

    def pruner(self, query: Predicate) -> QueryPruner:
        return QueryPruner(self, query)


class QueryPruner:
    """durable.scan.Pruner for one query: the seqs of a segment that may match it."""

    def __init__(self, index: StreamIndex, query: Predicate) -> None:
        self.index = index
        self.query = query
        self.families: frozenset[str] = frozenset()

    def warm(self, segs: Iterable[SegmentItem]) -> None:
        self.index.warm(segs)

    @property
    def fts_section_get_ms(self) -> float:
        return self.index.fts_section_get_ms

    async def __call__(self, seg: SegmentItem) -> frozenset[int] | None:
        comp = await self.index.companion(seg)
        if comp is None:
            return None

        def candidates() -> frozenset[int] | None:
            ords = comp.candidates(self.query)
            if ords is None:
                return None
            seqs = comp.seqs()
            return frozenset(seqs[o] for o in ords)

        got = await self.index.use(seg, comp, candidates)
        if got is not None:
            self.families = self.families | frozenset(comp.families)
        return got

    async def ranked(
        self, seg: SegmentItem, columns: Sequence[FieldSpec]
    ) -> list[tuple[int, float, tuple[Any, ...]]] | None:
        """durable.search.Ranker: the segment's matching entries as (seq, score, the
        `columns`' first values) from its companion alone, or None when it cannot say
        exactly (the entries are then read and evaluated)."""
        comp = await self.index.companion(seg)
        if comp is None:
            return None

        def ranked() -> list[tuple[int, float, tuple[Any, ...]]] | None:
            scores = comp.scored(self.query)
            if scores is None:
                return None
            cols = [comp.column(spec) for spec in columns]
            if any(c is None for c in cols):
                return None
            seqs = comp.seqs()
            return [
                (seqs[o], sc, tuple(c[o] for c in cols))  # type: ignore[index]
                for o, sc in scores.items()
            ]

        got = await self.index.use(seg, comp, ranked)
        if got is not None:
            self.families = self.families | frozenset(comp.families)
        return got


class KeyPruner:
    """durable.service.SegmentPruner for a `key=` read: the seqs of the segment's entries
    with that routing key, from the companion's routing-key family; a segment whose lexicon
    run says it lacks the key is skipped without opening its companion."""

    def __init__(self, index: StreamIndex, key: str) -> None:
        self.index, self.key = index, key

    async def __call__(self, seg: SegmentItem) -> frozenset[int] | None:
        run = await self.index.run_for(seg)
        if run is not None and run.may_hold(seg, self.key) is False:
            return frozenset()  # the run's lexicon proves the key absent: not even opened
        comp = await self.index.companion(seg)
        if comp is None or "rk" not in comp.families:
            return None

        def with_key() -> frozenset[int]:
            seqs = comp.seqs()
            return frozenset(seqs[o] for o in comp.docs_with_key(self.key))

        return await self.index.use(seg, comp, with_key)


class BothPruner:
    """Entries both pruners allow (either one alone where the other has no answer)."""

    def __init__(self, a: KeyPruner, b: QueryPruner) -> None:
        self.a, self.b = a, b

    def warm(self, segs: Iterable[SegmentItem]) -> None:
        self.b.warm(segs)

    @property
    def fts_section_get_ms(self) -> float:
        return self.b.fts_section_get_ms

    async def __call__(self, seg: SegmentItem) -> frozenset[int] | None:
        x, y = await self.a(seg), await self.b(seg)
        if x is None or y is None:
            return y if x is None else x
        return x & y


def read_pruner(
    index: StreamIndex, key: str | None, pred: Predicate | None
) -> KeyPruner | QueryPruner | BothPruner | None:
    """The pruner of a `key=` and/or `filter=` read (None for a plain read)."""
    by_key = KeyPruner(index, key) if key is not None else None
    by_pred = QueryPruner(index, pred) if pred is not None else None
    if by_key is not None and by_pred is not None:
        return BothPruner(by_key, by_pred)
    return by_key or by_pred


async def open_index(
    engine: LogEngine,
    catalogue: IndexCatalogueStore,
    head: Head,
    registry: Mapping[str, Any],
    cache: CompanionCache | None = None,
) -> StreamIndex | None:
    """The stream's index if any of it is usable now (None: scan everything)."""
    plan = IndexPlan.from_registry(registry)
    if plan is None or not head.sealed_through:
        return None
    cat = await engine.run_io(catalogue.get, head.topic, head.epoch)
    if cat is None or cat.generation != plan.generation or not cat.covered_through:
        return None
    return StreamIndex(engine, plan, cat, cache if cache is not None else _CACHE)
