"""Engine request/result values (frozen, slotted)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from headwater.engine.ports import Head, ProducerClaim
from headwater.engine.records import NewRecord, StoredRecord
from headwater.errors import HeadwaterError

__all__ = ["ProducerClaim"]


@dataclass(frozen=True, slots=True)
class Admit:
    """A guard's verdict: append the records and set the head's ext to `ext`."""

    ext: str
    note: Any = None


@dataclass(frozen=True, slots=True)
class Settle:
    """A guard's verdict: append nothing; the caller gets `note` back (a duplicate, say)."""

    note: Any = None


# A guard sees the head the commit builds on, the ext and the head seq as left by the
# requests ahead of it in the same group commit; it answers Admit or Settle, or raises a
# HeadwaterError (the request's result). The commit is conditional on ext, so the verdict
# holds atomically.
Guard = Callable[[Head, str, int], Admit | Settle]


class ClaimRefused(HeadwaterError):
    """A producer claim its producer's stored state does not take (a duplicate, a stale
    epoch, a gap): nothing was written. `stored` is that state, (epoch, seq), or None for a
    producer with none; the protocol layer says which error (or duplicate) it is."""

    status, code = 409, "producer_conflict"

    def __init__(self, producer: str, stored: tuple[int, int] | None) -> None:
        super().__init__(f"producer {producer!r} does not take this write")
        self.producer = producer
        self.stored = stored


@dataclass(frozen=True, slots=True)
class AppendRequest:
    """One append: its records, and what decides whether and how it applies (an
    idempotency key, a create with its config, a guard, an append-time hint)."""

    records: list[NewRecord]
    idempotency_key: str | None = None
    create: bool | None = None
    config: dict[str, Any] | None = None  # validated patch, applied only on create
    guard: Guard | None = None
    ts_hint: int | None = None  # append-time hint (ms); clamped so time never goes back
    # On create: the topic's log starts after this seq (a Durable Streams fork continues its
    # source's offsets; seqs up to base_seq are served from the source, not this topic).
    base_seq: int = 0
    claim: ProducerClaim | None = None  # an idempotent producer's write (ClaimRefused)
    # A topic at its write ceiling (its head key throttled): answer 429 `throttled` with
    # Retry-After at once (True: /v0's default, /v1), or wait in storage's back-off
    # (False: /v0's `disable_backpressure`, the surfaces whose specs have no 429).
    backpressure: bool = False


@dataclass(frozen=True, slots=True)
class AppendResult:
    """What an append did: the seqs it got (or, deduped, the first attempt's), the head
    after it, and whether it created the topic."""

    first_seq: int
    last_seq: int
    head_seq: int
    created: bool
    deduped: bool
    note: Any = None  # from the request's guard
    ts: int = 0  # append time (ms) of a new write; 0 for a duplicate


@dataclass(frozen=True, slots=True)
class DiffRequest:
    """A /v0 diff: records after `from_seq`, filtered and bounded, waiting up to `wait_ms`
    for one when there is none yet."""

    from_seq: int = 0
    limit: int = 256
    nodes: frozenset[str] = frozenset()
    include_tags: bool = False
    include_meta: bool = True
    wait_ms: int = 0
    max_bytes: int = 1 << 20
    # "eventual": a live reader may start from the head this process last saw (kept fresh
    # by commits and the HeadHub) instead of a strongly consistent head read.
    consistency: str = "strong"


@dataclass(frozen=True, slots=True)
class Tombstone:
    """Records a reader asked for that are gone (evicted, expired or trimmed): the gap,
    why, and about how many it missed."""

    gap_from: int
    gap_to: int
    reason: str
    missed_estimate: int
    earliest_seq: int
    head_seq: int


@dataclass(frozen=True, slots=True)
class DiffResult:
    """A /v0 diff answer: the rendered records, where the next diff starts, the head it
    read, and a tombstone when records in the asked range are gone."""

    records: list[bytes]  # each a rendered JSON object (see StoredRecord.render)
    next_from_seq: int
    head: Head
    scanned: int
    tombstone: Tombstone | None = None

    @property
    def caught_up(self) -> bool:
        return self.next_from_seq >= self.head.head_seq


@dataclass(frozen=True, slots=True)
class TagMatch:
    """A tag to match: exactly, or as a prefix (the glob "X*")."""

    value: str
    prefix: bool  # Glob "X*" → prefix "X"


@dataclass(frozen=True, slots=True)
class DeleteResult:
    """How many records a delete removed, and the head after it."""

    deleted: int
    head: Head


@dataclass(frozen=True, slots=True)
class TopicPage:
    """One page of a topic listing, and the name the next page starts after."""

    heads: list[Head]
    next_after: str | None


@dataclass(frozen=True, slots=True)
class RangeRead:
    """Stored records after a seq (raw, for protocol layers that frame them themselves)."""

    head: Head
    records: list[StoredRecord]
    next_seq: int  # the last seq examined (or the start, when none was)
    scanned_bytes: int
