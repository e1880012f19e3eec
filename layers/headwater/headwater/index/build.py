"""Building a stream's index companions: the per-segment build (a pure function of the
segment's bytes, the schema registry and the plan) and the incremental indexer that finds
sealed segments lacking a current companion, builds them oldest first, writes them to S3 and
publishes coverage in the catalogue (storage/index_catalogue.py).

The same `build_segment` runs in-process (upkeep, `make run`) and mapped over segments in the
PySpark job (glue_jobs/index_job.py): its output depends only on its inputs, so both write
byte-identical objects at the same keys, and a job run twice (or twice at once) rewrites the
same bytes and loses the catalogue race harmlessly.

Companion keys are derived, not recorded: next to the segment (`<segment key>.cix`,
engine/segment.py), so a reader that knows the catalogue (generation, covered prefix) and the
segment list knows every key, and whatever deletes a segment deletes its companion too
(engine/tiering.py). A new plan (the search config changed) resets the catalogue to cover
nothing under the new generation; segments are then rebuilt oldest first, each companion
overwritten in place. A reader checks the companion's own generation (its header) against the
catalogue's and scans a segment whose companion does not match."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from headwater.engine import companion_key, decode_segment
from headwater.engine.ports import Head, SegmentItem
from headwater.engine.ports.catalogue import Catalogue
from headwater.index.docs import docs_from_records
from headwater.index.plan import IndexPlan
from headwater.index.ports import BlobPort, CataloguePort, SegmentLister
from headwater.index.runs import compact_runs
from headwater.index.writer import build_companion


@contextlib.contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """A build allocates ~40 containers per record (decoded entries, per-field values,
    postings), none of them in reference cycles: the cyclic collector would only rescan
    them, again and again as they survive into older generations (measured: ~25-35% of a
    5,000-record segment's build). Paused for the build (process-wide; whoever paused it
    first resumes it), reference counting frees everything as usual."""
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


def build_segment(
    plan: IndexPlan, registry: Mapping[str, Any], segment_blob: bytes, deleted: Iterable[int] = ()
) -> bytes:
    """One segment's companion, without the seqs deleted since it was sealed: a pure function
    of its inputs (the Spark job maps it over segments)."""
    with _no_cycle_collection():
        _info, records = decode_segment(segment_blob)
        gone = frozenset(deleted)
        live = [r for r in records if r.seq not in gone] if gone else records
        return build_companion(plan, docs_from_records(live, registry))


@dataclass(slots=True)
class Progress:
    """What one indexer pass did."""

    generation: str = ""
    built: int = 0
    bytes: int = 0
    covered_through: int = 0
    segments: int = 0
    reset: bool = False
    lost_race: bool = False
    keys: list[str] = field(default_factory=list)
    runs: int = 0  # lexicon runs the catalogue lists after the pass
    catalogue: Catalogue | None = None  # as published (None: not read or lost)


@dataclass(frozen=True, slots=True)
class Pending:
    """One stream's next indexing step: the catalogue as read (after any reset), the plan,
    and the uncovered sealed segments to build, oldest first."""

    head: Head
    plan: IndexPlan
    catalogue: Catalogue
    todo: tuple[SegmentItem, ...]
    reset: bool


def prepare(
    head: Head,
    registry: Mapping[str, Any],
    *,
    segments: SegmentLister,
    catalogue: CataloguePort,
    now_ms: int,
    max_segments: int = 64,
) -> Pending | Progress:
    """Read the catalogue (resetting it when the plan changed) and list the next uncovered
    segments: the work, or the Progress of a pass that has nothing to do."""
    plan = IndexPlan.from_registry(registry)
    if plan is None:
        return Progress()
    gen = plan.generation
    topic, epoch = head.topic, head.epoch
    cat = catalogue.get(topic, epoch)
    reset = False
    if cat is None or cat.generation != gen:
        fresh = Catalogue(gen, 0, 0, 0, now_ms)
        if not catalogue.publish(topic, epoch, cat, fresh):
            return Progress(generation=gen, lost_race=True)
        reset, cat = True, fresh
    todo = tuple(
        s
        for s in segments.after(head, cat.covered_through, max_segments)
        if s.last_seq <= head.sealed_through
    )
    return Pending(head, plan, cat, todo, reset)


def commit(
    pending: Pending, built: Sequence[int], *, catalogue: CataloguePort, now_ms: int
) -> Progress:
    """Publish the companions built for `pending.todo[:len(built)]` (their sizes, in order):
    coverage moves from what prepare read, or not at all (another pass won: lost_race)."""
    cat = pending.catalogue
    out = Progress(generation=cat.generation, reset=pending.reset)
    if built:
        last = pending.todo[len(built) - 1]
        new = dataclasses.replace(
            cat,
            covered_through=last.last_seq,
            segments=cat.segments + len(built),
            bytes=cat.bytes + sum(built),
            updated_ms=now_ms,
        )
        if not catalogue.publish(pending.head.topic, pending.head.epoch, cat, new):
            out.lost_race = True  # another pass published (the same bytes): read again next time
            return out
        cat = new
    out.built, out.bytes = len(built), sum(built)
    out.covered_through, out.segments = cat.covered_through, cat.segments
    out.catalogue = cat
    return out


def index_stream(
    head: Head,
    registry: Mapping[str, Any],
    *,
    segments: SegmentLister,
    blobs: BlobPort,
    catalogue: CataloguePort,
    now_ms: int,
    max_segments: int = 64,
    builder: Callable[..., bytes] = build_segment,
) -> Progress:
    """One incremental pass over a stream, in this process: reset coverage if the plan
    changed, then build the next `max_segments` uncovered sealed segments oldest first and
    publish them. Safe to run in several places at once: the catalogue only moves from what
    this pass read."""
    work = prepare(
        head,
        registry,
        segments=segments,
        catalogue=catalogue,
        now_ms=now_ms,
        max_segments=max_segments,
    )
    if isinstance(work, Progress):
        return work
    sizes: list[int] = []
    keys: list[str] = []
    for seg in work.todo:
        body = builder(work.plan, registry, blobs.get(seg.key), seg.deleted)
        key = companion_key(seg.key)
        blobs.put(key, body)
        keys.append(key)
        sizes.append(len(body))
    out = commit(work, sizes, catalogue=catalogue, now_ms=now_ms)
    out.keys = keys
    if out.lost_race:
        return out
    cat = out.catalogue
    assert cat is not None
    after, written = compact_runs(
        head,
        cat,
        routing_keys=work.plan.routing_keys,
        segments=segments,
        blobs=blobs,
        catalogue=catalogue,
        now_ms=now_ms,
    )
    out.keys += written
    out.runs = len(after.runs) if after is not None else len(cat.runs)
    out.lost_race = after is None
    return out
