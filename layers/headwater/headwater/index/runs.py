"""Routing-key lexicon runs: the routing-key families of RUN_SEGMENTS consecutive covered
segments compacted into one object, so `_routing_keys` reads one object per run instead of
one companion per segment, and a `key=` read skips a run's segments that do not hold the key
without opening their companions.

A run holds the sorted lexicon of distinct routing keys of its segments and, per key, a
bitmask of the run's segments holding it (bit i: the i-th segment), plus each segment's
(first seq, last seq, live entries) as its companion saw them. It is stored next to its last
segment (`<segment key>.rkr`), so whatever deletes that segment (retention, stream deletion)
deletes the run too (engine/tiering.py, engine/log.py); the catalogue lists the runs
(storage/index_catalogue.py).

Exactness. The lexicon answers `_routing_keys` for its segments only while every one of them
is still there and none of their entries was deleted since (the live counts match the
segment items): retention that trimmed part of a run, or a record delete, makes the run
unusable for listing and those segments are answered per companion or scanned. A key's
bitmask is a proof of absence for pruning (sealed segments never gain entries), so `key=`
reads use it whatever was deleted since.

`build_run` is a pure function of the generation and its members' companions (the Glue job
maps it over runs; the in-process indexer calls it in a loop): the same inputs give the same
bytes at the same key, so two builders at once write identical objects and one of them
publishes."""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from headwater.engine import companion_key, lexicon_run_key
from headwater.engine.ports import Head, SegmentItem
from headwater.engine.ports.catalogue import Catalogue
from headwater.index.companion import Companion
from headwater.index.format import CompanionError
from headwater.index.ports import BlobPort, CataloguePort, SegmentLister

RUN_SEGMENTS = 16
MAX_RUNS_PER_PASS = 8
FORMAT = 1


run_key = lexicon_run_key  # where the run ending with a segment is stored


def span_of(group: Sequence[SegmentItem]) -> tuple[int, int, str]:
    """A run's catalogue entry: its seqs and the name of its last segment's object."""
    return group[0].first_seq, group[-1].last_seq, group[-1].key.rsplit("/", 1)[-1]


def key_of(span: tuple[int, int, str], member: SegmentItem) -> str:
    """The object key of a run from its catalogue entry and any member segment (they share
    a folder)."""
    return run_key(member.key.rsplit("/", 1)[0] + "/" + span[2])


@dataclass(frozen=True, slots=True)
class RunMember:
    first_seq: int
    last_seq: int
    live: int  # entries the member's companion holds (the segment's count minus deletes)


class LexiconRunError(ValueError):
    """A run object that cannot be decoded."""


def build_run(generation: str, members: Sequence[tuple[RunMember, Sequence[str]]]) -> bytes:
    """The run of these members (in seq order), each with its sorted distinct routing keys."""
    if not members or len(members) > 62:
        raise ValueError("a run holds 1 to 62 segments")
    masks: dict[str, int] = {}
    for i, (_m, keys) in enumerate(members):
        bit = 1 << i
        for k in keys:
            masks[k] = masks.get(k, 0) | bit
    order = sorted(masks)
    doc = {
        "v": FORMAT,
        "generation": generation,
        "segments": [[m.first_seq, m.last_seq, m.live] for m, _ in members],
        "keys": order,
        "masks": [masks[k] for k in order],
    }
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


class LexiconRun:
    """A decoded run."""

    __slots__ = ("_by_first", "generation", "keys", "masks", "members")

    def __init__(
        self, generation: str, members: list[RunMember], keys: list[str], masks: list[int]
    ) -> None:
        self.generation = generation
        self.members = members
        self.keys = keys
        self.masks = masks
        self._by_first = {m.first_seq: i for i, m in enumerate(members)}

    @property
    def first_seq(self) -> int:
        return self.members[0].first_seq

    @property
    def last_seq(self) -> int:
        return self.members[-1].last_seq

    @classmethod
    def from_bytes(cls, raw: bytes) -> LexiconRun:
        try:
            doc = json.loads(raw)
            if doc.get("v") != FORMAT:
                raise LexiconRunError(f"unknown lexicon run format {doc.get('v')!r}")
            members = [RunMember(int(a), int(b), int(n)) for a, b, n in doc["segments"]]
            keys, masks = list(doc["keys"]), [int(m) for m in doc["masks"]]
            gen = str(doc["generation"])
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise LexiconRunError(f"lexicon run is not valid: {exc}") from None
        if not members or len(keys) != len(masks) or keys != sorted(set(keys)):
            raise LexiconRunError("lexicon run is not valid: inconsistent sections")
        return cls(gen, members, keys, masks)

    def member_of(self, seg: SegmentItem) -> int | None:
        """The member index of this segment (None: not one of the run's segments)."""
        i = self._by_first.get(seg.first_seq)
        if i is None or self.members[i].last_seq != seg.last_seq:
            return None
        return i

    def may_hold(self, seg: SegmentItem, key: str) -> bool | None:
        """Whether the segment can hold entries with routing key `key` (None: the segment
        is not in this run)."""
        i = self.member_of(seg)
        if i is None:
            return None
        j = bisect.bisect_left(self.keys, key)
        return j < len(self.keys) and self.keys[j] == key and bool(self.masks[j] >> i & 1)

    def listable(self, by_first: dict[int, SegmentItem]) -> bool:
        """Whether the lexicon is exactly the keys of the stream's current segments it
        spans: every member still there, with no entry deleted since it was built."""
        for m in self.members:
            s = by_first.get(m.first_seq)
            if s is None or s.last_seq != m.last_seq or s.count - s.deleted_count != m.live:
                return False
        return True


# --------------------------------------------------------------------------- compaction
def plan_runs(
    head: Head, cat: Catalogue, segments: SegmentLister, max_runs: int = MAX_RUNS_PER_PASS
) -> list[list[SegmentItem]]:
    """The next runs to build: groups of RUN_SEGMENTS covered segments after the last run."""
    start = cat.runs[-1][1] if cat.runs else 0
    segs = [
        s
        for s in segments.after(head, start, RUN_SEGMENTS * max_runs)
        if s.last_seq <= cat.covered_through
    ]
    return [
        segs[i : i + RUN_SEGMENTS] for i in range(0, len(segs) - RUN_SEGMENTS + 1, RUN_SEGMENTS)
    ]


def build_run_of(
    generation: str, members: Sequence[tuple[int, int, str]], get: Callable[[str], bytes]
) -> bytes | None:
    """The run over these segments ((first seq, last seq, object key) each, in order) from
    their companions (None: one of them is missing, unreadable, built for another plan or
    without routing keys: not compacted yet)."""
    got: list[tuple[RunMember, Sequence[str]]] = []
    for first, last, key in members:
        try:
            comp = Companion.from_bytes(get(companion_key(key)))
        except (CompanionError, LookupError):
            return None
        if comp.generation != generation or "rk" not in comp.families:
            return None
        got.append((RunMember(first, last, comp.doc_count), comp.routing_keys()))
    return build_run(generation, got)


def members_of(group: Sequence[SegmentItem]) -> tuple[tuple[int, int, str], ...]:
    return tuple((s.first_seq, s.last_seq, s.key) for s in group)


def publish_runs(
    head: Head,
    cat: Catalogue,
    built: Sequence[tuple[int, int, str]],
    *,
    segments: SegmentLister,
    catalogue: CataloguePort,
    now_ms: int,
) -> Catalogue | None:
    """Add the built runs (their (first, last) seqs, in order, continuing the catalogue's) and
    drop runs whose segments retention has removed entirely. None: another builder moved the
    catalogue first (it is read again next pass)."""
    earliest = segments.after(head, 0, 1)
    floor = earliest[0].first_seq if earliest else head.head_seq + 1
    kept = tuple(r for r in cat.runs if r[1] >= floor)
    new = replace(cat, runs=kept + tuple(built), updated_ms=now_ms)
    if new.runs == cat.runs:
        return cat
    if not catalogue.publish(head.topic, head.epoch, cat, new):
        return None
    return new


def compact_runs(
    head: Head,
    cat: Catalogue,
    *,
    routing_keys: bool,
    segments: SegmentLister,
    blobs: BlobPort,
    catalogue: CataloguePort,
    now_ms: int,
    max_runs: int = MAX_RUNS_PER_PASS,
) -> tuple[Catalogue | None, list[str]]:
    """One compaction pass in this process: build the next runs over covered segments, write
    them, publish them. (catalogue after it, or None on a lost race; the keys written)."""
    if not routing_keys:
        return cat, []
    built: list[tuple[int, int, str]] = []
    keys: list[str] = []
    for group in plan_runs(head, cat, segments, max_runs):
        body = build_run_of(cat.generation, members_of(group), _getter(blobs))
        if body is None:
            break
        key = run_key(group[-1].key)
        blobs.put(key, body)
        keys.append(key)
        built.append(span_of(group))
    if not built:
        return cat, keys
    return publish_runs(
        head, cat, built, segments=segments, catalogue=catalogue, now_ms=now_ms
    ), keys


def _getter(blobs: BlobPort) -> Callable[[str], bytes]:
    def get(key: str) -> bytes:
        try:
            return blobs.get(key)
        except Exception as exc:  # a missing or unreadable companion: not compacted yet
            raise LookupError(key) from exc

    return get


def runs_touching(cat: Catalogue, seg: SegmentItem) -> tuple[int, int, str] | None:
    """The catalogue's run whose seq range holds this segment, if any."""
    i = bisect.bisect_right(cat.runs, (seg.first_seq, 2**63, "")) - 1
    if i >= 0 and cat.runs[i][0] <= seg.first_seq and seg.last_seq <= cat.runs[i][1]:
        return cat.runs[i]
    return None
